"""Rebuilding a sweep's state from the database: at every start (what was launched, measured,
learnt) and after a crash (running rows -> interrupted; Optuna trials left RUNNING are told
what the database knows, or failed and re-queued)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from autotune.engines.base import FailureClass
from autotune.store.models import TrialStatus
from autotune.sweep.study import (
    CONFIG_ATTR,
    config_key,
    enqueue,
    set_constraints,
    trial_handle,
)

if TYPE_CHECKING:
    from autotune.store.models import TrialRow
    from autotune.sweep.driver import Sweep


def row_launched(row: TrialRow) -> bool:
    """Whether a stored trial counts as launched: it ran to an end and, as
    trial.started_nothing, did not fail before any process started."""
    if row.launch is None or row.status == TrialStatus.INTERRUPTED.value:
        return False
    launch = row.launch
    return not (
        row.status == TrialStatus.FAILED.value
        and launch.get("pid") is None
        and launch.get("report") is None
        and launch.get("failure_class") != FailureClass.WORKER_LOST.value
    )


def load_state(sweep: Sweep) -> None:
    """Counts, best values, the planner correction and the dedupe map from the rows."""
    from autotune.sweep.driver import NOT_THE_CONFIG, _Done

    for row in sweep.store.get_trials(sweep.sweep_id):
        launch = row.launch or {}
        launched = row_launched(row)
        if launched:
            sweep.launched += 1
            total = (launch.get("timings") or {}).get("total_s")
            if total:
                sweep.durations.append(float(total))
        report = launch.get("report") or {}
        pred = row.prediction or {}
        sweep.planner.observe(pred.get("kv_pool_tokens"), report.get("kv_pool_tokens"))
        key = config_key(row.config)
        cons = dict(launch.get("constraints") or pred.get("constraints") or {})
        if row.status == TrialStatus.COMPLETE.value and row.values:
            sweep.done_by_key[key] = _Done(row.number or 0, list(row.values), cons, "complete")
            sweep._update_best(list(row.values), cons, number=row.number, config=row.config)
        elif row.status == TrialStatus.FAILED.value and launch.get("failure_class") not in {
            c.value for c in NOT_THE_CONFIG
        }:
            sweep.done_by_key[key] = _Done(row.number or 0, None, {"launch_failed": 1.0}, "failed")
        elif row.status == TrialStatus.PRUNED.value and launched:
            sweep.done_by_key[key] = _Done(row.number or 0, None, {}, "pruned")
        elif row.status == TrialStatus.PRUNED.value:
            sweep.rejected_keys.add(key)
        if launched and sweep.probe:
            for m in sweep.store.get_measurements(row.id or 0):
                if m.scenario == sweep.probe and m.value is not None:
                    sweep._update_probe(m.value)


def reconcile(sweep: Sweep) -> None:
    """After a crash: running rows -> interrupted; Optuna trials left RUNNING are told what
    the database knows, or failed and re-queued."""
    import optuna

    assert sweep.study is not None
    interrupted = sweep.store.mark_interrupted(sweep.sweep_id)
    rows = {r.number: r for r in sweep.store.get_trials(sweep.sweep_id)}
    requeued = []
    for ft in sweep.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        row = rows.get(ft.number)
        status = row.status if row is not None else None
        if row is not None and status == TrialStatus.COMPLETE.value and row.values:
            t = trial_handle(sweep.study, ft.number)
            set_constraints(t, (row.launch or {}).get("constraints") or {})
            sweep.study.tell(t, list(row.values))
        elif row is not None and status in (
            TrialStatus.PRUNED.value,
            TrialStatus.FAILED.value,
        ):
            t = trial_handle(sweep.study, ft.number)
            cons = (row.prediction or {}).get("constraints") if row.launch is None else None
            set_constraints(t, cons or {"launch_failed": 1.0 if status == "failed" else 0.0})
            sweep.study.tell(t, state=optuna.trial.TrialState.PRUNED)
        else:
            sweep.study.tell(ft.number, state=optuna.trial.TrialState.FAIL)
            config = (
                row.config
                if row is not None
                else ft.user_attrs.get(CONFIG_ATTR) or sweep.space.resolve(ft.params)
            )
            enqueue(sweep.study, sweep.space, config, f"rerun:#{ft.number}")
            requeued.append(ft.number)
    runs = sweep.notes.setdefault("runs", [])
    runs.append(
        {
            "resumed_at": time.time(),
            "interrupted": [r.number for r in interrupted],
            "requeued": requeued,
        }
    )
