"""Read search spaces from YAML (`search_spaces/<engine>.yaml` ships with autotune).

Every error is a ConfigError that names the file and the field path, with the line:
    search_spaces/x.yaml: parameters.page_sise: unknown parameter; did you mean 'page_size'? (line 9)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from autotune.errors import ConfigError, UnknownNameError
from autotune.space.models import SearchSpace

SPACES_ENV = "AUTOTUNE_SEARCH_SPACES"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (YAML keeps the last silently,
    which would hide a second definition of the same parameter)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key {key!r} appears twice (first on line {seen[key]})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def parse_space(text: str, source: str = "<string>") -> SearchSpace:
    """A SearchSpace from YAML text; `source` names it in error messages."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{where}YAML syntax error: {problem}", source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"YAML syntax error: {exc}", source=source) from None
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(
            f"expected a mapping with keys engine, parameters, fixed, rules; got {got}",
            source=source,
        )
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        from autotune.space._validation import config_error

        raise config_error(exc, source, data=data, text=text) from None


def load_space(path: str | Path) -> SearchSpace:
    """Load and validate a search-space YAML file."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such search-space file", source=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the file: {exc}", source=source) from None
    return parse_space(text, source=source)


def dump_space(space: SearchSpace) -> str:
    """YAML text that loads back to an equal space."""
    return yaml.safe_dump(space.to_dict(), sort_keys=False, allow_unicode=True)


def spaces_dir() -> Path:
    """Where the built-in spaces live: $AUTOTUNE_SEARCH_SPACES, else `search_spaces/` at the
    top of the source tree (next to the `autotune` package), else the copy installed as
    package data under `autotune/data/search_spaces/`."""
    env = os.environ.get(SPACES_ENV)
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "search_spaces", here / "data" / "search_spaces"):
        if candidate.is_dir():
            return candidate
    raise ConfigError(
        f"built-in search spaces not found (looked in {here.parent / 'search_spaces'} and "
        f"{here / 'data' / 'search_spaces'}); set {SPACES_ENV} to the search_spaces folder"
    )


def builtin_spaces() -> list[str]:
    """Engine names that have a built-in space."""
    return sorted(p.stem for p in spaces_dir().glob("*.yaml"))


def builtin_space(engine: str) -> SearchSpace:
    """The shipped search space for `engine` (search_spaces/<engine>.yaml)."""
    path = spaces_dir() / f"{engine}.yaml"
    if not path.is_file():
        raise UnknownNameError("built-in search space", engine, builtin_spaces())
    return load_space(path)
