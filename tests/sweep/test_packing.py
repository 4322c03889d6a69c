"""TP-aware packing of trials onto GPUs (issue 22 item 4), in-process executor on fake GPU
indices (no GPU needed: the trial function only records what it was given). TP 1 and TP 2
trials share the sweep's GPUs: a trial gets as many distinct GPUs as its TP size, the GPUs in
use at once never exceed those the sweep has, and a TP 2 trial waits for two free GPUs (the
trials behind it wait too, so it is not starved)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from autotune.engines.base import FailureClass
from autotune.process import gpulock
from autotune.store.models import TrialStatus
from autotune.sweep.executors import GpuPool, InProcessExecutor, trial_gpus
from autotune.sweep.trial import TrialResult, TrialSpec


@pytest.fixture(autouse=True)
def lock_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the host-wide GPU locks of these fake GPUs stay in the test's folder
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path / "locks"))


def spec(number: int, *, tp: int = 1, config: dict[str, Any] | None = None) -> TrialSpec:
    return TrialSpec(
        sweep="pack",
        number=number,
        config=config or {},
        engine_version="0",
        model="m",
        gpu="h200",
        tp=tp,
        scenarios=[],
        log_dir="unused",
    )


class Recorder:
    """A trial function: records the GPUs each trial was given and when it ran."""

    def __init__(self, seconds: dict[int, float] | None = None, default_s: float = 0.4):
        self.seconds = seconds or {}
        self.default_s = default_s
        self.calls: dict[int, dict[str, Any]] = {}
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
        time.sleep(self.seconds.get(spec.number, self.default_s))
        with self._lock:
            self.calls[spec.number] = {
                "gpus": list(gpu_indices or []),
                "t": (t0, time.monotonic()),
                "need": trial_gpus(spec),
            }
        return TrialResult(number=spec.number, status=TrialStatus.COMPLETE, worker=worker)


def check_packing(calls: dict[int, dict[str, Any]], gpus: int) -> None:
    """Each trial had as many distinct GPUs as its TP size; trials whose time windows
    overlapped had disjoint GPUs, never more than `gpus` in use."""
    for number, c in calls.items():
        assert len(c["gpus"]) == c["need"] == len(set(c["gpus"])), (number, c)
        assert all(0 <= g < gpus for g in c["gpus"]), (number, c)
    items = sorted(calls.items(), key=lambda kv: kv[1]["t"][0])
    for i, (a, ca) in enumerate(items):
        in_use = list(ca["gpus"])
        for b, cb in items[:i]:
            if cb["t"][1] > ca["t"][0]:  # b still ran when a started
                assert not set(ca["gpus"]) & set(cb["gpus"]), f"#{a} and #{b} shared a GPU"
                in_use += cb["gpus"]
        assert len(in_use) <= gpus, f"{len(in_use)} GPUs in use when #{a} started"


def test_trial_gpus_is_the_configs_tp_size_else_the_targets() -> None:
    assert trial_gpus(spec(0)) == 1
    assert trial_gpus(spec(0, tp=2)) == 2
    assert trial_gpus(spec(0, config={"tp_size": 2})) == 2
    assert trial_gpus(spec(0, tp=1, config={"tensor_parallel_size": 4})) == 4
    assert trial_gpus(spec(0, tp=2, config={"tp_size": "${env:TP}"})) == 2  # not a number


def test_mixed_tp_trials_share_the_gpus_without_overlap() -> None:
    rec = Recorder()
    # four GPUs, as build_executor groups them for target.tp 1: a slot per GPU
    ex = InProcessExecutor(groups=[[0], [1], [2], [3]], trial_fn=rec)
    tps = [2, 1, 1, 2, 1, 2, 1, 1, 2, 1]
    try:
        futs = [
            ex.submit(spec(i, tp=tp) if i % 2 else spec(i, config={"tp_size": tp}))
            for i, tp in enumerate(tps)
        ]
        results = [f.result(timeout=60) for f in futs]
    finally:
        ex.shutdown()
    assert [r.status for r in results] == [TrialStatus.COMPLETE] * len(tps)
    assert [rec.calls[i]["need"] for i in range(len(tps))] == tps
    check_packing(rec.calls, gpus=4)
    # the GPUs were used at once: some TP 1 trial overlapped a TP 2 one
    spans = [(c["t"], c["need"]) for c in rec.calls.values()]
    assert any(s1[0] < s2[1] and s2[0] < s1[1] for s1, n1 in spans for s2, n2 in spans if n1 != n2)


def test_a_tp2_trial_waits_for_two_free_gpus_and_is_not_overtaken() -> None:
    # three long TP 1 trials hold GPUs 0-2; GPU 3 alone is free
    rec = Recorder(seconds={0: 0.9, 1: 1.5, 2: 1.5, 3: 0.3, 4: 0.2})
    ex = InProcessExecutor(groups=[[0], [1], [2], [3]], trial_fn=rec)
    try:
        futs: list[Future[TrialResult]] = [ex.submit(spec(i)) for i in range(3)]
        time.sleep(0.2)
        futs.append(ex.submit(spec(3, tp=2)))  # needs two: waits for trial 0 to end
        time.sleep(0.1)
        futs.append(ex.submit(spec(4)))  # one GPU is free, but it queues behind the TP 2
        results = [f.result(timeout=30) for f in futs]
    finally:
        ex.shutdown()
    assert all(r.status == TrialStatus.COMPLETE for r in results)
    calls = rec.calls
    check_packing(calls, gpus=4)
    assert calls[3]["t"][0] >= calls[0]["t"][1]  # started once trial 0 freed its GPU
    assert sorted(calls[3]["gpus"]) == sorted([*calls[0]["gpus"], 3])
    assert calls[4]["t"][0] >= calls[3]["t"][0]  # first come, first served
    assert results[3].timings["gpu_wait_s"] >= 0.5  # the wait is part of its wall time


def test_a_trial_needing_more_gpus_than_the_sweep_has_fails_at_once() -> None:
    rec = Recorder()
    ex = InProcessExecutor(groups=[[0], [1]], trial_fn=rec)
    try:
        res = ex.submit(spec(0, config={"tp_size": 4})).result(timeout=10)
    finally:
        ex.shutdown()
    assert res.status == TrialStatus.FAILED and res.failure is not None
    assert res.failure.cls == FailureClass.BAD_ARGUMENTS
    assert "needs 4 GPU(s)" in res.failure.reason and "has 2" in res.failure.reason
    assert rec.calls == {}


def test_a_stopping_sweep_stops_a_tp2_trial_waiting_for_gpus() -> None:
    rec = Recorder(seconds={0: 1.0})
    ex = InProcessExecutor(groups=[[0], [1]], trial_fn=rec)
    try:
        running = ex.submit(spec(0))
        time.sleep(0.2)
        waiting = ex.submit(spec(1, tp=2))
        time.sleep(0.3)
        assert not waiting.done()
        ex.stop_launching()
        res = waiting.result(timeout=5)
        assert running.result(timeout=5).status == TrialStatus.COMPLETE
    finally:
        ex.shutdown()
    assert res.status == TrialStatus.INTERRUPTED and "2 free GPU(s)" in (res.reason or "")
    assert 1 not in rec.calls


def test_the_pool_prefers_aligned_blocks() -> None:
    pool = GpuPool([0, 1, 2, 3])
    never = lambda: False  # noqa: E731
    a = pool.take(1, never)
    b = pool.take(2, never)
    assert a == [0] and b == [2, 3]  # not [1, 2]: TP groups stay where uniform TP puts them
    pool.give(a)
    assert pool.take(2, never) == [0, 1]
