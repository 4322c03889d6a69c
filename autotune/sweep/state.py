"""The state of a running sweep: the one object that the strategies (seeding, asking,
recording, refining, finalists, resume) take as their argument, as Optuna's samplers take a
study. It holds the setup, the study (trials waiting), the trials running and done, the budget
and the stop requests (and their reason), the counters, the best so far and the notes stored in
the sweep's row."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.engines.base import FailureClass

if TYPE_CHECKING:
    import optuna

    from autotune.store.db import Store
    from autotune.store.models import SweepRow
    from autotune.sweep.confidence import Estimate
    from autotune.sweep.control import Budget, StopController
    from autotune.sweep.planning import Assessment
    from autotune.sweep.progress import SweepProgress
    from autotune.sweep.setup import SweepSetup
    from autotune.sweep.trial import TrialSpec

log = logging.getLogger("autotune.sweep.driver")  # the logger the trial lines always had

# Failures that say nothing about the configuration: not told to the sampler as infeasible,
# and the configuration is run once more.
NOT_THE_CONFIG = frozenset(
    {FailureClass.WORKER_LOST, FailureClass.PORT_IN_USE, FailureClass.ENGINE_MISMATCH}
)
NOT_THE_CONFIG_VALUES = frozenset(c.value for c in NOT_THE_CONFIG)  # as rows store them


# The source of a finalist's confirmation re-run (sweep/confirm.py), here for the modules that
# confirm imports.
CONFIRM_SOURCE = "confirm"


@dataclass
class Running:
    """A trial handed to the executor."""

    trial: optuna.Trial | None  # None for finalist re-runs
    row_id: int
    spec: TrialSpec
    assessment: Assessment | None
    key: str
    source: str
    t_ask: float
    pre_s: float = 0.0
    t_done: float | None = None  # when the driver first saw it finished
    # a result held for the quality reference: the trials running when it finished that may
    # give it (recording.held_for_reference), None before it is seen finished
    waits_on: set[Any] | None = None


@dataclass
class Done:
    """A configuration measured (or failed) once: a proposal of it again is told this."""

    number: int
    values: list[float] | None
    constraints: dict[str, float]
    state: str  # complete, pruned, failed


def start_notes(row: SweepRow) -> dict[str, Any]:
    """The notes a run of the sweep starts from: the row's (a resumed run starts with a fresh
    early-stop streak)."""
    notes: dict[str, Any] = dict(row.notes or {})
    notes.pop("early_stop", None)
    return notes


@dataclass(eq=False)
class SweepState:
    setup: SweepSetup
    store: Store
    study: optuna.Study
    budget: Budget
    stop: StopController
    bar: SweepProgress
    notes: dict[str, Any]  # stored in the sweep's row by save_notes
    on_trial: Callable[[dict[str, Any]], None] | None = None
    done_by_key: dict[str, Done] = field(default_factory=dict)
    running_keys: set[str] = field(default_factory=set)
    rejected_keys: set[str] = field(default_factory=set)  # the planner said no
    # reasons shared by every planner rejection since the sweep started, while nothing has
    # launched: a reason no configuration escapes (None: no rejection yet)
    refused_by_all: set[str] | None = None
    refusals: int = 0
    launched: int = 0  # trials that started an engine (this sweep, all runs)
    durations: list[float] = field(default_factory=list)  # of launched trials, seconds
    duplicates: int = 0
    best_probe: float | None = None
    best_wall_s: float | None = None  # the fastest feasible run of the cut scenario, seconds
    best_value: float | None = None  # of the first objective, feasible trials only
    incumbent: tuple[int, dict[str, Any]] | None = None  # (number, config) of the best
    feasible_results: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)
    # measured configurations that broke a bound: the refine's marginal model learns from them
    broken_results: list[dict[str, Any]] = field(default_factory=list)
    local_optima: set[str] = field(default_factory=set)  # refine starts with no step left
    refine_turn: int = 0
    # noise-aware selection (sweep/confirm.py): config key -> its runs, re-runs started per key
    estimates: dict[str, Estimate] = field(default_factory=dict)
    repeats_started: dict[str, int] = field(default_factory=dict)
    confirm_launched: int = 0
    finalist_launched: int = 0
    env_streak: tuple[FailureClass | None, int] = (None, 0)
    early_stop: FailureClass | None = None

    @property
    def sweep_id(self) -> int:
        return self.setup.sweep_id

    # -- queries -----------------------------------------------------------------------------

    def waiting(self) -> int:
        """Trials queued in the study (seeds, reruns, refine steps) not yet asked for."""
        import optuna

        return len(
            self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        )

    def typical_trial_s(self) -> float | None:
        return statistics.median(self.durations) if self.durations else None

    def trial_spec(
        self, number: int, config: Mapping[str, Any], *, repeat: int, reference: bool = False
    ) -> TrialSpec:
        return self.setup.trial_spec(
            number,
            config,
            repeat=repeat,
            best_probe=self.best_probe,
            best_wall_s=self.best_wall_s,
            reference=reference,
        )

    # -- updates -----------------------------------------------------------------------------

    def update_probe(self, value: float) -> None:
        if self.best_probe is None:
            self.best_probe = value
        elif self.setup.probe_higher:
            self.best_probe = max(self.best_probe, value)
        else:
            self.best_probe = min(self.best_probe, value)

    def update_wall(self, wall_s: float | None) -> None:
        """A feasible run's benchmark time of the cut scenario: the fastest sets the cut."""
        if isinstance(wall_s, int | float) and wall_s > 0:
            self.best_wall_s = (
                wall_s if self.best_wall_s is None else min(self.best_wall_s, wall_s)
            )

    def update_best(
        self,
        values: list[float],
        cons: Mapping[str, float],
        row_id: int | None = None,
        *,
        number: int | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """A feasible result joins the refine starts; the best one becomes the incumbent (and,
        given its row, the sweep's best trial in the database). One that broke a bound is kept
        for the refine's marginal model."""
        if any(v > 0 for v in cons.values()):
            if config is not None:
                self.broken_results.append(dict(config))
            return
        v = values[0]
        better = self.best_value is None or (
            v > self.best_value if self.setup.maximize else v < self.best_value
        )
        if number is not None and config is not None:
            self.feasible_results.append((v, number, dict(config)))
        if better:
            self.best_value = v
            if number is not None and config is not None:
                self.incumbent = (number, dict(config))
            if row_id is not None:
                self.store.update_sweep(self.sweep_id, best_trial_id=row_id)

    # -- reporting ---------------------------------------------------------------------------

    def note(
        self, number: int, status: str, text: str, source: str, secs: float | None = None
    ) -> None:
        """One trial's line: logged and shown by the progress bar (or its events)."""
        took = f" [{secs:.1f} s]" if secs else ""
        src = "" if source == "sampler" else f" ({source})"
        line = f"#{number} {status}{src}: {text}{took}"
        log.info(line)
        self.bar.trial(
            number,
            status,
            line,
            done=self.launched,
            running=len(self.running_keys),
            best=self.best_value,
        )

    def progress(self, running: int) -> None:
        self.bar.update(
            done=self.launched,
            total=self.budget.max_trials,
            best=self.best_value,
            running=running,
            deadline_s=self.budget.seconds_left(),
        )

    def save_notes(self) -> None:
        self.notes["planner_correction"] = self.setup.planner.correction()
        self.notes["duplicates_skipped"] = self.duplicates
        if self.confirm_launched:
            self.notes["confirm_launched"] = self.confirm_launched  # launches that are no row
        self.notes["objective"] = [r.model_dump() for r in self.setup.refs]
        self.store.update_sweep(self.sweep_id, notes=dict(self.notes))
