"""Read search spaces from YAML (`autotune/data/search_spaces/<engine>.yaml` ships with
autotune as package data, read through importlib.resources).

Every error is a ConfigError that names the file and the field path, with the line:
    x.yaml: parameters.page_sise: unknown parameter; did you mean 'page_size'? (line 9)
"""

from __future__ import annotations

import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import yaml
from pydantic import ValidationError

from autotune.errors import ConfigError, UnknownNameError
from autotune.space._validation import config_error
from autotune.space.models import SearchSpace
from autotune.yamlio import load_yaml

SPACES_ENV = "AUTOTUNE_SEARCH_SPACES"


def parse_space(text: str, source: str = "<string>") -> SearchSpace:
    """A SearchSpace from YAML text; `source` names it in error messages."""
    data = load_yaml(text, source=source)  # no duplicate keys, no aliases (autotune/yamlio.py)
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(
            f"expected a mapping with keys engine, parameters, fixed, rules; got {got}",
            source=source,
        )
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, source, data=data, text=text, root=SearchSpace) from None


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


def spaces_dir() -> Traversable:
    """Where the built-in spaces live: $AUTOTUNE_SEARCH_SPACES (a folder), else the package
    data `autotune/data/search_spaces/` (in a checkout and in an installed wheel alike)."""
    env = os.environ.get(SPACES_ENV)
    if env:
        return Path(env)
    folder = resources.files("autotune").joinpath("data", "search_spaces")
    if not folder.is_dir():
        raise ConfigError(
            f"built-in search spaces not found (no package data {folder}); reinstall autotune "
            f"or set {SPACES_ENV} to a folder of <engine>.yaml files"
        )
    return folder


def builtin_spaces() -> list[str]:
    """Engine names that have a built-in space."""
    return sorted(
        p.name.removesuffix(".yaml")
        for p in spaces_dir().iterdir()
        if p.name.endswith(".yaml") and p.is_file()
    )


def builtin_space(engine: str) -> SearchSpace:
    """The shipped search space for `engine` (autotune/data/search_spaces/<engine>.yaml)."""
    path = spaces_dir().joinpath(f"{engine}.yaml")
    if not path.is_file():
        raise UnknownNameError("built-in search space", engine, builtin_spaces())
    if isinstance(path, Path):
        return load_space(path)
    return parse_space(path.read_text(encoding="utf-8"), source=f"builtin:{engine}.yaml")
