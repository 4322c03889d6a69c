"""Checkpoint inspector: quantized vs unquantized tensors per layer, exclusion lists that name
nothing, kernel width limits, MTP presence (FIELD-NOTES P6, P10)."""

from autotune.inspect.checkpoint import (
    EXIT_CODES,
    Finding,
    InspectionReport,
    LayerReport,
    inspect_checkpoint,
    layer_groups,
)

__all__ = [
    "EXIT_CODES",
    "Finding",
    "InspectionReport",
    "LayerReport",
    "inspect_checkpoint",
    "layer_groups",
]
