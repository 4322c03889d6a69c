"""Run-to-run variation of simulated launches (sim/variation.py): seeded, heavy-tailed, with
stragglers and flaky starts, and carried from the spec to the analytic trial and the server."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.engines.base import FailureClass
from autotune.sim.analytic import closed_loop, evaluate
from autotune.sim.variation import FLAKY_START, RunVariation
from autotune.store.models import TrialStatus
from autotune.sweep.analytic import analytic_trial
from autotune.sweep.trial import TrialSpec
from tests.sim.conftest import AWQ, G4080, K1


def test_draws_are_seeded_and_off_by_default() -> None:
    v = RunVariation(0.04, 0.03, 0.03)
    assert v.draw(7) == v.draw(7)
    assert v.draw(7) != v.draw(8)
    assert RunVariation().draw(7).slowdown == 1.0 and not RunVariation().enabled


def test_spread_tails_stragglers_and_flaky_starts() -> None:
    v = RunVariation(0.04, 0.03, 0.03)
    draws = [v.draw(s) for s in range(20_000)]
    logs = [math.log(d.slowdown) for d in draws if not d.straggler]
    sd = statistics.pstdev(logs)
    assert 0.03 < sd < 0.045
    # heavier tails than a normal of the same spread: more draws beyond 3 sd
    beyond = sum(1 for x in logs if abs(x) > 3 * sd) / len(logs)
    assert beyond > 0.005  # a normal gives 0.0027
    assert max(abs(x) for x in logs) <= 4 * 0.04 + 1e-9  # capped at 4 sigma
    assert 0.02 < sum(d.straggler for d in draws) / len(draws) < 0.04
    assert 0.02 < sum(d.start_fails for d in draws) / len(draws) < 0.04
    slow = [d.slowdown for d in draws if d.straggler]
    assert min(slow) > 1.0 and statistics.median(slow) > 1.2


def test_a_slower_launch_measures_proportionally_less() -> None:
    w = closed_loop(1, 2, 128, 256)
    one = evaluate(AWQ, G4080, K1, w, noise=0.0)
    slow = evaluate(AWQ, G4080, K1, w, noise=0.0, slowdown=1.25)
    assert slow["output_tok_s"] == pytest.approx(one["output_tok_s"] / 1.25, rel=0.02)


def _spec(tmp_path: Path, **kw: object) -> TrialSpec:
    return TrialSpec(
        sweep="t", number=1, config=dict(K1), engine_version="0.5.17",
        model="qwen3.8-27b-awq-int4", gpu="rtx-4080-super-32g", simulate=True,
        scenarios=[{"kind": "decode", "prompt_len": 64, "output_len": 16, "num_requests": 1}],
        log_dir=str(tmp_path), **kw,
    )  # fmt: skip


def test_a_flaky_start_fails_the_analytic_trial_as_a_crash(tmp_path: Path) -> None:
    res = analytic_trial(_spec(tmp_path, sim_start_fails=True))
    assert res.status == TrialStatus.FAILED and res.failure is not None
    assert res.failure.cls == FailureClass.CRASH and not res.measurements


def test_the_sweep_draws_each_launchs_luck_from_the_spec(tmp_path: Path) -> None:
    """simulate.run_noise reaches every trial as its own slowdown, the server as a flag."""
    from autotune.store.db import Store
    from autotune.sweep.executors import InProcessExecutor
    from autotune.sweep.orchestrator import run_sweep
    from autotune.sweep.spec import parse_spec
    from tests.sweep.conftest import make_spec

    seen: list[TrialSpec] = []

    def recording(spec: TrialSpec, **kw: object) -> object:
        seen.append(spec)
        return analytic_trial(spec, **kw)  # type: ignore[arg-type]

    data = make_spec(**{"simulate.run_noise": 0.05, "budget.max_trials": 5})
    store = Store(path=tmp_path / "db.sqlite")
    run_sweep(
        parse_spec(data),
        store=store,
        out_dir=tmp_path / "out",
        executor=InProcessExecutor(1, trial_fn=recording),
        install_signals=False,
    )
    store.close()  # fmt: skip
    slowdowns = [s.sim_slowdown for s in seen]
    assert len(set(slowdowns)) == len(seen) >= 4 and all(0.8 < x < 1.7 for x in slowdowns)
    for s in seen:
        i = s.sim_extra_args.index("--sim-slowdown")
        assert float(s.sim_extra_args[i + 1]) == pytest.approx(s.sim_slowdown, rel=1e-5)


def test_the_simulated_server_fails_a_flaky_start(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "autotune.sim", "--model-path", "tiny-dense", "--sim-gpu",
         "h200-141g", "--sim-start-fails", "--port", "1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1 and FLAKY_START in r.stderr
