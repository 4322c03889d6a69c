"""The decoder layers: findings on layers missing or extra and on the attention kind each
holds, the per-layer table, and that table condensed."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from autotune.inspect.modules import Module
from autotune.inspect.naming import ranges, short_name
from autotune.inspect.report import Finding, InspectionReport, LayerReport
from autotune.models.hf import Checkpoint


def layer_findings(
    ckpt: Checkpoint, mods: Mapping[str, Module], num_layers: int, full: set[int]
) -> list[Finding]:
    """Layers missing or beyond num_hidden_layers, layer_types against
    full_attention_interval, and layers holding the other kind of attention."""
    return (
        _count_findings(mods, num_layers)
        + _layer_types_findings(ckpt, full)
        + _kind_findings(mods, num_layers, full)
    )


def _count_findings(mods: Mapping[str, Module], num_layers: int) -> list[Finding]:
    out: list[Finding] = []
    present = {m.layer for m in mods.values() if m.component == "decoder" and m.layer is not None}
    missing = sorted(set(range(num_layers)) - present)
    extra = sorted(i for i in present if i >= num_layers)
    if missing:
        out.append(
            Finding(
                severity="error",
                code="layers-missing",
                message=f"config.json declares {num_layers} layers but layers {ranges(missing)} "
                f"have no tensors",
                count=len(missing),
                fix="the pack is incomplete; re-download the missing shards",
            )
        )
    if extra:
        out.append(
            Finding(
                severity="warning",
                code="layers-extra",
                message=f"tensors for layers {ranges(extra)} beyond "
                f"num_hidden_layers={num_layers}; the engine ignores them",
                count=len(extra),
            )
        )
    return out


def _layer_types_findings(ckpt: Checkpoint, full: set[int]) -> list[Finding]:
    out: list[Finding] = []
    types = ckpt.text_config.get("layer_types")
    if ckpt.text_config.get("full_attention_interval") and isinstance(types, list):
        said = {i for i, t in enumerate(types) if t != "linear_attention"}
        if said != full:
            diff = sorted(said ^ full)
            out.append(
                Finding(
                    severity="warning",
                    code="layer-types-disagree",
                    message=f"layer_types and full_attention_interval disagree on layers "
                    f"{ranges(diff)}; SGLang follows full_attention_interval "
                    f"(sglang-internals §6)",
                    count=len(diff),
                    fix="make layer_types agree with full_attention_interval",
                )
            )
    return out


def _kind_findings(mods: Mapping[str, Module], num_layers: int, full: set[int]) -> list[Finding]:
    out: list[Finding] = []
    # A GDN layer that holds self_attn weights (or the reverse) means the layer map is wrong.
    wrong = sorted(
        {
            m.layer
            for m in mods.values()
            if m.component == "decoder"
            and m.layer is not None
            and m.layer < num_layers
            and ((".linear_attn." in m.name + ".") == (m.layer in full))
            and (".linear_attn." in m.name + "." or ".self_attn." in m.name + ".")
        }
    )
    if wrong:
        out.append(
            Finding(
                severity="error",
                code="layer-kind-mismatch",
                message=f"layers {ranges(wrong)} hold the other kind of attention than "
                f"the config's full_attention_interval says",
                count=len(wrong),
                fix="check full_attention_interval against the checkpoint",
            )
        )
    return out


def layer_reports(
    ckpt: Checkpoint, mods: Mapping[str, Module], num_layers: int, full: set[int]
) -> list[LayerReport]:
    """One row per decoder layer: its kind, projections stored quantized and unquantized,
    other tensors and bytes."""
    per: dict[int, list[Module]] = defaultdict(list)
    for m in mods.values():
        if m.component == "decoder" and m.layer is not None:
            per[m.layer].append(m)
    out = []
    for i in sorted(set(range(num_layers)) | set(per)):
        ms = per.get(i, [])
        out.append(
            LayerReport(
                index=i,
                kind="full_attention" if i in full or i >= num_layers else "linear_attention",
                quantized=sorted(short_name(m) for m in ms if m.quant is not None),
                unquantized=sorted(
                    short_name(m) for m in ms if m.quant is None and m.n is not None
                ),
                other_tensors=sum(len(m.params) for m in ms if not m.is_linear),
                bytes=sum(t.nbytes for m in ms for t in m.params.values()),
            )
        )
    return out


def layer_groups(report: InspectionReport) -> list[tuple[str, LayerReport]]:
    """Condense the per-layer table: (layer ranges, a representative layer) for each distinct
    (kind, quantized, unquantized) signature, in order of first appearance."""
    groups: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[LayerReport]] = {}
    for layer in report.layers:
        key = (layer.kind, tuple(layer.quantized), tuple(layer.unquantized))
        groups.setdefault(key, []).append(layer)
    return [(ranges(lr.index for lr in ls), ls[0]) for ls in groups.values()]
