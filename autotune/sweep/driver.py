"""The sweep loop (used through `orchestrator.run_sweep`): open the state (seed a fresh sweep,
reconcile a resumed one, rebuild the counters from the database), then ask -> gate -> dispatch
-> record until the budget, the search or a stop request ends it; drain what still runs, re-run
the finalists, close the sweep and hand back its outcome.

The strategies live beside it and act on the one SweepState: seeding, asking (with refine),
recording, finalists, resume; outcome closes the sweep."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from autotune.sweep.asking import next_trial
from autotune.sweep.confirm import SOURCE as CONFIRM
from autotune.sweep.confirm import finish as finish_selection
from autotune.sweep.confirm import load as load_estimates
from autotune.sweep.confirm import next_repeat, record_confirm
from autotune.sweep.control import POLL_S, Budget, StopController, check_deadline, wait_any
from autotune.sweep.finalists import run_finalists
from autotune.sweep.outcome import SweepOutcome, close, outcome_of
from autotune.sweep.recording import held_for_reference, record_trial
from autotune.sweep.resume import load_state, reconcile
from autotune.sweep.seeding import queue_seeds
from autotune.sweep.state import Running, SweepState
from autotune.sweep.study import open_study, study_name

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.sweep.executors import Executor
    from autotune.sweep.progress import SweepProgress
    from autotune.sweep.setup import SweepSetup
    from autotune.sweep.trial import TrialResult

RunningTrials = dict[Future["TrialResult"], Running]


def run(
    setup: SweepSetup,
    *,
    store: Store,
    notes: dict[str, Any],
    budget: Budget,
    stop: StopController,
    executor: Executor,
    bar: SweepProgress,
    resumed: bool,
    on_trial: Callable[[dict[str, Any]], None] | None = None,
) -> SweepOutcome:
    """Run the sweep to its end in `executor`'s slots; `notes` (the row's) are kept up to
    date in place."""
    t0 = time.monotonic()
    study = open_study(
        setup.spec,
        url=store.storage_url,
        study_name=study_name(setup.spec),
        workers=executor.slots,
    )
    state = SweepState(
        setup=setup,
        store=store,
        study=study,
        budget=budget,
        stop=stop,
        bar=bar,
        notes=notes,
        on_trial=on_trial,
    )
    begin(state, resumed=resumed)
    running: RunningTrials = {}
    stop_reason, finished = search(state, executor, running)
    drain(state, executor, running)
    if stop.graceful.is_set() and stop.reason:
        # A second signal while draining escalates (and says so): report the latest reason.
        stop_reason = stop.reason
    finalists: list[dict[str, Any]] = []
    if not stop.graceful.is_set() and setup.spec.finalists.top_k:
        finalists = run_finalists(state, executor)
        if state.early_stop is not None and stop.reason:
            # a re-run met another release's engine (recording.watch_env): say so, and leave
            # the sweep to --resume, not closed as done on fewer runs
            stop_reason, finished = stop.reason, False
    finish_selection(state)
    status = close(state, stop_reason, finished)
    outcome = outcome_of(state, status, stop_reason, time.monotonic() - t0, finalists)
    # The last line shows the final state, not the last poll's (trials that finished after
    # it, finalists, nothing running any more).
    bar.finish(
        done=outcome.launched,
        best=(outcome.best or {}).get("value", state.best_value),
        status=outcome.status,
        stop_reason=outcome.stop_reason,
    )
    return outcome


def begin(state: SweepState, *, resumed: bool) -> None:
    """A fresh sweep queues its seeds; a resumed one reconciles Optuna with the database.
    Either way the counters, the best so far and the dedupe map come from the rows."""
    if resumed:
        reconcile(state)
    else:
        queue_seeds(state)
    load_state(state)
    load_estimates(state)
    state.save_notes()


def search(state: SweepState, executor: Executor, running: RunningTrials) -> tuple[str, bool]:
    """Launch and record trials until the search ends: (why, whether it ended complete).
    Trials still running are left in `running`."""
    idle = 0
    while True:
        record_ready(state, running)
        check_deadline(state.budget, state.stop)
        stop_reason, finished = end_of_search(state, running, idle)
        if stop_reason:
            return stop_reason, finished
        idle = fill_slots(state, executor, running, idle)
        if state.stop.hard.is_set():
            executor.cancel_all()
        wait_any([f for f in running if not f.done()], POLL_S)
        record_ready(state, running)
        state.progress(len(running))


def record_ready(state: SweepState, running: RunningTrials) -> None:
    """Record the finished trials, but for one held for the quality reference that a trial
    running when it finished may give (recording.held_for_reference)."""
    for fut, item in running.items():
        if fut.done() and item.t_done is None:  # a held result's wall ends here
            item.t_done = time.monotonic()
    while True:
        ready = [f for f in running if f.done() and not held_for_reference(state, f, running)]
        if not ready:
            return
        for fut in ready:
            record(state, running.pop(fut), fut)


def record(state: SweepState, item: Running, fut: Future[TrialResult]) -> None:
    """A search trial, or a confirmation re-run of one (sweep/confirm.py)."""
    if item.source == CONFIRM:
        record_confirm(state, item, fut)
    else:
        record_trial(state, item, fut)


def fill_slots(state: SweepState, executor: Executor, running: RunningTrials, idle: int) -> int:
    """Launch proposals into the free slots while the budget allows; returns the count of
    proposals in a row that launched nothing (rejected or already measured)."""
    # a finished trial held for the quality reference no longer holds its worker
    while busy(running) < executor.slots and may_launch(state, len(running)):
        item = next_repeat(state) or next_trial(state)
        if item is None:
            idle += 1
            if idle >= state.budget.max_idle_asks or unrunnable(state):
                break
            continue
        idle = 0
        running[executor.submit(item.spec)] = item
        state.running_keys.add(item.key)
    return idle


def busy(running: RunningTrials) -> int:
    """The workers in use: every trial handed out but a finished one held for the quality
    reference (a trial that just finished still counts until recorded: its result may stop
    the sweep)."""
    return sum(not (f.done() and item.waits_on) for f, item in running.items())


def drain(state: SweepState, executor: Executor, running: RunningTrials) -> None:
    """Wait for the running trials (stopping them on a hard stop; after a graceful one, none
    waiting for a GPU launches)."""
    while running:
        check_deadline(state.budget, state.stop)
        if state.stop.hard.is_set():
            executor.cancel_all()
        elif state.stop.graceful.is_set():
            executor.stop_launching()  # no engine launches after a graceful stop
        wait_any([f for f in running if not f.done()], POLL_S)
        record_ready(state, running)
        state.progress(len(running))


def may_launch(state: SweepState, running: int) -> bool:
    if state.stop.graceful.is_set():
        return False
    budget = state.budget
    if budget.max_trials is not None and state.launched + running >= budget.max_trials:
        return False
    left, typical = budget.seconds_left(), state.typical_trial_s()
    if left is not None and typical is not None and left < typical:
        return False  # it would only be interrupted at the deadline
    return True


# Planner refusals in a row, nothing launched yet, all for one shared reason: the target
# itself cannot run (NVFP4 on a GPU without FP4, weights larger than the GPU), not a corner of
# the space; the search stops with that reason instead of asking max_idle_asks times.
UNRUNNABLE_AFTER = 20


def unrunnable(state: SweepState) -> bool:
    """Whether every proposal so far was refused for a shared reason, with no seed left."""
    return (
        state.launched == 0
        and state.refusals >= UNRUNNABLE_AFTER
        and bool(state.refused_by_all)
        and not state.waiting()
    )


def end_of_search(state: SweepState, running: RunningTrials, idle: int) -> tuple[str, bool]:
    """(why the search ends, whether it ended complete) or ("", False) to go on. A search
    cut short by a signal or the clock is STOPPED (resumable), else FINISHED."""
    budget = state.budget
    if state.stop.graceful.is_set():
        return state.stop.reason or "stop requested", False
    if running:
        return "", False
    if budget.max_trials is not None and state.launched >= budget.max_trials:
        return (
            f"budget: {state.launched} trials launched (max_trials {budget.max_trials})",
            True,
        )
    if unrunnable(state):
        reason = min(state.refused_by_all or {""})
        return (
            f"nothing this target can run: the {state.refusals} configurations proposed were "
            f"all refused for the same reason, which no setting of the space changes: {reason}"
        ), True
    if idle >= budget.max_idle_asks:
        return (
            f"search exhausted: {idle} proposals in a row were infeasible or already "
            "measured (converged, or the space is mostly infeasible)"
        ), True
    left, typical = budget.seconds_left(), state.typical_trial_s()
    if left is not None and typical is not None and left < typical:
        return f"budget: {left:.0f} s left, less than a typical trial ({typical:.0f} s)", False
    if state.setup.spec.search.sampler == "grid" and not state.waiting():
        return "grid: every configuration has been tried", True
    return "", False
