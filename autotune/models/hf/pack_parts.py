"""Which parts of a decoder layer a quantized pack quantizes, and at how many bytes per weight:
the module names each part goes by, matched against a compressed-tensors pack's `ignore` list and
config-group `targets` or a modelopt pack's `exclude_modules` / `quantized_layers`."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.models.card import Quantization
from autotune.models.hf.quantization import quantization_from_config

# Module names that stand for each part of a decoder layer in the ignore / exclude / target
# lists packs write (HF names of the Qwen, DeepSeek/Kimi, Mixtral, Llama 4, gpt-oss and Gemma 4
# layers).
PART_MODULES: dict[str, tuple[str, ...]] = {
    "attention": (
        "self_attn.q_proj",
        "self_attn.o_proj",
        "self_attn.q_b_proj",
        "self_attn.kv_b_proj",
        "mixer.q_proj",  # Nemotron-H blocks
        "mixer.o_proj",
    ),
    "linear_attention": (
        "linear_attn.in_proj_qkvz",
        "linear_attn.in_proj_qkv",
        "linear_attn.out_proj",
        "mixer.in_proj",
        "mixer.out_proj",
    ),
    "mlp": (
        "mlp.gate_proj",
        "mlp.down_proj",
        "feed_forward.gate_proj",
        "mixer.up_proj",
        "mixer.down_proj",
    ),
    "shared": (
        "mlp.shared_expert.gate_proj",
        "mlp.shared_experts.gate_proj",
        "feed_forward.shared_expert.gate_proj",
        "mixer.shared_experts.up_proj",
    ),
    "experts": (
        "mlp.experts.0.gate_proj",
        "mlp.experts.0.down_proj",
        "block_sparse_moe.experts.0.w1",
        "feed_forward.experts.0.gate_proj",
        "experts.0.gate_proj",  # Gemma 4: experts beside the dense mlp
        "experts.gate_up_proj",
        "mixer.experts.0.up_proj",
    ),
}
_LAYER_PREFIXES = (
    "model.layers.{}.",
    "model.language_model.layers.{}.",
    "language_model.model.layers.{}.",
    "backbone.layers.{}.",
)
_MTP_PREFIXES = ("mtp.layers.0.", "model.mtp.layers.0.", "mtp.")
_MODELOPT_BYTES = {"NVFP4": 0.5 + 1 / 16, "W4A16_NVFP4": 0.5 + 1 / 16, "FP8": 1.0}


def bytes_per_param(q: Quantization, dtype_bytes: float) -> float:
    """Bytes one quantized weight takes with its scales (and zero points) as the pack stores it."""
    group = q.group_size
    if q.scheme in ("awq", "gptq"):
        return q.bits / 8 + (2 + q.bits / 8) / (group or 4096)
    if q.scheme == "fp8_block":
        bn, bk = q.block_shape or (128, 128)
        return 1 + 4 / (bn * bk)
    if q.scheme in ("fp8", "int8"):
        return 1.0 + (2 / group if group else 0)
    if q.scheme == "nvfp4":
        return 0.5 + 1 / (group or 16)
    if q.scheme == "mxfp4":
        return 0.5 + 1 / 32
    return dtype_bytes


def _matches(name: str, pattern: object, glob: bool) -> bool:
    """A module name against an ignore / target entry: `re:` regexes (matched from the start,
    as compressed-tensors does), globs (modelopt, MXFP4), exact names or their parents."""
    if not isinstance(pattern, str):
        return False
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None
    if glob and fnmatch.fnmatchcase(name, pattern):
        return True
    return name == pattern or name.startswith(pattern + ".")


def module_names(part: str, layer: int | None) -> list[str]:
    """The names `part` of decoder layer `layer` (None: the MTP layer) may have in a pack."""
    prefixes = _MTP_PREFIXES if layer is None else [p.format(layer) for p in _LAYER_PREFIXES]
    return [p + m for p in prefixes for m in PART_MODULES[part]]


def _listed(names: list[str], patterns: object, glob: bool = False) -> bool:
    items = patterns if isinstance(patterns, list) else []
    return any(_matches(n, p, glob) for n in names for p in items)


def ct_bytes(q: Mapping[str, Any], names: list[str], source: str, dtype_b: float) -> float:
    """compressed-tensors: the first config group targeting the part (the class name `Linear`
    targets every projection) unless `ignore` lists it."""
    if _listed(names, q.get("ignore")):
        return dtype_b
    groups = q.get("config_groups")
    for group in groups.values() if isinstance(groups, dict) else []:
        if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
            continue
        targets = group.get("targets") or ["Linear"]
        if "Linear" in targets or _listed(names, targets):
            one = {"quant_method": "compressed-tensors", "config_groups": {"g": group}}
            return bytes_per_param(quantization_from_config(one, Path(source)), dtype_b)
    return dtype_b


def modelopt_bytes(q: Mapping[str, Any], names: list[str], dtype_b: float) -> float:
    """modelopt: the pack's algorithm for every module not in `exclude_modules`, or the
    per-module algorithm of a MIXED_PRECISION pack (`quantized_layers`)."""
    per = q.get("quantized_layers")
    if isinstance(per, dict):
        for name in names:
            for module, spec in per.items():
                if _matches(name, module, glob=True) and isinstance(spec, dict):
                    return _MODELOPT_BYTES.get(str(spec.get("quant_algo")).upper(), dtype_b)
        return dtype_b
    if _listed(names, q.get("exclude_modules"), glob=True):
        return dtype_b
    return _MODELOPT_BYTES.get(str(q.get("quant_algo")).upper(), dtype_b)
