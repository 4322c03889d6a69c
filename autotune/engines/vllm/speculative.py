"""vLLM's speculative decoding as one `--speculative-config` JSON element.

The search space's pseudo fields (`speculative_method`, `num_speculative_tokens`,
`prompt_lookup_max`, `prompt_lookup_min`, `speculative_model`; autotune.engines.vllm.fields)
fold into the SpeculativeConfig object, compact JSON in one argv element: the form every release
0.10.0 .. 0.33.0 accepts. `speculative_config` given whole is validated and passed through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.engines.vllm.fields import (
    FIELDS,
    NGRAM_METHODS,
    SPECULATIVE_FIELDS,
    SPECULATIVE_KEYS,
    TABLE,
)
from autotune.engines.vllm.releases import method_ranges, parse_version, speculative_methods
from autotune.engines.vllm.values import check_value, json_object
from autotune.errors import ConfigError, UnsupportedFlagError


def speculative_config(config: Mapping[str, object], version: str) -> dict[str, Any] | None:
    """The SpeculativeConfig JSON object the config's speculative fields describe (None: no
    speculation). `speculative_config` given whole is validated and passed through.

    Raises:
        ConfigError: both forms given, fields without a method, bad values.
        UnsupportedFlagError: a method this release does not know (e.g. `mtp` before 0.11.0).
    """
    version = parse_version(version)
    parts = {k: config.get(k) for k in SPECULATIVE_FIELDS if config.get(k) is not None}
    obj = _speculative_object(config.get("speculative_config"), parts)
    if obj is None:
        return None
    method = obj.get("method")
    if method is None:
        others = sorted(parts) or ["speculative_config"]
        raise ConfigError(
            f"{', '.join(others)} only apply with speculative_method set",
            field="speculative_method",
        )
    _check_method(method, version)
    _check_method_fields(obj, method)
    return obj


def _speculative_object(whole: object, parts: Mapping[str, object]) -> dict[str, Any] | None:
    """The object from `speculative_config` given whole or from the pseudo fields (checked).

    Raises:
        ConfigError: both forms given, or bad values.
    """
    if whole is not None and parts:
        raise ConfigError(
            f"set either speculative_config or {', '.join(sorted(parts))}, not both",
            field="speculative_config",
        )
    if whole is not None:
        return dict(json_object("speculative_config", "speculative_config", whole))
    if not parts:
        return None
    obj: dict[str, object] = {}
    for key in SPECULATIVE_FIELDS:
        if key in parts:
            obj[SPECULATIVE_KEYS[key]] = check_value(key, FIELDS[key], None, parts[key])
    return obj


def _check_method(method: object, version: str) -> None:
    """The method must be one `version` knows (speculative_methods).

    Raises:
        UnsupportedFlagError: a method other releases know.
        ConfigError: a method no release knows.
    """
    methods = speculative_methods(version)
    if method in methods:
        return
    have = [(a, b) for a, b, ms in method_ranges() if method in ms]
    if have:
        raise UnsupportedFlagError(
            f"speculative_method {method!r} is not supported by vLLM {version}; "
            f"releases that have it: {TABLE.ranges_text(have)}"
        )
    raise ConfigError(
        f"unknown speculative method {method!r} for vLLM {version}; valid: {', '.join(methods)}",
        field="speculative_method",
    )


def _check_method_fields(obj: Mapping[str, object], method: object) -> None:
    """The prompt-lookup bounds apply to ngram only (min <= max); other methods but suffix
    need num_speculative_tokens.

    Raises:
        ConfigError: a field the method does not take, or lacks.
    """
    lookup = [k for k in ("prompt_lookup_max", "prompt_lookup_min") if k in obj]
    if lookup and method not in NGRAM_METHODS:
        raise ConfigError(
            f"{', '.join(lookup)} only apply with speculative_method ngram", field=lookup[0]
        )
    lo, hi = obj.get("prompt_lookup_min"), obj.get("prompt_lookup_max")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        raise ConfigError(
            f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}", field="prompt_lookup_min"
        )
    if method not in NGRAM_METHODS + ("suffix",) and "num_speculative_tokens" not in obj:
        raise ConfigError(
            f"speculative_method {method!r} needs num_speculative_tokens",
            field="num_speculative_tokens",
        )
