"""A `quantization_config` mapped onto the card's Quantization: scheme, bits, group size and
weight blocks, for AWQ, GPTQ, AutoRound, FP8, compressed-tensors and modelopt packs, and the KV
cache dtype a compressed-tensors or modelopt pack declares (kv_cache_dtype)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from autotune.models.card import Quantization
from autotune.models.hf.fields import ConfigFields

_SUPPORTED_QUANT = "awq, gptq, auto-round, fp8 (block-wise), compressed-tensors, modelopt (NVFP4)"


def quantization_from_config(q: Mapping[str, Any] | None, source: Path) -> Quantization:
    """Map a `quantization_config` onto the card's Quantization (scheme, bits, group, blocks,
    the declared KV cache dtype)."""
    if q is None:
        return Quantization()
    f = ConfigFields(q, source, "quantization_config.")
    method = (f.get_str("quant_method") or "").lower().replace("_", "-")
    quant = _weights(q, f, method)
    kv = _declared_kv_dtype(q, f, method)
    return quant if kv is None else quant.model_copy(update={"kv_cache_dtype": kv})


def _declared_kv_dtype(
    q: Mapping[str, Any], f: ConfigFields, method: str
) -> Literal["fp8", "nvfp4"] | None:
    """The KV cache dtype the pack declares, as vLLM reads it (planner.vllm_dtype says from
    which release it is used):

    - compressed-tensors: a `kv_cache_scheme` object; vLLM accepts only 8-bit float
      (CompressedTensorsConfig.validate_kv_cache_scheme raises on anything else).
    - modelopt: `kv_cache_scheme` or `kv_cache_quant_algo`, at the top or in the `quantization`
      block (utils/torch_utils.py get_kv_cache_quant_algo_string): "FP8" / "NVFP4", or a static
      (dynamic false) 8-bit or a 4-bit float scheme; anything else vLLM ignores (KV left auto).
    """
    if method == "compressed-tensors":
        scheme = q.get("kv_cache_scheme")
        if scheme is None:
            return None
        if (
            isinstance(scheme, Mapping)
            and scheme.get("type") == "float"
            and (scheme.get("num_bits") == 8)
        ):
            return "fp8"
        raise f.error("kv_cache_scheme", f"is {scheme!r}; vLLM takes only an 8-bit float scheme")
    if method != "modelopt":
        return None
    inner = q.get("quantization", q)
    inner = inner if isinstance(inner, Mapping) else q
    algo = (
        inner.get("kv_cache_scheme")
        or q.get("kv_cache_scheme")
        or inner.get("kv_cache_quant_algo")
        or q.get("kv_cache_quant_algo")
    )
    if isinstance(algo, Mapping):
        if algo.get("type") != "float":
            return None
        if algo.get("num_bits") == 8 and algo.get("dynamic") is False:
            return "fp8"
        return "nvfp4" if algo.get("num_bits") == 4 else None
    name = str(algo or "").lower()
    return "fp8" if name == "fp8" else "nvfp4" if name == "nvfp4" else None


def _weights(q: Mapping[str, Any], f: ConfigFields, method: str) -> Quantization:
    """The weights' scheme, bits, group and blocks."""
    if method == "awq":
        bits = f.get_int("bits", f.get_int("w_bit", 4))
        group = _group(q.get("group_size", q.get("q_group_size")))
        return Quantization(
            scheme="awq",
            bits=bits,
            group_size=group,
            zero_point=f.get_bool("zero_point", True),
            checkpoint_format="awq",
        )
    if method in ("gptq", "auto-round"):
        packing = str(q.get("packing_format") or "")
        scheme: Literal["awq", "gptq"] = "awq" if "awq" in packing else "gptq"
        return Quantization(
            scheme=scheme,
            bits=f.get_int("bits", 4),
            group_size=_group(q.get("group_size")),
            zero_point=not f.get_bool("sym", True),
            checkpoint_format=method,
        )
    if method == "fp8":
        block = q.get("weight_block_size")
        if not block:  # per-tensor / per-channel scales
            return Quantization(
                scheme="fp8", bits=8, checkpoint_format="fp8", sglang_quantization="fp8"
            )
        return Quantization(
            scheme="fp8_block",
            bits=8,
            block_shape=_block(block, f),
            checkpoint_format="fp8",
            sglang_quantization="fp8",
        )
    if method == "compressed-tensors":
        return _compressed_tensors(q, f)
    if method == "modelopt":
        algo = str(q.get("quant_algo") or "").upper()
        if algo == "NVFP4":
            return Quantization(
                scheme="nvfp4",
                bits=4,
                group_size=_group(q.get("group_size", 16)),
                checkpoint_format="modelopt",
                sglang_quantization="modelopt_fp4",
            )
        if algo == "FP8":
            return Quantization(
                scheme="fp8",
                bits=8,
                checkpoint_format="modelopt",
                sglang_quantization="modelopt_fp8",
            )
        raise f.error("quant_algo", f"is {algo or None!r}; modelled modelopt packs: NVFP4, FP8")
    raise f.error("quant_method", f"is {method or None!r}; supported: {_SUPPORTED_QUANT}")


def _group(v: Any) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v
    return None  # -1 / None: one scale per output channel


def _block(v: Any, f: ConfigFields) -> tuple[int, int]:
    if (
        not isinstance(v, list | tuple)
        or len(v) != 2
        or not all(isinstance(x, int) and x > 0 for x in v)
    ):
        raise f.error("weight_block_size", f"must be two positive integers, got {v!r}")
    return int(v[0]), int(v[1])


def _compressed_tensors(q: Mapping[str, Any], f: ConfigFields) -> Quantization:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise f.error("config_groups", "is missing or empty; compressed-tensors needs one group")
    weights = None
    for g in groups.values():
        if isinstance(g, dict) and isinstance(g.get("weights"), dict):
            weights = g["weights"]
            break
    if weights is None:
        raise f.error("config_groups", "has no group with a 'weights' scheme")
    w = ConfigFields(weights, f.source, "quantization_config.config_groups.*.weights.")
    bits = w.get_int("num_bits")
    kind = w.get_str("type", "int")
    strategy = w.get_str("strategy", "group")
    group = _group(weights.get("group_size"))
    if kind == "int" and bits == 4:
        return Quantization(
            scheme="awq",
            bits=4,
            group_size=group,
            zero_point=not w.get_bool("symmetric", True),
            checkpoint_format="compressed-tensors",
        )
    if kind == "float" and bits == 8 and strategy == "block":
        return Quantization(
            scheme="fp8_block",
            bits=8,
            block_shape=_block(weights.get("block_structure"), w),
            checkpoint_format="compressed-tensors",
        )
    if kind == "float" and bits == 4:
        return Quantization(
            scheme="nvfp4", bits=4, group_size=group or 16, checkpoint_format="compressed-tensors"
        )
    if kind == "float" and bits == 8:
        return Quantization(scheme="fp8", bits=8, checkpoint_format="compressed-tensors")
    if kind == "int" and bits == 8:
        return Quantization(
            scheme="int8", bits=8, group_size=group, checkpoint_format="compressed-tensors"
        )
    raise w.error(
        "type",
        f"{kind} {bits}-bit ({strategy}) is not modelled yet; modelled: int4 W4A16, int8, "
        "fp8 (block-wise or per-channel), nvfp4",
    )
