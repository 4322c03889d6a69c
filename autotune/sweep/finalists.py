"""Finalists: the top-k configurations are launched again `repeats` times (fresh engines, P5)
so the winner is chosen on a mean with its spread rather than on one lucky run. Re-runs are
stored as measurements of the original trial with repeat = 1..R; a failed re-run is a failure
of that trial ("finalist repeat r: ...")."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from autotune.store.models import TrialStatus
from autotune.sweep.confidence import figures_by_repeat
from autotune.sweep.control import POLL_S, check_deadline, wait_any
from autotune.sweep.recording import (
    ENV_FAILURES_AT_ONCE,
    collect,
    store_measurements,
    watch_env,
)
from autotune.sweep.resume import row_feasible
from autotune.sweep.state import Running
from autotune.sweep.study import config_key
from autotune.sweep.trial import started_nothing

if TYPE_CHECKING:
    from concurrent.futures import Future

    from autotune.store.models import TrialRow
    from autotune.sweep.executors import Executor
    from autotune.sweep.state import SweepState
    from autotune.sweep.trial import TrialResult


def finalist_rows(state: SweepState) -> list[TrialRow]:
    """Top-k complete, feasible trials by the first objective, one per configuration."""
    maximize = state.setup.maximize
    rows = [
        r for r in state.store.get_trials(state.sweep_id, TrialStatus.COMPLETE) if row_feasible(r)
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
        if len(out) >= state.setup.spec.finalists.top_k:
            break
    return out


def _done_repeats(state: SweepState, row: TrialRow) -> set[int]:
    done = {m.repeat for m in state.store.get_measurements(row.id or 0) if m.repeat > 0}
    for f in state.store.get_failures(state.sweep_id):
        if f.trial_id == row.id and f.reason.startswith(("finalist repeat ", "confirm repeat ")):
            try:
                done.add(int(f.reason.split()[2].rstrip(":")))
            except (IndexError, ValueError):
                continue
    return done


def finalist_jobs(state: SweepState) -> list[tuple[int, int, dict[str, Any], int]]:
    """(row id, trial number, config, repeat) still to run; a resumed sweep skips done ones."""
    jobs = []
    for row in finalist_rows(state):
        done = _done_repeats(state, row)
        for r in range(1, state.setup.spec.finalists.repeats + 1):
            if r not in done:
                jobs.append((row.id or 0, row.number or 0, dict(row.config), r))
    return jobs


def summarize(state: SweepState) -> list[dict[str, Any]]:
    """Mean and spread of the first objective over the search run and the re-runs."""
    out = []
    for row in finalist_rows(state):
        runs = figures_by_repeat(state.store.get_measurements(row.id or 0))
        metric = state.setup.refs[0].metric
        values = [v for r in sorted(runs) if (v := runs[r].get(metric)) is not None]
        if not values and row.value is not None:
            values = [row.value]
        out.append(
            {
                "number": row.number,
                "trial_id": row.id,
                "metric": state.setup.refs[0].metric,
                "values": [round(v, 4) for v in values],
                "runs": len(values),
                "mean": round(statistics.fmean(values), 4) if values else None,
                "stdev": round(statistics.stdev(values), 4) if len(values) > 1 else None,
                "min": round(min(values), 4) if values else None,
                "max": round(max(values), 4) if values else None,
                "config": {k: v for k, v in row.config.items() if v is not None},
            }
        )
    maximize = state.setup.maximize

    def order(f: dict[str, Any]) -> tuple[bool, float]:
        mean = f["mean"] if isinstance(f["mean"], int | float) else 0.0
        return f["mean"] is None, -mean if maximize else mean

    out.sort(key=order)
    return out


def run_finalists(state: SweepState, executor: Executor) -> list[dict[str, Any]]:
    """Re-launch the finalists (in the sweep's slots), then summarise mean and spread."""
    queue = finalist_jobs(state)
    running: dict[Future[TrialResult], Running] = {}
    while queue or running:
        check_deadline(state.budget, state.stop)
        while queue and len(running) < executor.slots and not state.stop.graceful.is_set():
            row_id, number, config, repeat = queue.pop(0)
            spec = state.trial_spec(number, config, repeat=repeat)
            item = Running(
                None, row_id, spec, None, config_key(config), "finalist", time.monotonic()
            )
            running[executor.submit(spec)] = item
        if state.stop.graceful.is_set():
            queue.clear()
            executor.stop_launching()  # re-runs waiting for a GPU give up too
            if state.stop.hard.is_set():
                executor.cancel_all()
        for fut in wait_any(list(running), POLL_S):
            item = running.pop(fut)
            res = collect(state, item, fut)
            record_repeat(state, item, res)
            if res.status != TrialStatus.INTERRUPTED and not started_nothing(res):
                state.finalist_launched += 1
    out = summarize(state)
    state.notes["finalists"] = out
    state.save_notes()
    return out


def record_repeat(
    state: SweepState, item: Running, res: TrialResult, *, label: str = "finalist"
) -> None:
    """Store a re-run as measurements (repeat r) or a failure of the original trial."""
    r = item.spec.repeat
    store_measurements(state.store, item.row_id, res, repeat=r)
    if res.failure is not None:
        state.store.add_failure(
            item.row_id,
            res.failure.cls.value,
            f"{label} repeat {r}: {res.failure.reason}",
            evidence=res.failure.evidence,
            log_tail=res.log_tail,
        )
    state.note(
        item.spec.number,
        f"{label} r{r} {res.status.value}",
        res.reason or "",
        label,
        res.timings.get("total_s"),
    )
    if res.failure is not None and res.failure.cls in ENV_FAILURES_AT_ONCE:
        # a re-run on a worker with another release's engine stops the sweep as a search
        # trial does; the winner is not picked on fewer runs in silence
        watch_env(state, res.status, res.failure)
