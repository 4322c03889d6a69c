"""Ray workers: a killed actor fails its trial with WORKER_LOST, the engine it left behind is
stopped, the configuration runs again on a fresh actor, and the sweep finishes."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from autotune.engines.base import FailureClass
from autotune.store.models import SweepStatus, TrialStatus
from autotune.sweep.orchestrator import registry_path_for, run_sweep
from autotune.sweep.spec import parse_spec
from tests.sweep.conftest import procs_matching
from tests.sweep.test_faults import fake_spec

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray


def test_killed_actor_fails_its_trial_and_the_sweep_goes_on(store: Any, tmp_path: Path) -> None:
    from autotune.sweep.ray_executor import RayExecutor

    marker = str(tmp_path / "fake-model")
    spec = parse_spec(
        fake_spec(
            tmp_path,
            **{
                "budget.max_trials": 3,
                "search.known_good": False,
                "space.overrides.chunked_prefill_size": 8192,  # the fake engine's well-behaved mode
                "engine.env": {"FAKE_TOKEN_DELAY_S": "0.15"},
                "execution.executor": "ray",
            },
        )
    )
    out_dir = tmp_path / "out"
    executor = RayExecutor(2, simulate=True, registry_path=str(registry_path_for(store, out_dir)))
    result: dict[str, Any] = {}

    def sweep() -> None:
        try:
            result["outcome"] = run_sweep(
                spec, store=store, out_dir=out_dir, executor=executor, install_signals=False
            )
        except BaseException as exc:  # surfaced by the assertion below
            result["error"] = exc

    t = threading.Thread(target=sweep)
    try:
        t.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not procs_matching(marker):
            time.sleep(0.1)
        assert procs_matching(marker), "no engine started"
        time.sleep(0.5)
        busy = executor.busy_actors()
        assert busy
        ray.kill(busy[0], no_restart=True)
        t.join(timeout=180)
        assert not t.is_alive()
        assert "error" not in result, result.get("error")
        out = result["outcome"]
        assert out.status == SweepStatus.FINISHED.value and out.launched == 3
        rows = store.get_trials(out.sweep_id)
        lost = [r for r in rows if r.status == TrialStatus.FAILED.value]
        assert len(lost) == 1
        (failure,) = [f for f in store.get_failures(out.sweep_id) if f.trial_id == lost[0].id]
        assert failure.failure_class == FailureClass.WORKER_LOST.value
        assert "actor" in failure.reason
        rerun = [r for r in rows if (r.launch or {}).get("source") == f"rerun:#{lost[0].number}"]
        assert len(rerun) == 1 and rerun[0].status == TrialStatus.COMPLETE.value
        assert procs_matching(marker) == [], "the dead actor's engine was reaped"
    finally:
        executor.shutdown()
        t.join(timeout=30)


def test_a_ray_worker_checks_its_own_engine_install(tmp_path: Path) -> None:
    """The driver does not see the nodes' installs (check_target skips Ray); the actor running
    the trial reads its own node's engine with the launch's environment and launches nothing
    when it follows another release."""
    from autotune.sweep.ray_executor import RayExecutor
    from autotune.sweep.trial import started_nothing
    from tests.installs import fake_engine_site
    from tests.sweep.test_installed import _real_trial

    site = fake_engine_site(tmp_path / "node-site", "sglang", "sglang", "0.5.22")
    executor = RayExecutor(1, simulate=True)
    try:
        res = executor.submit(_real_trial(tmp_path, site)).result(timeout=120)
    finally:
        executor.shutdown()
    assert res.failure is not None and res.failure.cls == FailureClass.ENGINE_MISMATCH
    assert res.worker.startswith("ray:") and res.failure.reason.startswith(f"on {res.worker}: ")
    assert "SGLang 0.5.22" in res.failure.reason and started_nothing(res)
