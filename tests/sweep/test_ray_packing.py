"""TP-aware packing on Ray (issue 22 item 4): a local Ray instance with four fake GPUs (Ray
takes num_gpus on a machine without any) runs TP 1 and TP 2 trials mixed. Each trial's actor
records the GPUs Ray gave it (CUDA_VISIBLE_DEVICES) and when it ran: a TP 2 trial gets two
distinct GPUs, TP 1 trials one, trials running at once never share a GPU nor use more than
four, and a TP 2 trial waits until two GPUs are free without TP 1 trials behind it overtaking
it."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from autotune.engines.base import FailureClass
from autotune.process import gpulock
from autotune.store.models import TrialStatus
from autotune.sweep.executors import trial_gpus
from autotune.sweep.ray_executor import RayExecutor
from autotune.sweep.trial import TrialResult, TrialSpec

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray

GPUS = 4


def record_trial(
    spec: TrialSpec,
    *,
    worker: str,
    gpu_indices: Sequence[int] | None,
    cancel: threading.Event,
    **kw: Any,
) -> TrialResult:
    """The actors' trial function (pickled to them): what Ray gave the trial, into a file."""
    t0 = time.time()  # wall clock: the actors are other processes
    time.sleep(float(spec.config.get("hold_s", 1.0)))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    record = {
        "visible": [int(g) for g in visible.split(",") if g.strip()],
        "gpu_indices": list(gpu_indices or []),
        "need": trial_gpus(spec),
        "t": [t0, time.time()],
    }
    Path(spec.log_dir, f"{spec.number}.json").write_text(json.dumps(record))
    return TrialResult(number=spec.number, status=TrialStatus.COMPLETE, worker=worker)


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A local Ray instance with GPUS fake GPUs; the folder the trials record into."""
    # the actors inherit it: their host-wide GPU locks stay in the test's folder
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(tmp_path / "locks"))
    if ray.is_initialized():
        ray.shutdown()
    ray.init(
        address="local",
        num_cpus=GPUS + 2,
        num_gpus=GPUS,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    out = tmp_path / "records"
    out.mkdir()
    try:
        yield out
    finally:
        ray.shutdown()


def spec(out: Path, number: int, *, tp: int = 1, **config: Any) -> TrialSpec:
    return TrialSpec(
        sweep="pack",
        number=number,
        config=config,
        engine_version="0",
        model="m",
        gpu="h200",
        tp=tp,
        scenarios=[],
        log_dir=str(out),
    )


def records(out: Path) -> dict[int, dict[str, Any]]:
    return {int(p.stem): json.loads(p.read_text()) for p in out.glob("*.json")}


def check_packing(calls: dict[int, dict[str, Any]]) -> None:
    """Each trial saw as many distinct GPUs as its TP size (the engine's 0..tp-1); trials whose
    time windows overlapped had disjoint GPUs, never more than GPUS in use."""
    for number, c in calls.items():
        assert len(c["visible"]) == c["need"] == len(set(c["visible"])), (number, c)
        assert all(0 <= g < GPUS for g in c["visible"]), (number, c)
        # the engine is given Ray's own IDs (0..tp-1 would be the node's first GPUs)
        assert c["gpu_indices"] == c["visible"], (number, c)
    items = sorted(calls.items(), key=lambda kv: kv[1]["t"][0])
    for i, (a, ca) in enumerate(items):
        in_use = list(ca["visible"])
        for b, cb in items[:i]:
            if cb["t"][1] > ca["t"][0]:  # b still ran when a started
                assert not set(ca["visible"]) & set(cb["visible"]), f"#{a}, #{b} shared a GPU"
                in_use += cb["visible"]
        assert len(in_use) <= GPUS, f"{len(in_use)} GPUs in use when #{a} started"


def test_ray_packs_tp1_and_tp2_trials_onto_the_gpus(fake_gpus: Path) -> None:
    ex = RayExecutor(GPUS, tp=1, trial_fn=record_trial)
    tps = [2, 1, 1, 2, 1, 1, 2]
    try:
        futs = [
            ex.submit(spec(fake_gpus, i, tp=tp) if i % 2 else spec(fake_gpus, i, tp_size=tp))
            for i, tp in enumerate(tps)
        ]
        too_big = ex.submit(spec(fake_gpus, 99, tp_size=GPUS * 2)).result(timeout=60)
        results = [f.result(timeout=180) for f in futs]
        assert len(ex.actors) <= GPUS  # never more actors than slots
    finally:
        ex.shutdown()
    assert [r.status for r in results] == [TrialStatus.COMPLETE] * len(tps), results
    calls = records(fake_gpus)
    assert [calls[i]["need"] for i in range(len(tps))] == tps
    check_packing(calls)
    # packed, not one at a time: a TP 1 trial ran beside a TP 2 one
    spans = [(c["t"], c["need"]) for c in calls.values()]
    assert any(a[0] < b[1] and b[0] < a[1] for a, n in spans for b, m in spans if n != m)
    assert too_big.status == TrialStatus.FAILED and too_big.failure is not None
    assert too_big.failure.cls == FailureClass.BAD_ARGUMENTS
    assert f"has {GPUS}" in too_big.failure.reason and 99 not in calls


def test_ray_tp2_trial_waits_for_two_free_gpus(fake_gpus: Path) -> None:
    ex = RayExecutor(GPUS, tp=1, trial_fn=record_trial)
    try:
        # three long TP 1 trials hold three GPUs; one is free
        futs = [ex.submit(spec(fake_gpus, i, hold_s=h)) for i, h in enumerate([2.0, 4.0, 4.0])]
        deadline = time.monotonic() + 60
        while len(ex.busy_actors()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        futs.append(ex.submit(spec(fake_gpus, 3, tp=2, hold_s=0.5)))  # waits for trial 0
        time.sleep(0.3)
        futs.append(ex.submit(spec(fake_gpus, 4, hold_s=0.2)))  # queues behind the TP 2
        results = [f.result(timeout=180) for f in futs]
    finally:
        ex.shutdown()
    assert all(r.status == TrialStatus.COMPLETE for r in results), results
    calls = records(fake_gpus)
    check_packing(calls)
    assert calls[3]["t"][0] >= calls[0]["t"][1]  # two GPUs were free only once trial 0 ended
    assert calls[4]["t"][0] >= calls[3]["t"][0]  # first come, first served
