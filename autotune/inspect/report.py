"""What the checkpoint inspector reports: findings with their severity, the per-layer table,
the quantization it read, MTP presence, and the verdict with its exit status."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Severity = Literal["error", "warning", "info"]
Verdict = Literal["ok", "warnings", "broken"]

# `autotune inspect` exit status per verdict (user errors such as a missing folder exit 2).
EXIT_CODES: dict[str, int] = {"ok": 0, "warnings": 10, "broken": 11}

MAX_LISTED = 8  # tensors named per finding; `count` has the total


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Finding(_Frozen):
    severity: Severity
    code: str = Field(description="stable identifier, e.g. marlin-size-n, ignore-unmatched")
    message: str
    tensors: list[str] = Field(default_factory=list, description=f"first {MAX_LISTED} names")
    count: int = Field(default=0, description="how many modules/tensors/entries are affected")
    fix: str | None = None


class LayerReport(_Frozen):
    index: int
    kind: Literal["full_attention", "linear_attention"]
    quantized: list[str] = Field(description="projections stored quantized (names in the layer)")
    unquantized: list[str] = Field(description="2-D projections stored in 16/32-bit floats")
    other_tensors: int = Field(description="norms, conv1d, A_log, dt_bias, biases, ...")
    bytes: int


class QuantReport(_Frozen):
    method: str | None = None
    format: str | None = None
    bits: int | None = None
    group_size: int | None = None
    block_shape: list[int] | None = None
    exclude_field: str | None = Field(default=None, description="ignore / modules_to_not_convert")
    exclude: list[str] = Field(default_factory=list)


class MTPReport(_Frozen):
    declared_layers: int
    present_layers: int
    tensors: int
    bytes: int


class InspectionReport(_Frozen):
    path: str
    architecture: str
    tp: int
    files: list[str]
    tensor_count: int
    num_layers: int
    quantization: QuantReport
    bytes_by_component: dict[str, int]
    bytes_by_dtype: dict[str, int]
    layers: list[LayerReport]
    mtp: MTPReport
    vision_tensors: int
    loaded_per_rank: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="engine -> part -> bytes one rank loads at `tp` (the tensors' sizes); empty "
        "for an architecture the card reader does not know",
    )
    findings: list[Finding]
    verdict: Verdict

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def by_code(self, code: str) -> list[Finding]:
        return [f for f in self.findings if f.code == code]
