"""The default search (`run_sweep`, exactly as a user runs it) on a landscape: trials answered
from the landscape's noise-free table times the launch's luck, which the sweep itself draws
(simulate.run_noise / straggler_rate / flaky_start_rate, sweep/setup.trial_spec). Each trial
keeps its simulated seconds (startup plus benchmark, times its slowdown) per worker slot, so a
run's simulated hours are known; with two workers the trials also sleep a small fixed share of
their simulated time, so that they finish in the order they would on real machines.
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.engines.base import Failure, FailureClass, LaunchReport
from autotune.store.db import Store
from autotune.store.models import TrialStatus
from autotune.sweep.executors import InProcessExecutor
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.spec import parse_spec
from autotune.sweep.trial import ScenarioMeasurement, TrialResult, TrialSpec

from .landscapes import Landscape, slowed, spec_data

REAL_S_PER_SIM_S = 2e-4  # two workers: a 2-minute launch sleeps 24 ms


@dataclass
class Clock:
    """Simulated seconds per worker slot, and when each launch ended."""

    by_worker: dict[str, float] = field(default_factory=dict)
    ends: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, worker: str, secs: float) -> None:
        with self.lock:
            self.by_worker[worker] = self.by_worker.get(worker, 0.0) + secs
            self.ends.append(self.by_worker[worker])

    def steady_per_h(self) -> float:
        """Launches per hour until the first worker has nothing left to launch: what a
        sweep bounded by the clock (budget.until) gets, without the drain at the end of a
        launch budget while the last long launch of the other worker runs on."""
        first_idle = min(self.by_worker.values(), default=0.0)
        done = sum(1 for t in self.ends if t <= first_idle + 1e-9)
        return done / (first_idle / 3600) if first_idle else 0.0

    def makespan_h(self) -> float:
        return max(self.by_worker.values(), default=0.0) / 3600

    def busy_h(self) -> float:
        return sum(self.by_worker.values()) / 3600


def _scaled(figs: dict[str, float | None], slowdown: float) -> dict[str, float | None]:
    return {k: None if v is None else slowed(k, v, slowdown) for k, v in figs.items()}


def table_trial(land: Landscape, clock: Clock, *, sleep: bool) -> Any:
    """A TrialFn answering from the landscape's table."""
    from autotune.bench.scenarios import MAIN_FIGURE, scenario_from_dict
    from autotune.sweep.trial_bench import cut_reason

    def trial(spec: TrialSpec, *, worker: str = "table", **_: Any) -> TrialResult:
        res = TrialResult(number=spec.number, status=TrialStatus.RUNNING, worker=worker,
                          repeat=spec.repeat)  # fmt: skip
        e = land.entry(spec.config)
        slow = spec.sim_slowdown
        if not spec.sim_start_fails and e.fits:
            pass
        else:  # an engine started and died: a launch spent
            res.launch = LaunchReport(ready=False, simulated=True)
        if spec.sim_start_fails:
            res.status = TrialStatus.FAILED
            res.failure = Failure(cls=FailureClass.CRASH, reason="simulated flaky start")
            secs = e.startup_s * 0.5
        elif not e.fits:
            res.status = TrialStatus.FAILED
            res.failure = Failure(cls=FailureClass.KV_CACHE_OOM, reason="; ".join(e.reasons))
            secs = e.startup_s or 60.0
        else:
            res.launch = LaunchReport(ready=True, simulated=True, **{
                k: v for k, v in e.facts.items() if k != "weights_gib"})  # fmt: skip
            secs = e.startup_s
            for raw in spec.scenarios:
                sc = scenario_from_dict(raw)
                figs = _scaled(e.figures[sc.label], slow)
                # the main figure follows its kind's direction
                fig, higher = MAIN_FIGURE[sc.kind]
                base = e.figures[sc.label].get("main")
                if base is not None:
                    figs["main"] = base / slow if higher else base * slow
                run_s = e.bench_s * slow / max(len(spec.scenarios), 1)
                cut = spec.cut_after_s if sc.label == spec.cut_scenario else None
                if cut is not None and run_s > cut:  # search.cut_below stops it there
                    secs += cut
                    res.status, res.reason = TrialStatus.PRUNED, cut_reason(sc.label, cut)
                    break
                res.measurements.append(ScenarioMeasurement(
                    scenario=sc.label, kind=sc.kind, value=figs.get("main"), figures=figs,
                    result={"table": True, "wall_s": run_s}))  # fmt: skip
                secs += run_s
                v = figs.get("main")
                if (sc.label == spec.probe and spec.probe_threshold is not None
                        and v is not None):  # fmt: skip
                    worse = v < spec.probe_threshold if spec.probe_higher_is_better else (
                        v > spec.probe_threshold)  # fmt: skip
                    if worse:
                        res.status, res.reason = TrialStatus.PRUNED, "probe below threshold"
                        break
            if res.status == TrialStatus.RUNNING:
                res.status = TrialStatus.COMPLETE
        secs += 10.0  # stop
        clock.add(worker, secs)
        if sleep:
            time.sleep(secs * REAL_S_PER_SIM_S)
        res.timings = {"start_s": 0.0, "bench_s": secs, "stop_s": 0.0, "total_s": secs}
        return res

    return trial


@dataclass
class Run:
    winner: dict[str, Any] | None
    launched: int
    hours: float  # simulated, wall (makespan over workers)
    busy_hours: float
    steady_per_h: float  # launches per simulated hour before the first worker idles
    by_source: dict[str, int]
    selection: dict[str, Any] | None
    real_s: float


def run_ours(land: Landscape, seed: int, budget: int, *, workers: int = 1,
             overrides: dict[str, Any] | None = None, store_path: Path | None = None,
             name: str | None = None) -> Run:  # fmt: skip
    """The default search with `budget` launches; the winner it returns. `store_path`: a
    database that outlives the run (earlier sweeps in it are warm starts; else a fresh one)."""
    data = spec_data(land.name, seed=seed, budget=budget)
    if name is not None:
        data["name"] = name
    for dotted, v in (overrides or {}).items():
        node = data
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = v
    clock = Clock()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(path=store_path or Path(tmp) / "s.db")
        out = run_sweep(
            parse_spec(data),
            store=store,
            out_dir=Path(tmp) / "out",
            executor=InProcessExecutor(
                workers, trial_fn=table_trial(land, clock, sleep=workers > 1)
            ),
            install_signals=False,
        )
        notes = store.get_sweep(data["name"]).notes or {}
        store.close()
    return Run(
        winner=dict(out.best["config"]) if out.best is not None else None,
        launched=out.launched,
        hours=clock.makespan_h(),
        busy_hours=clock.busy_h(),
        steady_per_h=clock.steady_per_h(),
        by_source=dict(notes.get("launches_by_source") or {}),
        selection=notes.get("selection"),
        real_s=time.monotonic() - t0,
    )
