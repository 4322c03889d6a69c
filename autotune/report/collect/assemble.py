"""collect(): read one sweep from the results database and assemble its ReportData from the
collectors beside this module (trials, baseline and winner, tables, Pareto front, capacity,
decode ceiling, provenance, importances)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.planner.dispatch import engine_model_path
from autotune.report.collect.capacity import winner_capacity
from autotune.report.collect.ceiling import decode_ceiling
from autotune.report.collect.correction import planner_correction
from autotune.report.collect.data import Direction, ReportData, TrialInfo
from autotune.report.collect.pareto import pareto_points
from autotune.report.collect.provenance import sweep_provenance
from autotune.report.collect.quality import quality_figures, quality_report
from autotune.report.collect.selection import (
    find_baseline,
    pick_winner,
    read_finalists,
    read_selection,
    read_warm_starts,
)
from autotune.report.collect.spec import (
    is_simulated,
    objective_refs,
    scenario_order,
    spec_env,
    stored_spec,
)
from autotune.report.collect.study import importances
from autotune.report.collect.tables import compare_scenarios, failure_groups, top_trials
from autotune.report.collect.trials import trial_info
from autotune.report.launch import Redactor, redact_mapping

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.store.models import FailureRow, SweepRow


def collect(store: Store, sweep_name: str, *, redactor: Redactor | None = None) -> ReportData:
    """Read sweep `sweep_name` from `store` (StorageError naming the sweeps that exist if not).

    Secret-named config fields and env vars are redacted here, so nothing downstream can leak
    them; `redactor` learns their values to scrub free text (log tails) too.
    """
    red = redactor if redactor is not None else Redactor()
    row = store.get_sweep(sweep_name)
    notes: list[str] = []
    spec, spec_dict = stored_spec(row, notes)
    simulated = is_simulated(row, spec)
    refs = objective_refs(spec)
    direction: Direction = refs[0][1]
    trials = _read_trials(store, row.id or 0, red)
    env = spec_env(spec)
    red.add_from(env, env=True)

    baseline = find_baseline(row, trials, store, notes)
    finalists = read_finalists(row)
    selection = read_selection(row)
    winner = pick_winner(row, trials, direction, finalists, selection)
    feasible = _feasible(trials, winner)
    _note_outcome(row, winner, feasible, notes)
    scenarios = scenario_order(spec, trials)
    data = ReportData(
        sweep=row.name,
        status=row.status,
        simulated=simulated,
        objective_metric=refs[0][0],
        objective_direction=direction,
        objectives=refs,
        multi_objective=len(refs) > 1,
        **_spec_fields(row, spec, spec_dict, env, simulated),
        trials=trials,
        counts=_status_counts(trials),
        baseline=baseline,
        winner=winner,
        feasible=feasible,
        scenarios=scenarios,
        comparison=compare_scenarios(baseline, winner, scenarios),
        top=top_trials(trials, baseline, winner, direction),
        finalists=finalists,
        selection=selection,
        failures=failure_groups(trials),
        provenance=sweep_provenance(store, row, spec, simulated, trials),
        notes=notes,
    )
    data.pareto, data.pareto_axes = pareto_points(data)
    data.capacity = winner_capacity(data)
    data.correction = planner_correction(data)
    data.decode = decode_ceiling(data)
    data.importances = importances(store, row, refs)
    row_notes = row.notes if isinstance(row.notes, Mapping) else {}
    data.narrowed = [str(n) for n in row_notes.get("narrowed") or []]
    data.warm_starts = read_warm_starts(row, trials)
    data.quality = quality_report(store, row_notes, spec, trials, winner)
    by_number = {t.number: t for t in trials}
    for f in data.finalists:
        t = by_number.get(f.number)
        f.quality = quality_figures(t) if t is not None else None
    # data.notes, not `notes`: the model holds its own copy of the list.
    if row.status == "running":
        data.notes.insert(0, "the sweep is still running: this report shows the trials so far")
    if baseline is not None and baseline.status != "complete":
        data.notes.append(
            f"the baseline (trial {baseline.label}, engine defaults) did not complete "
            f"({baseline.status}): changes against it cannot be measured"
        )
    return data


def _read_trials(store: Store, sweep_id: int, red: Redactor) -> list[TrialInfo]:
    """Every trial of the sweep, each with its first stored failure."""
    rows = store.get_trials(sweep_id)
    failures = store.get_failures(sweep_id)
    fail_by_trial: dict[int, FailureRow] = {}
    for f in failures:
        fail_by_trial.setdefault(f.trial_id, f)
    return [trial_info(store, t, fail_by_trial.get(t.id or 0), red) for t in rows]


def _feasible(trials: Sequence[TrialInfo], winner: TrialInfo | None) -> bool:
    """False when trials were measured but none is feasible, or every proposal was rejected by
    the planner."""
    return winner is not None or not (
        any(t.status == "complete" for t in trials)
        or (trials and all(t.status == "pruned" and t.launch is None for t in trials))
    )


def _note_outcome(
    row: SweepRow, winner: TrialInfo | None, feasible: bool, notes: list[str]
) -> None:
    """Notes on why there is no winner, and on a sweep that stopped early."""
    if not feasible:
        notes.append(
            "no trial satisfies the constraints (or nothing fits): there is no winner; "
            "the closest trials are listed under Top configurations"
        )
    elif winner is None:
        notes.append("no trial completed: there is no winner yet")
    for rev in (row.notes or {}).get("spec_revisions") or []:
        changed = ", ".join(str(k) for k in rev.get("changed") or [])
        notes.append(
            f"the spec was edited when the sweep was resumed after {rev.get('after_trials')} "
            f"launches ({changed}); the spec shown is the last one, and launch.sh starts what "
            "the winning trial itself ran"
        )
    early = (row.notes or {}).get("early_stop")
    if isinstance(early, dict):
        n = early.get("trials")
        trials = "a trial" if n == 1 else f"{n} trials in a row"
        notes.append(
            f"the sweep stopped early: {trials} failed with "
            f"{early.get('failure_class')}, a fault of the environment ({early.get('reason')})"
        )


def _spec_fields(
    row: SweepRow,
    spec: Any,
    spec_dict: dict[str, Any] | None,
    env: dict[str, str],
    simulated: bool,
) -> dict[str, Any]:
    """ReportData's fields read from the stored spec (the sweep row's when it has none)."""
    return {
        "description": spec.description if spec is not None else "",
        "spec": redact_mapping(spec_dict) if spec_dict is not None else None,
        "model_path": engine_model_path(spec.target.model_path or spec.target.model)
        if spec
        else row.model,
        "host": spec.engine.host if spec else "127.0.0.1",
        "port": spec.engine.port if spec else None,  # None: the engine's own default port
        "env": redact_mapping(env, env=True),
        "launcher": list(spec.engine.launcher)
        if spec is not None and not simulated and getattr(spec.engine, "launcher", None)
        else None,
        "tp": spec.target.tp if spec else 1,
    }


def _status_counts(trials: Sequence[TrialInfo]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for t in trials:
        counts[t.status] += 1
    return dict(sorted(counts.items()))
