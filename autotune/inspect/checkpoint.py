"""Checkpoint inspector: find a broken quantized pack before a night is spent on it.

Reads config.json and the safetensors headers (no tensor is loaded) and reports, per decoder
layer, which projections are stored quantized and which unquantized, then checks the pack against
its own config and the kernels that will run it:

- `quantization_config.ignore` (compressed-tensors), `modules_to_not_convert` (AWQ, FP8) or
  `exclude_modules` (modelopt) entries that match no module, e.g. `model.language_model.layers.N`
  while the tensors are `model.layers.N` (FIELD-NOTES P10);
- modules declared unquantized there but stored packed (P10: all GDN layers held `weight_packed`);
- unquantized modules the config does not exclude (the engine builds quantized layers for them);
- widths that break kernel limits: Marlin (W4A16) needs size_n % 64 == 0, size_k % 128 == 0 and
  size_k % group_size == 0 per rank (`in_proj_a`/`in_proj_b` are 48 wide, fused `in_proj_ba` 96,
  so they must stay unquantized, P10); FP8 block-wise needs per-rank widths divisible by the block
  at TP > 1;
- fused shards (q/k/v, gate/up, in_proj_a/b, in_proj_qkv/z) stored with different quantization;
- MTP weights absent while the config declares MTP layers: NEXTN/EAGLE cannot run (P6);
- layers missing, layer_types contradicting full_attention_interval, a shard index that does not
  match the shards;
- a component whose tensors hold far more or less than config.json's quantization implies.

It also reports what SGLang and vLLM load per rank at `tp`, part by part (inspect/sizes.py).

The verdict is "broken" when any finding is an error, "warnings" when any is a warning, else "ok".
"""

from __future__ import annotations

from pathlib import Path

from autotune.errors import ConfigError
from autotune.inspect.components import (
    mtp_findings,
    mtp_report,
    vision_findings,
    vision_tensors,
)
from autotune.inspect.exclusions import exclusion_findings
from autotune.inspect.kernels import kernel_findings
from autotune.inspect.layers import layer_findings, layer_reports
from autotune.inspect.modules import group_modules
from autotune.inspect.report import Finding, InspectionReport, QuantReport, Verdict
from autotune.inspect.scheme import quant_spec
from autotune.inspect.sizes import counted_card, loaded_per_rank, size_findings
from autotune.inspect.storage import fused_findings, index_findings, quantized_findings
from autotune.models.hf import full_attention_layers, read_checkpoint


def inspect_checkpoint(path: Path | str, *, tp: int = 1) -> InspectionReport:
    """Inspect a local Hugging Face model folder; see the module docstring for the checks."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"must be a positive integer, got {tp!r}", field="--tp")
    ckpt = read_checkpoint(Path(path))
    cfg_file = ckpt.path / "config.json"
    text = ckpt.text_config
    prefix = ckpt.text_config_prefix
    full = set(full_attention_layers(text, cfg_file, prefix))
    num_layers = int(text["num_hidden_layers"])  # validated by full_attention_layers
    spec = quant_spec(ckpt)
    bits = (spec.report.bits if spec else None) or 4
    mods = group_modules(ckpt, bits)
    quantized = [m for m in mods.values() if m.quant is not None]

    findings = exclusion_findings(mods, spec)
    findings += quantized_findings(quantized, spec)
    findings += index_findings(ckpt)
    findings += fused_findings(mods)
    findings += kernel_findings(quantized, spec, tp)
    findings += layer_findings(ckpt, mods, num_layers, full)
    findings += mtp_findings(ckpt)
    findings += vision_findings(ckpt)
    findings += size_findings(ckpt)
    truth = counted_card(ckpt, from_tensors=True)
    findings.sort(key=lambda f: ({"error": 0, "warning": 1, "info": 2}[f.severity], f.code))

    archs = ckpt.config.get("architectures")
    return InspectionReport(
        path=str(ckpt.path.resolve()),
        architecture=str(archs[0])
        if isinstance(archs, list) and archs
        else str(ckpt.config.get("model_type", "unknown")),
        tp=tp,
        files=list(ckpt.files),
        tensor_count=len(ckpt.tensors),
        num_layers=num_layers,
        quantization=spec.report if spec else QuantReport(),
        bytes_by_component=ckpt.bytes_by_component(),
        bytes_by_dtype=ckpt.bytes_by_dtype(),
        layers=layer_reports(ckpt, mods, num_layers, full),
        mtp=mtp_report(ckpt),
        vision_tensors=len(vision_tensors(ckpt)),
        loaded_per_rank=loaded_per_rank(truth, tp) if truth else {},
        findings=findings,
        verdict=verdict(findings),
    )


def verdict(findings: list[Finding]) -> Verdict:
    """The verdict: "broken" when any finding is an error, "warnings" when any is a warning,
    else "ok"."""
    return (
        "broken"
        if any(f.severity == "error" for f in findings)
        else "warnings"
        if any(f.severity == "warning" for f in findings)
        else "ok"
    )
