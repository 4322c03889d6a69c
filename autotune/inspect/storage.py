"""Findings on how the tensors are stored: quantized tensors against the quantization
config, scales, the shard index, and the shards the engine fuses into one layer."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from autotune.inspect.modules import FUSED, Module
from autotune.inspect.naming import describe, first_names
from autotune.inspect.report import Finding
from autotune.inspect.scheme import QuantSpec
from autotune.models.hf import Checkpoint


def quantized_findings(quantized: list[Module], spec: QuantSpec | None) -> list[Finding]:
    """The quantized modules against the quantization config: packed without a config, a
    config without packed modules, packed modules without scales."""
    findings: list[Finding] = []
    if quantized and spec is None:
        findings.append(
            Finding(
                severity="error",
                code="quantized-without-config",
                message=f"{len(quantized)} module(s) are stored quantized but config.json has no "
                f"quantization_config: the engine would load packed integers as weights",
                tensors=first_names(m.main for m in quantized),
                count=len(quantized),
                fix="restore the quantization_config of the tool that made the pack",
            )
        )
    if spec is not None and not quantized:
        findings.append(
            Finding(
                severity="error",
                code="no-quantized-tensors",
                message=f"config.json declares quant_method {spec.report.method!r} but no "
                f"tensor is stored quantized (no weight_packed, qweight, fp8 or packed fp4 "
                "weights)",
                fix="remove quantization_config, or use the quantized shards",
            )
        )
    missing_scales = [
        m
        for m in quantized
        if not any(p in m.params for p in ("weight_scale", "scales", "weight_scale_inv"))
    ]
    if missing_scales:
        findings.append(
            Finding(
                severity="error",
                code="missing-scales",
                message=f"{len(missing_scales)} quantized module(s) have no scale tensor: "
                f"{describe(missing_scales)}",
                tensors=first_names(m.main for m in missing_scales),
                count=len(missing_scales),
                fix="the pack is incomplete; re-export or re-download it",
            )
        )
    return findings


def index_findings(ckpt: Checkpoint) -> list[Finding]:
    """model.safetensors.index.json against the shards: engines load by the index."""
    wm = ckpt.index_weight_map
    if wm is None:
        return []
    out = []
    absent = sorted(set(wm) - set(ckpt.tensors))
    wrong = sorted(n for n, f in wm.items() if n in ckpt.tensors and ckpt.tensors[n].file != f)
    unindexed = sorted(set(ckpt.tensors) - set(wm))
    if absent or wrong:
        out.append(
            Finding(
                severity="error",
                code="index-mismatch",
                message=f"model.safetensors.index.json places {len(absent) + len(wrong)} tensor(s) "
                f"in shards that do not hold them ({len(absent)} in no shard at all)",
                tensors=first_names(absent + wrong),
                count=len(absent) + len(wrong),
                fix="regenerate the index from the shards, or re-download the pack",
            )
        )
    if unindexed:
        out.append(
            Finding(
                severity="warning",
                code="index-incomplete",
                message=f"{len(unindexed)} tensor(s) in the shards are missing from "
                f"model.safetensors.index.json; loaders that follow the index skip them",
                tensors=first_names(unindexed),
                count=len(unindexed),
                fix="regenerate the index from the shards",
            )
        )
    return out


def fused_findings(mods: Mapping[str, Module]) -> list[Finding]:
    by_parent: dict[str, dict[str, Module]] = defaultdict(dict)
    for m in mods.values():
        if m.is_linear:
            by_parent[m.name.rpartition(".")[0]][m.leaf] = m
    mixed: list[tuple[str, list[Module]]] = []
    for children in by_parent.values():
        for group, fused in FUSED.items():
            members = [children[c] for c in sorted(group) if c in children]
            if len(members) > 1 and len({m.quant for m in members}) > 1:
                mixed.append((fused, members))
    if not mixed:
        return []
    flat = [m for _, ms in mixed for m in ms]
    names = sorted({f for f, _ in mixed})
    return [
        Finding(
            severity="error",
            code="fused-mixed-quantization",
            message=f"the engine fuses {', '.join(names)} from shards that are stored with "
            f"different quantization in {len(mixed)} place(s): {describe(flat)}",
            tensors=first_names(m.main for m in flat),
            count=len(flat),
            fix="store every shard of a fused layer the same way (all quantized or all bf16)",
        )
    ]
