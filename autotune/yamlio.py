"""One strict YAML reader for every user file (sweep specs, search spaces).

- A key given twice in one mapping is an error naming both lines (plain YAML keeps the last
  silently, which hides e.g. a second `budget:`).
- Anchors and aliases are refused: a few nested aliases expand a 2 KB file into gigabytes (and an
  error message that echoes the input), and nothing a user writes needs them.
- Nesting is limited to MAX_DEPTH levels (a deeper file is an error, not a stack overflow).
- Errors are ConfigErrors that name the file and the line, and quote at most a short excerpt.
- `line_of(text, path)` finds the line of a field path, for validation errors found later.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from autotune.errors import ConfigError

EXCERPT = 80  # characters of the input an error may quote
MAX_DEPTH = 64  # nesting levels; a spec needs fewer than 10


class StrictLoader(yaml.SafeLoader):
    """SafeLoader without duplicate keys and without aliases."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in the stubs
            raise yaml.composer.ComposerError(
                None,
                None,
                f"YAML aliases (*{event.anchor}) are not accepted: write the value out",
                event.start_mark,
            )
        event = self.peek_event()  # type: ignore[no-untyped-call]
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"YAML anchors (&{anchor}) are not accepted: write the value out",
                event.start_mark,
            )
        depth = getattr(self, "_depth", 0)
        if depth >= MAX_DEPTH:  # the composer recurses: a deep file would overflow the stack
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark
            )
        self._depth = depth + 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"key {short(key)} appears twice (first on line {seen[key]})",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def short(value: Any) -> str:
    """repr(value), cut to EXCERPT characters (error messages never echo a whole input)."""
    text = repr(value)
    return text if len(text) <= EXCERPT else text[: EXCERPT - 3] + "..."


def load_yaml(text: str, *, source: str) -> Any:
    """Parse `text` strictly (module docstring); errors name `source` and the line."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = _short_text(exc.problem or exc.context or "invalid YAML")
        raise ConfigError(f"{where}YAML syntax error: {problem}", source=source) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"YAML syntax error: {_short_text(str(exc))}", source=source) from None


def _short_text(text: str) -> str:
    return text if len(text) <= 4 * EXCERPT else text[: 4 * EXCERPT - 3] + "..."


def line_of(text: str, path: Sequence[str | int]) -> int | None:
    """The 1-based line where the field at `path` (keys and list indexes) is written, or that of
    the deepest part of it that exists; None when `text` does not parse or the first key is
    absent."""
    try:
        node = yaml.compose(text, Loader=StrictLoader)
    except yaml.YAMLError:
        return None
    line: int | None = None
    for part in path:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    line = key.start_mark.line + 1
                    node = value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line
