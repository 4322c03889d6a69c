"""Rebuilding a sweep's state from the database: at every start (what was launched, measured,
learnt) and after a crash (running rows -> interrupted; Optuna trials left RUNNING are told
what the database knows, or failed and re-queued)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from autotune.engines.base import FailureClass
from autotune.store.models import TrialStatus
from autotune.sweep.state import NOT_THE_CONFIG_VALUES, Done
from autotune.sweep.study import (
    CONFIG_ATTR,
    config_key,
    enqueue,
    rerun_source,
    set_constraints,
    trial_handle,
)

if TYPE_CHECKING:
    from autotune.store.models import TrialRow
    from autotune.sweep.state import SweepState


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


def row_feasible(row: TrialRow) -> bool:
    """Whether a stored trial is a complete one with a value and no bound broken."""
    cons = (row.launch or {}).get("constraints") or {}
    return (
        row.status == TrialStatus.COMPLETE.value
        and row.value is not None
        and not any(v > 0 for v in cons.values())
    )


def load_state(state: SweepState) -> None:
    """Counts, best values, the planner correction and the dedupe map from the rows."""
    for row in state.store.get_trials(state.sweep_id):
        launched = row_launched(row)
        if launched:
            _count_launch(state, row)
        _observe_kv(state, row)
        _remember(state, row, launched)
        if launched and state.setup.probe:
            for m in state.store.get_measurements(row.id or 0):
                if m.scenario == state.setup.probe and m.value is not None:
                    state.update_probe(m.value)
        restore_cut(state, row)


def restore_cut(state: SweepState, row: TrialRow) -> None:
    """A feasible complete run's benchmark time of the cut scenario (search.cut_below)."""
    label = state.setup.cut_scenario
    if label is None or not row_feasible(row):
        return
    for m in state.store.get_measurements(row.id or 0):
        if m.scenario == label and m.repeat == 0:
            state.update_wall(((m.metrics or {}).get("result") or {}).get("wall_s"))


def _count_launch(state: SweepState, row: TrialRow) -> None:
    state.launched += 1
    total = ((row.launch or {}).get("timings") or {}).get("total_s")
    if total:
        state.durations.append(float(total))


def _observe_kv(state: SweepState, row: TrialRow) -> None:
    report = (row.launch or {}).get("report") or {}
    pred = row.prediction or {}
    state.setup.planner.observe(
        pred.get("kv_pool_tokens"),
        report.get("kv_pool_tokens"),
        cell_bytes=(pred.get("plan") or {}).get("kv_cell_bytes"),
        corrected_kv=pred.get("kv_pool_tokens_corrected"),
        plan=pred.get("plan"),
        report=report,
    )


def _remember(state: SweepState, row: TrialRow, launched: bool) -> None:
    """The dedupe map (and the best so far) as the row's outcome says."""
    launch, pred = row.launch or {}, row.prediction or {}
    key = config_key(row.config)
    cons = dict(launch.get("constraints") or pred.get("constraints") or {})
    if row.status == TrialStatus.COMPLETE.value and row.values:
        state.done_by_key[key] = Done(row.number or 0, list(row.values), cons, "complete")
        state.update_best(list(row.values), cons, number=row.number, config=row.config)
    elif (
        row.status == TrialStatus.FAILED.value
        and launch.get("failure_class") not in NOT_THE_CONFIG_VALUES
    ):
        state.done_by_key[key] = Done(row.number or 0, None, {"launch_failed": 1.0}, "failed")
    elif row.status == TrialStatus.PRUNED.value and launched:
        state.done_by_key[key] = Done(row.number or 0, None, {}, "pruned")
    elif row.status == TrialStatus.PRUNED.value:
        state.rejected_keys.add(key)


def reconcile(state: SweepState) -> None:
    """After a crash: running rows -> interrupted; Optuna trials left RUNNING are told what
    the database knows, or failed and re-queued."""
    import optuna

    interrupted = state.store.mark_interrupted(state.sweep_id)
    rows = {r.number: r for r in state.store.get_trials(state.sweep_id)}
    requeued = []
    for ft in state.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        row = rows.get(ft.number)
        status = row.status if row is not None else None
        if row is not None and status == TrialStatus.COMPLETE.value and row.values:
            t = trial_handle(state.study, ft.number)
            set_constraints(t, (row.launch or {}).get("constraints") or {})
            state.study.tell(t, list(row.values))
        elif row is not None and status in (
            TrialStatus.PRUNED.value,
            TrialStatus.FAILED.value,
        ):
            t = trial_handle(state.study, ft.number)
            cons = (row.prediction or {}).get("constraints") if row.launch is None else None
            set_constraints(t, cons or {"launch_failed": 1.0 if status == "failed" else 0.0})
            state.study.tell(t, state=optuna.trial.TrialState.PRUNED)
        else:
            state.study.tell(ft.number, state=optuna.trial.TrialState.FAIL)
            config = (
                row.config
                if row is not None
                else ft.user_attrs.get(CONFIG_ATTR) or state.setup.space.resolve(ft.params)
            )
            enqueue(state.study, state.setup.space, config, rerun_source(ft.number))
            requeued.append(ft.number)
    runs = state.notes.setdefault("runs", [])
    runs.append(
        {
            "resumed_at": time.time(),
            "interrupted": [r.number for r in interrupted],
            "requeued": requeued,
        }
    )
