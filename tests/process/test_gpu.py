"""GPU-memory checks: logic against a fake NVML module; a real one on an NVIDIA machine."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from autotune.process import EngineProcess, gpu
from tests.process.conftest import is_ready_line


class _NVMLError(Exception):
    pass


def _fake_nvml(proc_lists: list[list[int]], used: list[int], *, init_fails: bool = False):
    """A pynvml stand-in whose process list / used memory advance one step per query."""
    state = {"procs": 0, "used": 0}

    def procs(handle: int) -> list[types.SimpleNamespace]:
        i = min(state["procs"], len(proc_lists) - 1)
        state["procs"] += 1
        return [types.SimpleNamespace(pid=p, usedGpuMemory=1) for p in proc_lists[i]]

    def graphics(handle: int) -> list[types.SimpleNamespace]:
        raise _NVMLError("NotSupported")

    def meminfo(handle: int) -> types.SimpleNamespace:
        i = min(state["used"], len(used) - 1)
        state["used"] += 1
        return types.SimpleNamespace(used=used[i], total=2**35, free=2**35 - used[i])

    def init() -> None:
        if init_fails:
            raise _NVMLError("Driver Not Loaded")

    return types.SimpleNamespace(
        NVMLError=_NVMLError,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetComputeRunningProcesses=procs,
        nvmlDeviceGetGraphicsRunningProcesses=graphics,
        nvmlDeviceGetMemoryInfo=meminfo,
    )


def test_no_driver_means_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([[1]], [0], init_fails=True))
    assert gpu.gpu_processes([0]) is None
    assert gpu.gpu_memory_used([0]) is None
    assert gpu.wait_gpu_memory_freed([1], [0], timeout_s=0.1) is None


def test_pids_listed_and_out_of_range_index_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([[7, 3]], [5]))
    assert gpu.gpu_processes([0, 5]) == [3, 7]
    assert gpu.gpu_memory_used() == {0: 5}


def test_wait_until_our_pids_leave(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([[10, 99], [10, 99], [99]], [0]))
    # pid 99 belongs to someone else: only ours (10) must go
    assert gpu.wait_gpu_memory_freed([10, 11], [0], timeout_s=2, poll_s=0.01) is True


def test_wait_times_out_while_memory_above_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    gib = 2**30
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([[]], [5 * gib]))
    freed = gpu.wait_gpu_memory_freed(
        [10], [0], timeout_s=0.1, baseline_used={0: gib}, poll_s=0.01
    )
    assert freed is False
    # back within tolerance of the baseline: freed even though PIDs are invisible (containers)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([[]], [5 * gib, gib + 2**20]))
    assert gpu.wait_gpu_memory_freed([10], [0], timeout_s=2, baseline_used={0: gib}) is True


def _nvml_gpus() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0


@pytest.mark.gpu
@pytest.mark.skipif(_nvml_gpus() == 0, reason="needs an NVIDIA GPU and driver")
def test_real_gpu_memory_freed_after_stop(engine_argv, tmp_path: Path) -> None:
    argv, port = engine_argv("--gpu-mib", "2048", "--spawn-child")
    before = gpu.gpu_memory_used([0])
    assert before is not None
    with EngineProcess(port=port, gpu_indices=[0]) as eng:
        eng.start(argv, {"CUDA_VISIBLE_DEVICES": "0"}, tmp_path / "s.log")
        eng.wait_ready(
            f"http://127.0.0.1:{port}/health", deadline_s=60, is_ready_line=is_ready_line
        )
        during = gpu.gpu_memory_used([0])
        assert during is not None and during[0] - before[0] >= 2048 * 2**20
    report = eng.stop_report
    assert report is not None
    assert report.gpu_memory_freed is True, report
    after = gpu.gpu_memory_used([0])
    assert after is not None and after[0] - before[0] < gpu.DEFAULT_TOLERANCE_BYTES
