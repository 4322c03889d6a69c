"""Checkpoint inspector: quantized vs unquantized tensors per layer, exclusion lists that name
nothing, kernel width limits, MTP presence (FIELD-NOTES P6, P10).

    checkpoint.py    inspect_checkpoint(): the checks run, the verdict
    report.py        InspectionReport, Finding, LayerReport, QuantReport, MTPReport, EXIT_CODES
    modules.py       tensors grouped by the module that owns them, how each is stored
    scheme.py        the quantization scheme the config declares, its exclusion-matching rules
    naming.py        how findings name modules and layer ranges
    exclusions.py    the exclusion list against the modules (P10)
    storage.py       quantized tensors vs the config, scales, the shard index, fused shards
    kernels.py       per-rank widths against Marlin, group size and FP8 block limits
    layers.py        layers missing, extra or of the wrong kind; the per-layer table
    components.py    MTP layers and the vision tower
"""

from autotune.inspect.checkpoint import inspect_checkpoint
from autotune.inspect.layers import layer_groups
from autotune.inspect.report import EXIT_CODES, Finding, InspectionReport, LayerReport

__all__ = [
    "EXIT_CODES",
    "Finding",
    "InspectionReport",
    "LayerReport",
    "inspect_checkpoint",
    "layer_groups",
]
