"""Trials take the host-wide locks of their GPUs (issue 19 item 4): two sweeps' executors on one
machine never run engines on the same GPU at once; simulated trials take none; a stopping sweep
stops waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from autotune.engines.base import FailureClass
from autotune.process import gpulock
from autotune.process.gpulock import GpuLocks
from autotune.store.models import TrialStatus
from autotune.sweep.executors import InProcessExecutor
from autotune.sweep.trial import TrialResult, TrialSpec


@pytest.fixture(autouse=True)
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "locks"
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(d))
    return d


def _spec(number: int, *, simulate: bool = False, sweep: str = "a") -> TrialSpec:
    return TrialSpec(
        sweep=sweep,
        number=number,
        config={},
        engine_version="0",
        model="m",
        gpu="h200",
        simulate=simulate,
        scenarios=[],
        log_dir="unused",
    )


class _Recorder:
    """A trial function that records when it ran, on which GPUs, with which lock fds."""

    def __init__(self, seconds: float = 0.4):
        self.seconds = seconds
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(
        self,
        spec: TrialSpec,
        *,
        worker: str,
        gpu_indices: Sequence[int] | None,
        cancel: threading.Event,
        **kw: Any,
    ) -> TrialResult:
        t0 = time.monotonic()
        time.sleep(self.seconds)
        with self._lock:
            self.calls.append(
                {"sweep": spec.sweep, "t": (t0, time.monotonic()), "gpus": gpu_indices, **kw}
            )
        return TrialResult(number=spec.number, status=TrialStatus.COMPLETE, worker=worker)


def test_two_sweeps_never_share_a_gpu() -> None:
    rec = _Recorder()
    # two sweeps, each with one worker on GPU 3 (flock excludes even within one process)
    a = InProcessExecutor(groups=[[3]], trial_fn=rec)
    b = InProcessExecutor(groups=[[3]], trial_fn=rec)
    try:
        futs = [a.submit(_spec(i, sweep="a")) for i in range(2)]
        futs += [b.submit(_spec(i, sweep="b")) for i in range(2)]
        results = [f.result(timeout=30) for f in futs]
    finally:
        a.shutdown()
        b.shutdown()
    assert all(r.status == TrialStatus.COMPLETE for r in results)
    spans = sorted(c["t"] for c in rec.calls)
    assert len(spans) == 4
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end, "two trials ran on GPU 3 at once"
    assert all(len(c["hold_fds"]) == 1 for c in rec.calls)  # handed on to the watchdog
    assert any("gpu_wait_s" in r.timings for r in results)


def test_different_gpus_run_together() -> None:
    rec = _Recorder(seconds=0.5)
    a = InProcessExecutor(groups=[[0]], trial_fn=rec)
    b = InProcessExecutor(groups=[[1]], trial_fn=rec)
    try:
        fa, fb = a.submit(_spec(0, sweep="a")), b.submit(_spec(0, sweep="b"))
        fa.result(timeout=10), fb.result(timeout=10)
    finally:
        a.shutdown()
        b.shutdown()
    (s1, e1), (s2, e2) = sorted(c["t"] for c in rec.calls)
    assert s2 < e1  # overlapped


def test_simulated_trials_take_no_lock(folder: Path) -> None:
    rec = _Recorder(seconds=0)
    ex = InProcessExecutor(groups=[None], trial_fn=rec)
    try:
        assert ex.submit(_spec(0, simulate=True)).result(timeout=10).status == "complete"
    finally:
        ex.shutdown()
    assert "hold_fds" not in rec.calls[0]
    assert not folder.exists()


def test_a_stopping_sweep_stops_waiting_for_a_gpu() -> None:
    rec = _Recorder(seconds=0)
    ex = InProcessExecutor(groups=[[4]], trial_fn=rec)
    with GpuLocks([4], label="other-sweep/trial-9") as other:
        assert other.acquire()
        fut = ex.submit(_spec(7))
        time.sleep(0.6)
        assert not fut.done()
        t0 = time.monotonic()
        ex.cancel_all()
        res = fut.result(timeout=5)
        assert time.monotonic() - t0 < 2
    ex.shutdown()
    assert res.status == TrialStatus.INTERRUPTED and "GPU(s) [4]" in (res.reason or "")
    assert res.timings["gpu_wait_s"] >= 0.5 and rec.calls == []


def test_an_unusable_lock_folder_fails_the_trial_as_an_environment_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path / "file" / "locks"))
    rec = _Recorder(seconds=0)
    ex = InProcessExecutor(groups=[[0]], trial_fn=rec)
    try:
        res = ex.submit(_spec(0)).result(timeout=10)
    finally:
        ex.shutdown()
    assert res.status == TrialStatus.FAILED and res.failure is not None
    assert res.failure.cls == FailureClass.SPAWN_FAILED and "GPU lock folder" in res.failure.reason
    assert rec.calls == []


def test_a_graceful_stop_ends_the_wait_but_not_running_trials() -> None:
    """First SIGINT: no new launches. A trial waiting for a GPU has launched nothing, so it
    gives up (INTERRUPTED, run again on resume); one whose engine runs finishes."""
    rec = _Recorder(seconds=0.8)
    ex = InProcessExecutor(groups=[[5], [6]], trial_fn=rec)
    with GpuLocks([6], label="other-sweep/trial-2") as other:
        assert other.acquire()
        running = ex.submit(_spec(1))  # slot 0: GPU 5, free
        time.sleep(0.2)
        waiting = ex.submit(_spec(2))  # slot 1: GPU 6, held by the other sweep
        time.sleep(0.3)
        ex.stop_launching()
        res = waiting.result(timeout=5)
        assert res.status == TrialStatus.INTERRUPTED and "GPU(s) [6]" in (res.reason or "")
        assert running.result(timeout=5).status == TrialStatus.COMPLETE
    ex.shutdown()
    assert [c["gpus"] for c in rec.calls] == [[5]]
