"""Which knobs of a configuration can change the answers (lossy), per engine.

Lossy: a KV cache or recurrent state stored in fewer bits than the model computes in, a
quantization override, and speculative decoding (lossless in theory under greedy verification,
so a divergence there is an engine defect the guard reports). Everything else (memory split,
batching, scheduling, kernels of the same precision) should not change a greedy answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_FULL_KV = frozenset({None, "auto", "bf16", "bfloat16", "float16", "fp16", "half", "float32"})
_FULL_CACHE = frozenset({None, "f16", "f32", "bf16"})  # llama.cpp -ctk / -ctv
_FULL_STATE = frozenset({None, "auto", "float32"})


def lossy_fields(engine: str, config: Mapping[str, Any]) -> list[str]:
    """The config fields of `config` that can change its greedy answers, in config order."""
    out: list[str] = []
    for key, value in config.items():
        if value in (None, False):
            continue
        if key == "kv_cache_dtype" and value not in _FULL_KV:
            out.append(key)
        elif key in ("mamba_ssm_dtype", "mamba_ssm_cache_dtype") and value not in _FULL_STATE:
            out.append(key)
        elif key in ("cache_type_k", "cache_type_v") and value not in _FULL_CACHE:
            out.append(key)
        elif key == "quantization" and engine != "llamacpp":
            out.append(key)
        elif key in ("speculative_algorithm", "speculative_method", "spec_type") and value not in (
            "none",
        ):
            out.append(key)
    return out


def speculative_only(engine: str, config: Mapping[str, Any]) -> bool:
    """Whether speculative decoding is the configuration's only lossy knob (greedy
    verification should then reproduce the reference exactly)."""
    fields = lossy_fields(engine, config)
    return bool(fields) and all(
        f in ("speculative_algorithm", "speculative_method", "spec_type") for f in fields
    )


# The dtype knobs `quality.exclude_lossy` keeps at full precision (speculation stays: greedy
# verification is lossless, and the guard still checks it).
_DTYPE_KNOBS = {
    "kv_cache_dtype": _FULL_KV,
    "mamba_ssm_dtype": _FULL_STATE,
    "mamba_ssm_cache_dtype": _FULL_STATE,
    "cache_type_k": _FULL_CACHE,
    "cache_type_v": _FULL_CACHE,
}


def lossless_overrides(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Space overrides that keep only the full-precision values of the dtype knobs among
    `parameters` (name -> CategoricalParam-like with `choices`)."""
    out: dict[str, Any] = {}
    for name, full in _DTYPE_KNOBS.items():
        p = parameters.get(name)
        choices = getattr(p, "choices", None)
        if choices is None:
            continue
        keep = [c for c in choices if c in full]
        if len(keep) != len(choices):
            out[name] = (
                {"choices": keep, "default": None} if len(keep) > 1 else (keep or [None])[0]
            )
    return out
