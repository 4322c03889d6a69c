"""Detect local NVIDIA GPUs through NVML (nvidia-ml-py) and match them to the catalog; resolve
`--gpu NAME|auto` (a catalog key, or the GPU detected here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.errors import HardwareError
from autotune.hardware.gpus import GPUSpec, get_gpu, match_device


@dataclass(frozen=True)
class DetectedGPU:
    index: int
    device_name: str
    memory_mib: int
    free_mib: int
    driver: str
    spec: GPUSpec


def detect_gpus() -> list[DetectedGPU]:
    """Return every NVIDIA GPU NVML sees, matched to the catalog.

    Raises HardwareError with a plain explanation when NVML or the driver is absent, or when a
    GPU is not in the catalog (name the closest key with ``--gpu`` instead).
    """
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise HardwareError("nvidia-ml-py is not installed; pass --gpu NAME") from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise HardwareError(
            f"--gpu auto: no NVIDIA driver found ({exc}); this machine has no usable NVIDIA GPU. "
            "Pass a catalog name instead, e.g. --gpu rtx-4080-super-32g (see `autotune gpus`)."
        ) from exc
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        out: list[DetectedGPU] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(pynvml.nvmlDeviceGetName(h))
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            total_mib = int(mem.total) // 2**20
            spec = match_device(name, total_mib)
            if spec is None:
                raise HardwareError(
                    f"--gpu auto: GPU {i} is {name!r} ({total_mib} MiB), which is not in the "
                    "catalog; pass the closest entry with --gpu (see `autotune gpus`)"
                )
            reserved = _reserved_mib(pynvml, h)
            if reserved is not None:  # this driver's share, not the catalog's
                spec = spec.model_copy(update={"driver_reserved_mib": reserved})
            out.append(DetectedGPU(i, name, total_mib, int(mem.free) // 2**20, driver, spec))
        if not out:
            raise HardwareError("--gpu auto: the NVIDIA driver reports no GPU")
        return out
    finally:
        pynvml.nvmlShutdown()


def resolve_gpu(name: str) -> GPUSpec:
    """`--gpu NAME`: a catalog key, or `auto` to detect GPU 0 through NVML."""
    if name.strip().lower() == "auto":
        gpus = detect_gpus()
        return gpus[0].spec
    return get_gpu(name)


def _reserved_mib(pynvml: Any, handle: Any) -> int | None:
    """nvidia-smi's 'Reserved' through NVML's v2 memory query (drivers >= 510); None when the
    driver or binding lacks it."""
    try:
        info = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return int(info.reserved) // 2**20
    except (AttributeError, TypeError, pynvml.NVMLError):
        return None


def _text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else v
