"""Finalists: the top-k configurations are launched again `repeats` times (fresh engines, P5)
so the winner is chosen on a mean with its spread rather than on one lucky run. Re-runs are
stored as measurements of the original trial with repeat = 1..R; a failed re-run is a failure
of that trial ("finalist repeat r: ...")."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from autotune.store.models import TrialStatus
from autotune.sweep.study import config_key

if TYPE_CHECKING:
    from concurrent.futures import Future

    from autotune.store.models import TrialRow
    from autotune.sweep.driver import Sweep, _Running
    from autotune.sweep.executors import Executor
    from autotune.sweep.trial import TrialResult


def finalist_rows(sweep: Sweep) -> list[TrialRow]:
    """Top-k complete, feasible trials by the first objective, one per configuration."""
    maximize = (sweep.refs[0].direction or "maximize") == "maximize"
    rows = [
        r
        for r in sweep.store.get_trials(sweep.sweep_id, TrialStatus.COMPLETE)
        if r.value is not None
        and not any(v > 0 for v in ((r.launch or {}).get("constraints") or {}).values())
    ]
    rows.sort(key=lambda r: (-(r.value or 0.0) if maximize else (r.value or 0.0), r.number or 0))
    seen: set[str] = set()
    out = []
    for r in rows:
        key = config_key(r.config)
        if key in seen:
            continue
        seen.add(key)
        out.append(r)
        if len(out) >= sweep.spec.finalists.top_k:
            break
    return out


def _done_repeats(sweep: Sweep, row: TrialRow) -> set[int]:
    done = {m.repeat for m in sweep.store.get_measurements(row.id or 0) if m.repeat > 0}
    for f in sweep.store.get_failures(sweep.sweep_id):
        if f.trial_id == row.id and f.reason.startswith("finalist repeat "):
            try:
                done.add(int(f.reason.split()[2].rstrip(":")))
            except (IndexError, ValueError):
                continue
    return done


def finalist_jobs(sweep: Sweep) -> list[tuple[int, int, dict[str, Any], int]]:
    """(row id, trial number, config, repeat) still to run; a resumed sweep skips done ones."""
    jobs = []
    for row in finalist_rows(sweep):
        done = _done_repeats(sweep, row)
        for r in range(1, sweep.spec.finalists.repeats + 1):
            if r not in done:
                jobs.append((row.id or 0, row.number or 0, dict(row.config), r))
    return jobs


def objective_of(sweep: Sweep, figures_by_scenario: dict[str, dict[str, Any]]) -> float | None:
    metric = sweep.refs[0].metric
    scenario, _, fig = metric.rpartition(".")
    value = figures_by_scenario.get(scenario, {}).get(fig)
    return float(value) if isinstance(value, int | float) else None


def summarize(sweep: Sweep) -> list[dict[str, Any]]:
    """Mean and spread of the first objective over the search run and the re-runs."""
    out = []
    for row in finalist_rows(sweep):
        per_repeat: dict[int, dict[str, dict[str, Any]]] = {}
        for m in sweep.store.get_measurements(row.id or 0):
            per_repeat.setdefault(m.repeat, {})[m.scenario] = dict(m.metrics.get("figures") or {})
        values = [
            v for r in sorted(per_repeat) if (v := objective_of(sweep, per_repeat[r])) is not None
        ]
        if not values and row.value is not None:
            values = [row.value]
        out.append(
            {
                "number": row.number,
                "trial_id": row.id,
                "metric": sweep.refs[0].metric,
                "values": [round(v, 4) for v in values],
                "runs": len(values),
                "mean": round(statistics.fmean(values), 4) if values else None,
                "stdev": round(statistics.stdev(values), 4) if len(values) > 1 else None,
                "min": round(min(values), 4) if values else None,
                "max": round(max(values), 4) if values else None,
                "config": {k: v for k, v in row.config.items() if v is not None},
            }
        )
    maximize = (sweep.refs[0].direction or "maximize") == "maximize"

    def order(f: dict[str, Any]) -> tuple[bool, float]:
        mean = f["mean"] if isinstance(f["mean"], int | float) else 0.0
        return f["mean"] is None, -mean if maximize else mean

    out.sort(key=order)
    return out


def run_finalists(sweep: Sweep, executor: Executor) -> list[dict[str, Any]]:
    """Re-launch the finalists (in the sweep's slots), then summarise mean and spread."""
    from autotune.sweep.driver import POLL_S, _Running
    from autotune.sweep.orchestrator import wait_any
    from autotune.sweep.study import config_key

    queue = finalist_jobs(sweep)
    running: dict[Future[TrialResult], _Running] = {}
    while queue or running:
        sweep._check_deadline()
        while queue and len(running) < executor.slots and not sweep.stop.graceful.is_set():
            row_id, number, config, repeat = queue.pop(0)
            spec = sweep._trial_spec(number, config, repeat=repeat)
            item = _Running(
                None, row_id, spec, None, config_key(config), "finalist", time.monotonic()
            )
            running[executor.submit(spec)] = item
        if sweep.stop.graceful.is_set():
            queue.clear()
            executor.stop_launching()  # re-runs waiting for a GPU give up too
            if sweep.stop.hard.is_set():
                executor.cancel_all()
        for fut in wait_any(list(running), POLL_S):
            sweep._finish(running.pop(fut), fut)
    out = summarize(sweep)
    sweep.notes["finalists"] = out
    sweep._save_notes()
    return out


def finish_repeat(sweep: Sweep, item: _Running, res: TrialResult) -> None:
    """Store a re-run as measurements (repeat r) or a failure of the original trial."""
    r = item.spec.repeat
    for m in res.measurements:
        sweep.store.add_measurement(
            item.row_id,
            m.scenario,
            {"figures": m.figures, "result": m.result},
            repeat=r,
            value=m.value,
        )
    if res.failure is not None:
        sweep.store.add_failure(
            item.row_id,
            res.failure.cls.value,
            f"finalist repeat {r}: {res.failure.reason}",
            evidence=res.failure.evidence,
            log_tail=res.log_tail,
        )
    sweep._note(
        item.spec.number,
        f"finalist r{r} {res.status.value}",
        res.reason or "",
        "finalist",
        res.timings.get("total_s"),
    )
