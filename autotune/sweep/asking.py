"""One proposal: what the loop launches next. Optuna hands out queued trials first (the seeds,
queued at the start by seeding.queue_seeds; reruns; refine steps), then samples; in the refine
phase the next neighbour of a climbing start is queued before asking. The planner gates each
proposal (a rejected one is stored pruned, with its reasons, and told infeasible), a
configuration already measured or running is told its earlier result, and the rest becomes a
running row and the TrialSpec a worker gets."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.engines.base import FailureClass
from autotune.store.models import TrialStatus
from autotune.sweep.refine import enqueue_neighbour
from autotune.sweep.state import Running
from autotune.sweep.study import (
    RERUN_PREFIX,
    SOURCE_ATTR,
    config_for,
    config_key,
    set_constraints,
)

if TYPE_CHECKING:
    import optuna

    from autotune.sweep.planning import Assessment
    from autotune.sweep.state import SweepState


def in_refine_phase(state: SweepState) -> bool:
    """Whether the last `search.refine` share of the budget (trials, else time) has begun,
    once there is a feasible best to climb from (never for a grid)."""
    share = state.setup.spec.search.refine
    if not share or state.incumbent is None or state.setup.spec.search.sampler == "grid":
        return False
    budget = state.budget
    if budget.max_trials is not None:
        return state.launched + len(state.running_keys) >= (1 - share) * budget.max_trials
    left = budget.seconds_left()
    if left is None:
        return False
    total = left + (time.monotonic() - state.setup.t_start)
    return left <= share * total


def next_trial(state: SweepState) -> Running | None:
    """The next trial to launch, or None when the proposal was rejected by the planner or
    already measured (it is told so, and the loop asks again)."""
    t_ask = time.monotonic()
    if in_refine_phase(state):
        enqueue_neighbour(state)
    trial = state.study.ask()
    config, source = config_for(trial, state.setup.space)
    a = state.setup.planner.assess(config)
    key = config_key(config)
    if not a.fits:
        reject(state, trial, config, a, key, source)
        return None
    if key in state.done_by_key or key in state.running_keys:
        tell_duplicate(state, trial, key)
        return None
    return start(state, trial, config, a, key, source, t_ask)


def reject(
    state: SweepState,
    trial: optuna.Trial,
    config: dict[str, Any],
    a: Assessment,
    key: str,
    source: str,
) -> None:
    """A configuration the planner says cannot run: stored pruned with the planner's reasons
    (its first rule as evidence), told infeasible through its constraints."""
    import optuna

    row = state.store.add_trial(
        state.sweep_id,
        number=trial.number,
        status=TrialStatus.PRUNED,
        config=config,
        params=trial.params,
        prediction=a.prediction(),
    )
    state.store.add_failure(
        row.id or 0,
        FailureClass.PLANNER_REJECTED.value,
        "; ".join(a.reasons),
        evidence=a.rule_ids[0] if a.rule_ids else None,
    )
    set_constraints(trial, a.constraints)
    state.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    state.rejected_keys.add(key)
    if state.launched == 0 and not state.running_keys:
        shared = set(a.reasons)
        state.refused_by_all = (
            shared if state.refused_by_all is None else state.refused_by_all & shared
        )
        state.refusals += 1
    state.note(trial.number, "pruned", f"planner: {a.reasons[0]}", source)


def tell_duplicate(state: SweepState, trial: optuna.Trial, key: str) -> None:
    """A configuration measured before is told that result; one running now is failed
    (ignored by the sampler). Nothing is launched or stored."""
    import optuna

    prev = state.done_by_key.get(key)
    trial.set_user_attr("duplicate_of", prev.number if prev else -1)
    if prev is not None and prev.values is not None:
        set_constraints(trial, prev.constraints)
        state.study.tell(trial, prev.values)
    elif prev is not None:
        set_constraints(trial, prev.constraints)
        state.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    else:
        state.study.tell(trial, state=optuna.trial.TrialState.FAIL)
    state.duplicates += 1


def is_reference(state: SweepState, source: str) -> bool:
    """The baseline, or a re-run of it after a resume (of a re-run, after a second one)."""
    seen: set[str] = set()
    while source.startswith(RERUN_PREFIX) and source not in seen:
        seen.add(source)
        number = source.removeprefix(RERUN_PREFIX)
        first = next(
            (t for t in state.study.get_trials(deepcopy=False) if str(t.number) == number), None
        )
        if first is None:
            return False
        source = str(first.user_attrs.get(SOURCE_ATTR, ""))
    return source == "baseline"


def start(
    state: SweepState,
    trial: optuna.Trial,
    config: dict[str, Any],
    a: Assessment,
    key: str,
    source: str,
    t_ask: float,
) -> Running:
    """The running row of a trial about to launch, and what the loop tracks of it."""
    number = trial.number
    spec = state.trial_spec(number, config, repeat=0, reference=is_reference(state, source))
    row = state.store.add_trial(
        state.sweep_id,
        number=number,
        status=TrialStatus.RUNNING,
        config=config,
        params=trial.params,
        prediction=a.prediction(),
        log_path=str(Path(spec.log_dir) / "server.log"),
    )
    return Running(trial, row.id or 0, spec, a, key, source, t_ask, time.monotonic() - t_ask)
