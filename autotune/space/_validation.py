"""Turn a pydantic ValidationError on a search space into one ConfigError that names the file,
the field path (`parameters.page_size.low`), the line when the YAML text is known, and for an
unknown key the keys that would be valid."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Annotated, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from autotune.errors import ConfigError
from autotune.space._checks import valid_hint
from autotune.space.params import PARAM_TYPES, Problems, dotted

if TYPE_CHECKING:
    import yaml
    from pydantic_core import ErrorDetails

Loc = tuple[str | int, ...]


def config_error(
    exc: ValidationError,
    source: str,
    *,
    data: object = None,
    text: str | None = None,
    root: type[BaseModel],
) -> ConfigError:
    """One ConfigError listing every problem of `exc` (raised validating `data` as `root`, the
    model whose keys an unknown key's hint lists)."""
    problems: list[tuple[Loc, str]] = []
    for err in exc.errors(include_url=False):
        for loc, msg in _explain(err, root, data):
            if (loc, msg) not in problems:
                problems.append((loc, msg))
    lines = []
    for loc, msg in problems:
        line = _line_of(text, loc) if text is not None else None
        lines.append((dotted(loc), msg + (f" (line {line})" if line else "")))
    if len(lines) == 1:
        path, msg = lines[0]
        return ConfigError(msg, source=source, field=path or None)
    body = "\n".join(f"  {source}: {p}: {m}" if p else f"  {source}: {m}" for p, m in lines)
    return ConfigError(f"{len(lines)} problems:\n{body}", source=source)


def _explain(err: ErrorDetails, root: type[BaseModel], data: object) -> list[tuple[Loc, str]]:
    loc = _clean(tuple(err["loc"]), data)
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "value_error" and isinstance(ctx.get("error"), Problems):
        return [((*loc, *p), m) for p, m in ctx["error"].problems]
    if kind == "extra_forbidden":
        valid = _keys_at(root, tuple(err["loc"])[:-1])
        return [(loc, "unknown key" + (valid_hint(str(loc[-1]), valid) if valid else ""))]
    if kind == "union_tag_invalid":
        tag = str(ctx.get("tag"))
        return [((*loc, "type"), f"{tag!r} is not a parameter type{valid_hint(tag, PARAM_TYPES)}")]
    if kind == "union_tag_not_found":
        return [((*loc, "type"), f"missing; valid: {', '.join(PARAM_TYPES)}")]
    if kind == "too_short":
        return [(loc, f"must list at least {ctx.get('min_length', 1)} value(s)")]
    if kind == "missing":
        return [(loc, "required key is missing")]
    msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    value = err.get("input")
    if not kind.startswith("value_error") and isinstance(value, str | int | float | bool):
        msg += f", got {value!r}"
    elif value is None and "type" in kind:
        msg += ", got null"
    return [(loc, msg)]


def _clean(loc: Loc, data: object) -> Loc:
    """Drop what pydantic adds to a path that the file does not have: the union tag after a
    parameter name, and the list index of a single-mapping `condition`."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict):
            if part in node:
                node = node[part]
                out.append(part)
                continue
            if isinstance(part, int) or part == node.get("type"):
                continue
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            out.append(part)
            continue
        node = None
        out.append(part)
    return tuple(out)


def _unwrap(t: object) -> object:
    while True:
        origin = get_origin(t)
        if origin is Annotated:
            t = get_args(t)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(t) if a is not type(None)]
            if len(args) != 1:
                return t
            t = args[0]
        else:
            return t


def _keys_at(root: type[BaseModel], loc: Loc) -> list[str]:
    """The keys valid at `loc` (a pydantic loc, tags included), or [] if not a model there."""
    t: object = root
    for part in loc:
        t = _unwrap(t)
        if isinstance(t, type) and issubclass(t, BaseModel):
            field = next((f for n, f in t.model_fields.items() if part in (n, f.alias)), None)
            if field is None:
                return []
            t = field.annotation
            continue
        origin = get_origin(t)
        if origin is dict:
            t = get_args(t)[1]
        elif origin in (list, tuple):
            t = get_args(t)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(t) if isinstance(a, type) and issubclass(a, BaseModel)]
            t = next((m for m in members if _tag(m) == part), None)
            if t is None:
                return []
        else:
            return []
    t = _unwrap(t)
    if isinstance(t, type) and issubclass(t, BaseModel):
        return [f.alias or n for n, f in t.model_fields.items()]
    return []


def _tag(model: type[BaseModel]) -> object:
    field = model.model_fields.get("type")
    return field.default if field is not None else None


def _line_of(text: str, loc: Loc) -> int | None:
    """1-based line of the YAML node at `loc` (of the key, for the last mapping step)."""
    import yaml

    try:
        node: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if str(k.value) == str(part)), None)
            if hit is None:
                break
            line = hit[0].start_mark.line + 1
            node = hit[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
