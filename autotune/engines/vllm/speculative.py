"""vLLM's speculative decoding as one `--speculative-config` JSON element.

The search space's pseudo fields (`speculative_method`, `num_speculative_tokens`,
`prompt_lookup_max`, `prompt_lookup_min`, `speculative_model`; autotune.engines.vllm.fields)
fold into the SpeculativeConfig object, compact JSON in one argv element: the form every release
0.10.0 .. 0.34.0 accepts. `speculative_config` given whole is validated and passed through.

A `speculative_config` with a `model` and no `method` is vLLM's own inference
(SpeculativeConfig.__post_init__): "ngram" as the model is ngram; otherwise
a dotted path without "/" is a custom proposer class (custom_class, 0.22.0 .. 0.33.0; from 0.26.0
only when every dotted part is an identifier, _is_custom_proposer_path); otherwise
the method starts as draft_model and the draft's path, lowercased, decides: "eagle-" eagle,
"eagle3" eagle3, "dflash" dflash (from 0.20.0, the release that has dflash), "dspark" dspark
(from 0.25.0), checked in that order (inferred_method; 0.10.x knows only "eagle-" and
"eagle3-", both eagle). The other cases read the draft's
config.json (medusa, mlp_speculator and MTP model types, DSpark and, from 0.28.0, one DFlash
architecture) or take the plain draft_model, which the planner cannot tell apart: such a
config must name its method.

0.34.0 drops custom_class (SpeculativeMethod; a plugin registers its own method instead,
v1/worker/gpu/spec_decode/speculator_config.py register_speculative_method) and moves the path
checks into each SpeculatorConfig's `matches` (eagle/config.py, dflash/config.py,
dspark/config.py: the same substrings, tried in _CHECKPOINT_DETECTION_ORDER eagle, eagle3,
dflash, dspark, then mtp by the draft's model_type). They run only when the draft's
architecture declares no speculator of its own (SpeculativeDraftModel.speculator_config_class,
e.g. the DFlash, DSpark and Gemma4 MTP drafts; _resolve_checkpoint_config_class), which the
planner cannot see: from 0.34.0 the name rule takes the path to name the checkpoint's own kind.
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
from autotune.versions import Version


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
    method = speculative_method(obj, version)
    if method is None:
        if obj.get("model") is not None and not parts:
            raise ConfigError(
                f"speculative_config names model {obj['model']!r} without a method: vLLM then "
                "reads the draft's config.json or takes draft_model; set its method",
                field="speculative_config",
            )
        others = sorted(parts) or ["speculative_config"]
        raise ConfigError(
            f"{', '.join(others)} only apply with speculative_method set",
            field="speculative_method",
        )
    _check_method(method, version)
    _check_method_fields(obj, method)
    return obj


# (substring of the draft's lowercased path, method) in the order vLLM checks them; a pair
# applies in the releases that have its method.
NAME_METHODS = (
    ("eagle-", "eagle"),
    ("eagle3", "eagle3"),
    ("dflash", "dflash"),
    ("dspark", "dspark"),
)


def inferred_method(model: object, version: str) -> str | None:
    """The method vLLM `version` infers from a draft path alone (module docstring); None when
    it would read the draft's config.json, or take draft_model."""
    if not isinstance(model, str):
        return None
    if model in ("ngram", "[ngram]"):
        return "ngram"
    version = parse_version(version)
    methods = speculative_methods(version)
    if "custom_class" in methods and _custom_proposer_path(model, version):
        return "custom_class"
    text = model.lower()
    if Version(version) < Version("0.11.0"):  # 0.10.x: "eagle-" or "eagle3-", both eagle
        return "eagle" if "eagle-" in text or "eagle3-" in text else None
    return next((m for key, m in NAME_METHODS if key in text and m in methods), None)


def _custom_proposer_path(model: str, version: str) -> bool:
    if model.startswith(("http://", "https://", "file://")) or "/" in model or "." not in model:
        return False
    parts = model.split(".")
    return Version(version) < Version("0.26.0") or all(p.isidentifier() for p in parts)


def speculative_method(obj: Mapping[str, Any], version: str) -> str | None:
    """The speculative config's method: as given, else as vLLM infers it from the draft path."""
    method = obj.get("method")
    if method is not None:
        return str(method)
    return inferred_method(obj.get("model"), version)


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
