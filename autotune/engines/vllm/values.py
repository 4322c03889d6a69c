"""vLLM config values -> argv tokens: the checks argparse does not do (by the field's value type,
else the flag's kind), then the tokens for the flag's kind (switch, list, one value; dicts and
lists as compact JSON, one argv element, never through a shell)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeGuard

from autotune.engines._flags import check_choices, switch_tokens
from autotune.engines.vllm.fields import LAST, TABLE, Field, ValueType
from autotune.engines.vllm.releases import FlagSpec, release_index
from autotune.errors import ConfigError


def is_int(value: object) -> TypeGuard[int]:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> TypeGuard[int | float]:
    return is_int(value) or isinstance(value, float)


def _bool(name: str, flag: str, value: object) -> object:
    if not isinstance(value, bool):
        raise ConfigError(f"{flag} is a switch: expects true or false, got {value!r}", field=name)
    return value


def _int(name: str, flag: str, value: object) -> object:
    if not is_int(value):
        raise ConfigError(f"{flag} expects an integer, got {value!r}", field=name)
    return value


def _float(name: str, flag: str, value: object) -> object:
    if not _number(value):
        raise ConfigError(f"{flag} expects a number, got {value!r}", field=name)
    return value


def _fraction(name: str, flag: str, value: object) -> object:
    if not _number(value) or not 0 < value <= 1:
        raise ConfigError(f"{flag} expects a fraction in (0, 1], got {value!r}", field=name)
    return value


def _str(name: str, flag: str, value: object) -> object:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{flag} expects a non-empty string, got {value!r}", field=name)
    return value


def _int_list(name: str, flag: str, value: object) -> object:
    if not isinstance(value, list | tuple) or not value or not all(map(is_int, value)):
        raise ConfigError(f"{flag} expects a list of integers, got {value!r}", field=name)
    sizes = sorted({v for v in value if is_int(v)})
    if sizes[0] < 1:
        raise ConfigError(f"{flag} sizes must be positive, got {sizes!r}", field=name)
    return sizes


def _str_or_list(name: str, flag: str, value: object) -> object:
    items = [value] if isinstance(value, str) else value
    if (
        not isinstance(items, list | tuple)
        or not items
        or not all(isinstance(v, str) and v for v in items)
    ):
        raise ConfigError(f"{flag} expects a name or a list of names, got {value!r}", field=name)
    return list(items)


def json_object(name: str, flag: str, value: object) -> dict[str, Any]:
    """A JSON object given as a dict or as JSON text.

    Raises:
        ConfigError: anything else.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{flag} expects a JSON object: {exc}", field=name) from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} expects a JSON object, got {value!r}", field=name)
    return value


# value type -> its check (key, flag, value) -> the value normalized
_CHECKS: dict[ValueType, Callable[[str, str, object], object]] = {
    "bool": _bool,
    "int": _int,
    "float": _float,
    "fraction": _fraction,
    "str": _str,
    "int_list": _int_list,
    "str_or_list": _str_or_list,
    "json": json_object,
}


def check_value(name: str, field: Field, spec: FlagSpec | None, value: object) -> object:
    """Validate a value against the field's type (or the flag's kind); returns it normalized
    (int lists sorted without repeats, a name as a list, JSON text parsed).

    Raises:
        ConfigError: a value of the wrong type, or an int below the field's minimum.
    """
    typ = field.type
    if typ is None and spec is not None:
        typ = "bool" if spec.kind in ("b", "n") else None
    flag = spec.flag if spec is not None else name
    if typ is not None:
        value = _CHECKS[typ](name, flag, value)
    if typ != "bool" and field.minimum is not None and is_int(value) and value < field.minimum:
        raise ConfigError(f"{flag} must be at least {field.minimum:g}, got {value}", field=name)
    return value


def _scalar(name: str, spec: FlagSpec, value: object) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool) or not isinstance(value, str | int | float) or value == "":
        raise ConfigError(f"{spec.flag} expects a value, got {value!r}", field=name)
    return str(value)


def render(name: str, spec: FlagSpec, value: object, version: str) -> list[str]:
    """The argv tokens for a checked value of the flag `spec`, flag included.

    Raises:
        ConfigError: no value, a list for a one-value flag, or a value outside the choices.
    """
    flag = spec.flag
    if spec.kind in ("b", "n"):
        return switch_tokens(name, flag, spec.kind == "n", value)
    if spec.kind == "o" and isinstance(value, bool):
        return [flag] if value else []
    if spec.kind == "l":
        items = list(value) if isinstance(value, list | tuple) else [value]
        if not items:
            raise ConfigError(f"{flag} needs at least one value", field=name)
        tokens = [_scalar(name, spec, v) for v in items]
    else:
        if isinstance(value, list | tuple):
            raise ConfigError(f"{flag} takes one value, got a list {value!r}", field=name)
        tokens = [_scalar(name, spec, value)]
    check_choices(name, flag, tokens, spec.choices, f"vLLM {version}")
    return [flag, *tokens]


def env_value(key: str, field: Field, value: object, i: int) -> str:
    """An env-only field's value ("1" / "0") for the release at catalogue index `i`.

    Raises:
        UnsupportedFlagError: the release predates the variable.
        ConfigError: not a bool.
    """
    assert field.env is not None
    since = release_index(field.env_since)
    if i < since:
        raise TABLE.unsupported(f"{key!r} ({field.env})", i, [(since, release_index(LAST))])
    return "1" if check_value(key, field, None, value) else "0"
