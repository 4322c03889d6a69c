"""MTP layers (FIELD-NOTES P6) and the vision tower: what the checkpoint holds against what
its config declares."""

from __future__ import annotations

from autotune.inspect.naming import first_names
from autotune.inspect.report import Finding, MTPReport
from autotune.models.hf import Checkpoint, TensorInfo, mtp_layers_present


def declared_mtp_layers(ckpt: Checkpoint) -> int:
    """MTP layers the text config declares (mtp_num_hidden_layers or num_nextn_predict_layers),
    0 when none."""
    text = ckpt.text_config
    declared = text.get("mtp_num_hidden_layers", text.get("num_nextn_predict_layers", 0))
    return declared if isinstance(declared, int) and declared > 0 else 0


def mtp_tensors(ckpt: Checkpoint) -> list[TensorInfo]:
    return [t for t in ckpt.tensors.values() if t.component == "mtp"]


def vision_tensors(ckpt: Checkpoint) -> list[TensorInfo]:
    return [t for t in ckpt.tensors.values() if t.component == "vision"]


def mtp_report(ckpt: Checkpoint) -> MTPReport:
    tensors = mtp_tensors(ckpt)
    return MTPReport(
        declared_layers=declared_mtp_layers(ckpt),
        present_layers=mtp_layers_present(ckpt),
        tensors=len(tensors),
        bytes=sum(t.nbytes for t in tensors),
    )


def mtp_findings(ckpt: Checkpoint) -> list[Finding]:
    """MTP declared but absent (NEXTN/EAGLE cannot run, P6), present but undeclared, or
    present."""
    declared = declared_mtp_layers(ckpt)
    present = mtp_layers_present(ckpt)
    tensors = mtp_tensors(ckpt)
    prefix = ckpt.text_config_prefix
    if declared and not present:
        return [
            Finding(
                severity="warning",
                code="mtp-missing",
                message=f"config.json declares {prefix}mtp_num_hidden_layers={declared} but no "
                f"tensor holds MTP weights: NEXTN/EAGLE speculative decoding cannot be used with "
                f"this pack (vllm#35548, sglang#35797)",
                fix="use a checkpoint that ships the MTP layer, or keep NEXTN/EAGLE out of the "
                "search space (NGRAM needs no weights)",
            )
        ]
    if present and not declared:
        return [
            Finding(
                severity="info",
                code="mtp-undeclared",
                message=f"{len(tensors)} MTP tensor(s) present but config.json declares "
                f"no MTP layers; the engine will not load them as a draft model",
                tensors=first_names(t.name for t in tensors),
                count=len(tensors),
            )
        ]
    if present:
        return [
            Finding(
                severity="info",
                code="mtp-present",
                message=f"{present} MTP layer(s) present ({len(tensors)} tensors): "
                f"NEXTN/EAGLE speculative decoding is possible",
                count=len(tensors),
            )
        ]
    return []


def vision_findings(ckpt: Checkpoint) -> list[Finding]:
    """A vision_config without vision tensors: a text-only pack."""
    if ckpt.config.get("vision_config") is not None and not vision_tensors(ckpt):
        return [
            Finding(
                severity="info",
                code="vision-absent",
                message="config.json has a vision_config but no vision tensors: a text-only pack",
            )
        ]
    return []
