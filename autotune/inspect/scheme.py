"""The quantization scheme a checkpoint declares: its report (method, format, bits, group,
block, exclusion list), how exclusion entries match module names under each tool's rules, and
which modules the scheme targets."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.inspect.modules import Module
from autotune.inspect.report import QuantReport
from autotune.models.hf import Checkpoint


@dataclass(frozen=True)
class QuantSpec:
    """A declared quantization scheme and the rules its tool applies to module names."""

    report: QuantReport
    matches: Callable[[str, str], bool]  # (entry, module name) -> excluded?
    exclusion_is_binding: bool  # non-excluded linear layers are built quantized by the engine
    targets: Callable[[Module], bool]  # is this module targeted for quantization at all?


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _exact_or_parent(entry: str, module: str) -> bool:
    return module == entry or module.startswith(entry + ".")


def _ct_match(entry: str, module: str) -> bool:
    if entry.startswith("re:"):
        return re.match(entry[3:], module) is not None
    return _exact_or_parent(entry, module)


def quant_spec(ckpt: Checkpoint) -> QuantSpec | None:
    """The scheme the checkpoint's quantization config declares (None without one)."""
    q = ckpt.quantization_config()
    if q is None:
        return None
    method = str(q.get("quant_method") or "").lower().replace("_", "-")
    if method == "compressed-tensors":
        return _compressed_tensors(q, method)
    if method in ("awq", "gptq", "auto-round"):
        return _awq_gptq(q, method)
    if method == "fp8":
        return _fp8(q, method)
    if method == "modelopt":
        return _modelopt(q, method)
    return QuantSpec(QuantReport(method=method or None), lambda e, m: False, False, _any_linear)


def _listed(q: Mapping[str, Any], *keys: str) -> tuple[str | None, list[str]]:
    """The first of `keys` whose value is a list, and its entries."""
    for k in keys:
        v = q.get(k)
        if isinstance(v, list):
            return k, [str(x) for x in v]
    return None, []


def _any_linear(_: Module) -> bool:
    return True


def _compressed_tensors(q: Mapping[str, Any], method: str) -> QuantSpec:
    groups = q.get("config_groups") if isinstance(q.get("config_groups"), dict) else {}
    weights: dict[str, Any] = {}
    targets: list[str] = []
    for g in (groups or {}).values():
        if isinstance(g, dict):
            if not weights and isinstance(g.get("weights"), dict):
                weights = g["weights"]
            targets += [str(t) for t in g.get("targets") or []]
    key, ignore = _listed(q, "ignore")
    block = weights.get("block_structure")

    def targeted(m: Module) -> bool:
        # "Linear" (a class name) targets every linear layer; other entries are names.
        return any(t == "Linear" or _ct_match(t, m.name) for t in targets) or not targets

    return QuantSpec(
        QuantReport(
            method=method,
            format=q.get("format"),
            bits=_int(weights.get("num_bits")),
            group_size=_int(weights.get("group_size")),
            block_shape=list(block) if isinstance(block, list) else None,
            exclude_field=key,
            exclude=ignore,
        ),
        _ct_match,
        True,
        targeted,
    )


def _awq_gptq(q: Mapping[str, Any], method: str) -> QuantSpec:
    key, skip = _listed(q, "modules_to_not_convert")
    return QuantSpec(
        QuantReport(
            method=method,
            format=q.get("version") or q.get("packing_format"),
            bits=_int(q.get("bits", q.get("w_bit"))),
            group_size=_int(q.get("group_size", q.get("q_group_size"))),
            exclude_field=key,
            exclude=skip,
        ),
        # AutoAWQ and SGLang skip a layer when an entry is a substring of its name.
        lambda entry, module: entry in module,
        method == "awq",
        _any_linear,
    )


def _fp8(q: Mapping[str, Any], method: str) -> QuantSpec:
    key, skip = _listed(q, "ignored_layers", "modules_to_not_convert")
    block = q.get("weight_block_size")
    return QuantSpec(
        QuantReport(
            method=method,
            format=q.get("fmt"),
            bits=8,
            block_shape=list(block) if isinstance(block, list) else None,
            exclude_field=key,
            exclude=skip,
        ),
        _exact_or_parent,
        True,
        _any_linear,
    )


def _modelopt(q: Mapping[str, Any], method: str) -> QuantSpec:
    key, skip = _listed(q, "exclude_modules", "ignore")
    return QuantSpec(
        QuantReport(
            method=method,
            format=q.get("quant_algo"),
            bits=4 if str(q.get("quant_algo")).upper() == "NVFP4" else 8,
            group_size=_int(q.get("group_size")),
            exclude_field=key,
            exclude=skip,
        ),
        lambda e, m: fnmatch.fnmatchcase(m, e) or _exact_or_parent(e, m),
        True,
        _any_linear,
    )


def is_class_name(entry: str) -> bool:
    """compressed-tensors also accepts layer class names ("Linear"); names cannot check those."""
    return "." not in entry and not entry.startswith("re:") and entry[:1].isupper()
