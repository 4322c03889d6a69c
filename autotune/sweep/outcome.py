"""How a sweep ended: its final status and notes written to the database, and the SweepOutcome
that `run_sweep` hands back (the winner is the best trial that breaks no constraint; with none,
the outcome is infeasible, exit 7)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from autotune.errors import EngineError, TrialInfeasible
from autotune.store.models import SweepStatus, TrialStatus
from autotune.sweep.resume import row_feasible

if TYPE_CHECKING:
    from autotune.store.models import TrialRow
    from autotune.sweep.state import SweepState


class SweepOutcome(BaseModel):
    """What `run_sweep` hands back (the report is built from the database by name)."""

    name: str
    sweep_id: int
    db_url: str = Field(
        exclude=True,
        description="SQLAlchemy URL of the database (password included: never dumped)",
    )
    db_display: str = Field(description="the URL with its password masked")
    status: str
    stop_reason: str
    out_dir: str
    elapsed_s: float
    launched: int = Field(description="trials that started an engine (this sweep, all runs)")
    counts: dict[str, int] = Field(default_factory=dict, description="trials by status")
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    best: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    finalists: list[dict[str, Any]] = Field(default_factory=list)
    pareto: list[int] = Field(
        default_factory=list, description="multi-objective: trial numbers on the Pareto front"
    )
    planner_correction: dict[str, Any] = Field(default_factory=dict)
    seeds: list[dict[str, Any]] = Field(default_factory=list)
    signal: int | None = None
    infeasible: bool = Field(
        False, description="no trial met the constraints (or nothing fit): there is no winner"
    )
    early_stop_exit: int | None = Field(
        None, description="exit code of the failure class that stopped the sweep early"
    )

    @property
    def exit_code(self) -> int:
        if self.signal:
            return 128 + self.signal
        if self.early_stop_exit is not None:
            return self.early_stop_exit
        return TrialInfeasible.exit_code if self.infeasible else 0


def close(state: SweepState, stop_reason: str, finished: bool) -> SweepStatus:
    """Store the final status and notes: FINISHED when the search ended complete and no stop
    was requested, else STOPPED (resumable)."""
    status = (
        SweepStatus.FINISHED
        if finished and not state.stop.graceful.is_set()
        else (SweepStatus.STOPPED)
    )
    state.notes["stop_reason"] = stop_reason
    state.save_notes()
    state.store.update_sweep(state.sweep_id, status=status)
    return status


def outcome_of(
    state: SweepState,
    status: SweepStatus,
    stop_reason: str,
    elapsed: float,
    finalists: list[dict[str, Any]],
) -> SweepOutcome:
    """The outcome of a closed sweep, read back from its rows."""
    from autotune.store.db import mask_url

    rows = state.store.get_trials(state.sweep_id)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    best = best_feasible(rows, maximize=state.setup.maximize)
    chosen = (state.notes.get("selection") or {}).get("winner")
    if chosen is not None:  # the best lower bound over all runs (sweep/confirm.py)
        best = next((r for r in rows if r.number == chosen), best)
    return SweepOutcome(
        name=state.setup.spec.name,
        sweep_id=state.sweep_id,
        db_url=state.store.storage_url,
        db_display=mask_url(state.store.storage_url),
        status=status.value,
        stop_reason=stop_reason,
        out_dir=str(state.setup.out_dir),
        elapsed_s=round(elapsed, 2),
        launched=state.launched,
        counts=counts,
        failures_by_class=state.store.failures_by_class(state.sweep_id),
        best=brief(best),
        infeasible=best is None and _nothing_feasible(rows, counts, state.launched),
        early_stop_exit=EngineError.exit_code if state.early_stop is not None else None,
        baseline=brief(_baseline(rows)),
        finalists=finalists,
        pareto=pareto(state),
        planner_correction=state.setup.planner.correction(),
        seeds=list(state.notes.get("seeds", [])),
        signal=state.stop.signum,
    )


def best_feasible(rows: Sequence[TrialRow], *, maximize: bool) -> TrialRow | None:
    """The complete trial with the best main value that breaks no constraint, or None:
    a trial that breaks one is never the winner."""
    sign = 1.0 if maximize else -1.0
    ok = [r for r in rows if row_feasible(r)]
    return max(ok, key=lambda r: (sign * (r.value or 0.0), -(r.number or 0)), default=None)


def _nothing_feasible(rows: Sequence[TrialRow], counts: dict[str, int], launched: int) -> bool:
    """With no feasible winner: trials were measured (none met the constraints), or nothing
    fit at all (every trial rejected by the planner)."""
    return counts.get(TrialStatus.COMPLETE.value, 0) > 0 or (
        bool(rows) and launched == 0 and set(counts) == {TrialStatus.PRUNED.value}
    )


def _baseline(rows: Sequence[TrialRow]) -> TrialRow | None:
    """The engine defaults' trial: its re-run when the first one was interrupted (a resume
    runs it again) or failed for a reason that was not the configuration's (a lost worker,
    another release's engine: state.NOT_THE_CONFIG)."""
    from autotune.sweep.study import last_rerun

    baseline = next((r for r in rows if (r.launch or {}).get("source") == "baseline"), None)
    if baseline is None:
        baseline = next((r for r in rows if (r.prediction or {}) and r.number == 0), None)
    if baseline is None:
        return None
    return last_rerun(
        baseline,
        rows,
        number=lambda r: r.number,
        source=lambda r: (r.launch or {}).get("source"),
        not_measured=_not_measured,
    )


def _not_measured(row: TrialRow) -> bool:
    """Interrupted, or failed for a reason that was not the configuration's."""
    from autotune.sweep.state import NOT_THE_CONFIG_VALUES

    return (
        row.status == "interrupted"
        or (row.launch or {}).get("failure_class") in NOT_THE_CONFIG_VALUES
    )


def brief(r: TrialRow | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {
        "number": r.number,
        "status": r.status,
        "value": r.value,
        "values": r.values,
        "config": {k: v for k, v in r.config.items() if v is not None},
    }


def pareto(state: SweepState) -> list[int]:
    """Feasible non-dominated trials of a multi-objective study (Optuna's best_trials)."""
    if len(state.setup.refs) < 2:
        return []
    return sorted(t.number for t in state.study.best_trials)
