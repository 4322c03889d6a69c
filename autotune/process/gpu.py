"""Which processes hold GPU memory, through NVML; "unknown" (None) where there is no driver.

Every function here answers ``None`` instead of raising when nvidia-ml-py or the NVIDIA driver
is missing, so the process manager runs unchanged on CPU-only machines (CI, the simulator).
pynvml is imported lazily: ``autotune --help`` must not load the driver library.

NVML reports host PIDs. Inside a container with its own PID namespace those differ from the PIDs
we started, so a PID match alone can say "freed" too early; ``wait_gpu_memory_freed`` therefore
also compares used memory with a baseline taken before the engine started, when it has one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

# Memory a freed GPU may still show above its pre-launch baseline: the driver's own context
# bookkeeping and other tenants' small allocations move by this much.
DEFAULT_TOLERANCE_BYTES = 256 * 2**20


@contextmanager
def _nvml() -> Iterator[Any | None]:
    """Yield the initialised pynvml module, or None when NVML cannot be used here."""
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no usable driver
        yield None
        return
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown leaves nothing to clean up
            pynvml.nvmlShutdown()


def _indices(nvml: Any, gpu_indices: Sequence[int] | None) -> list[int]:
    count = int(nvml.nvmlDeviceGetCount())
    if gpu_indices is None:
        return list(range(count))
    return [i for i in gpu_indices if 0 <= i < count]


def _pids_on(nvml: Any, gpu_indices: Sequence[int] | None) -> set[int]:
    pids: set[int] = set()
    for i in _indices(nvml, gpu_indices):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        for query in (
            nvml.nvmlDeviceGetComputeRunningProcesses,
            nvml.nvmlDeviceGetGraphicsRunningProcesses,
        ):
            try:
                pids.update(int(p.pid) for p in query(handle))
            except nvml.NVMLError:  # NotSupported on some boards/drivers for one of the two
                continue
    return pids


def _used_on(nvml: Any, gpu_indices: Sequence[int] | None) -> dict[int, int]:
    return {
        i: int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).used)
        for i in _indices(nvml, gpu_indices)
    }


def gpu_processes(gpu_indices: Sequence[int] | None = None) -> list[int] | None:
    """PIDs (host namespace) with a compute or graphics context on the given GPUs (NVML indices;
    None = all). None when NVML is unavailable."""
    with _nvml() as nvml:
        if nvml is None:
            return None
        try:
            return sorted(_pids_on(nvml, gpu_indices))
        except nvml.NVMLError:
            return None


def gpu_memory_used(gpu_indices: Sequence[int] | None = None) -> dict[int, int] | None:
    """Used bytes per GPU index (None = all GPUs); None when NVML is unavailable."""
    with _nvml() as nvml:
        if nvml is None:
            return None
        try:
            return _used_on(nvml, gpu_indices)
        except nvml.NVMLError:
            return None


def wait_gpu_memory_freed(
    pids: Collection[int],
    gpu_indices: Sequence[int] | None,
    timeout_s: float = 15.0,
    *,
    baseline_used: Mapping[int, int] | None = None,
    tolerance_bytes: int = DEFAULT_TOLERANCE_BYTES,
    poll_s: float = 0.25,
) -> bool | None:
    """Wait until none of ``pids`` holds memory on ``gpu_indices`` (and, with a baseline, used
    memory is back within ``tolerance_bytes`` of it).

    Returns True when freed, False at the timeout, None when NVML is unavailable (unknown).
    The driver releases an exited process's memory asynchronously, hence the polling.
    """
    wanted = set(pids)
    with _nvml() as nvml:
        if nvml is None:
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                held = _pids_on(nvml, gpu_indices) & wanted
                used = _used_on(nvml, gpu_indices) if baseline_used else {}
            except nvml.NVMLError:
                return None
            over = {
                i: b - baseline_used[i]
                for i, b in used.items()
                if baseline_used and i in baseline_used and b - baseline_used[i] > tolerance_bytes
            }
            if not held and not over:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
