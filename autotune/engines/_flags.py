"""What every engine's flag builder does first: map config keys to the engine's canonical field
names, refusing keys the launcher sets itself and two keys (aliases) for one option. vLLM's
builder lets aliases agree on one value (`merge_equal`: the sweep adds tp_size beside
tensor_parallel_size)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotune.errors import ConfigError


def by_canonical_field(
    config: Mapping[str, Any],
    reserved: Mapping[str, str],
    canonical_field: Callable[[str], str],
    *,
    merge_equal: bool = False,
) -> dict[str, tuple[str, Any]]:
    """{canonical field: (key as written, value)}. With `merge_equal`, two keys for one option
    may both be given when they agree (or one is None).

    Raises:
        ConfigError: a reserved key (model, host, port: launcher arguments) or two keys that
            name the same option (with `merge_equal`: with two different values).
        UnknownNameError: from `canonical_field`.
    """
    out: dict[str, tuple[str, Any]] = {}
    for key, value in config.items():
        if key in reserved:
            raise ConfigError(
                f"is set by the launcher's {reserved[key]!r} argument, not by the config",
                field=key,
            )
        canonical = canonical_field(key)
        if canonical in out:
            other, before = out[canonical]
            if not merge_equal:
                raise ConfigError(f"sets the same option as {other!r}; keep one", field=key)
            if before == value or value is None:
                continue
            if before is not None:
                raise ConfigError(
                    f"sets the same option as {other!r} to another value ({value!r} vs "
                    f"{before!r}); keep one",
                    field=key,
                )
        out[canonical] = (key, value)
    return out
