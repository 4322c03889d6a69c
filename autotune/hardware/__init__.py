"""GPU catalog and detection."""

from autotune.hardware.detect import resolve_gpu
from autotune.hardware.gpus import GPU_CATALOG, GPUSpec, get_gpu

__all__ = ["GPU_CATALOG", "GPUSpec", "get_gpu", "resolve_gpu"]
