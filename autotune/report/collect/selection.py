"""Which trials the report measures against: the baseline (engine defaults), the finalists
launched again, and the winner."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from autotune.report.collect.data import (
    Direction,
    Finalist,
    Selection,
    TrialInfo,
    WarmStart,
    num,
)
from autotune.report.collect.study import baseline_from_study

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.store.models import SweepRow


def find_baseline(
    row: SweepRow, trials: Sequence[TrialInfo], store: Store, notes: list[str]
) -> TrialInfo | None:
    """Trial 0 = engine defaults (DESIGN: orchestrator). The sweep marks it with source
    "baseline" in the launch record and in the Optuna trial's user attributes (a baseline the
    planner pruned was never launched, so only the study knows it)."""
    by_source = next((t for t in trials if t.source == "baseline"), None)
    if by_source is not None:
        by_source = _rerun_of(by_source, trials)
        by_source.baseline = True
        return by_source
    number: int | None = None
    meta = row.notes if isinstance(row.notes, Mapping) else {}
    for key in ("baseline_trial", "baseline_trial_number", "baseline"):
        v = meta.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            number = v
            break
        if isinstance(v, Mapping) and isinstance(v.get("number"), int):
            number = int(v["number"])
            break
    if number is None:
        number = baseline_from_study(store, row)
    if number is None and any(t.number == 0 for t in trials):
        number = 0
    found = next((t for t in trials if t.number == number), None) if number is not None else None
    if found is None:
        notes.append("no baseline trial (engine defaults) was found: changes are shown as values")
        return None
    found = _rerun_of(found, trials)
    found.baseline = True
    return found


def _rerun_of(first: TrialInfo, trials: Sequence[TrialInfo]) -> TrialInfo:
    """`first`, or its last re-run when it was interrupted (a resume ran it again) or failed
    for a reason that was not the configuration's (a lost worker, another release's engine:
    the sweep ran it again); followed through a re-run's own re-run."""
    from autotune.sweep.state import NOT_THE_CONFIG_VALUES
    from autotune.sweep.study import last_rerun

    return last_rerun(
        first,
        trials,
        number=lambda t: t.number,
        source=lambda t: t.source,
        not_measured=lambda t: (
            t.status == "interrupted"
            or (t.failure is not None and t.failure.failure_class in NOT_THE_CONFIG_VALUES)
        ),
    )


def read_finalists(row: SweepRow) -> list[Finalist]:
    meta = row.notes if isinstance(row.notes, Mapping) else {}
    out = []
    for f in meta.get("finalists") or []:
        if isinstance(f, Mapping):
            out.append(
                Finalist(
                    number=f.get("number"),
                    runs=int(f.get("runs") or 0),
                    mean=num(f.get("mean")),
                    stdev=num(f.get("stdev")),
                    min=num(f.get("min")),
                    max=num(f.get("max")),
                )
            )
    return out


def read_selection(row: SweepRow) -> Selection | None:
    """The sweep's own choice over all runs (sweep/confirm.py) and its launches by purpose."""
    meta = row.notes if isinstance(row.notes, Mapping) else {}
    sel, launches = meta.get("selection"), meta.get("launches_by_source")
    if not isinstance(sel, Mapping) and not isinstance(launches, Mapping):
        return None
    out = Selection.model_validate(dict(sel) if isinstance(sel, Mapping) else {})
    if isinstance(launches, Mapping):
        out.launches = {str(k): int(v) for k, v in launches.items()}
    out.cut_runs = int(meta.get("cut_runs") or 0)
    return out


def pick_winner(
    row: SweepRow,
    trials: Sequence[TrialInfo],
    direction: Direction,
    finalists: Sequence[Finalist] = (),
    selection: Selection | None = None,
) -> TrialInfo | None:
    """The sweep's own choice (the best lower confidence bound over every run), else the best
    finalist by its mean over fresh launches (sweep.finalists), else the sweep's best trial,
    else the best complete trial that breaks no constraint."""
    if selection is not None and selection.winner is not None:
        hit = next((t for t in trials if t.number == selection.winner), None)
        if hit is not None and hit.status == "complete" and hit.feasible:
            return hit
    ranked = [f for f in finalists if f.mean is not None and f.runs > 0]
    if ranked:
        sign = 1.0 if direction == "maximize" else -1.0
        top = max(ranked, key=lambda f: sign * (f.mean or 0.0))
        hit = next((t for t in trials if t.number == top.number), None)
        if hit is not None and hit.status == "complete" and hit.feasible:
            return hit
    if row.best_trial_id is not None:
        hit = next((t for t in trials if t.id == row.best_trial_id), None)
        if hit is not None and hit.feasible:
            return hit
    # a trial that breaks a constraint is never the winner
    done = [t for t in trials if t.status == "complete" and t.value is not None and t.feasible]
    if not done:
        return None
    sign = 1.0 if direction == "maximize" else -1.0
    return max(done, key=lambda t: (sign * (t.value or 0.0), -(t.number or 0)))


def read_warm_starts(row: SweepRow, trials: Sequence[TrialInfo]) -> list[WarmStart]:
    """The configurations of earlier sweeps the sweep was seeded with (notes.seeds, ids
    `warm:...`), each with the trial that launched it."""
    meta = row.notes if isinstance(row.notes, Mapping) else {}
    out: list[WarmStart] = []
    for seed in meta.get("seeds") or []:
        if not isinstance(seed, Mapping) or not str(seed.get("id", "")).startswith("warm:"):
            continue
        sid = str(seed["id"])
        launched = next((t.number for t in trials if t.source == sid), None)
        out.append(
            WarmStart(
                id=sid,
                source=str(seed.get("source") or ""),
                queued=bool(seed.get("enqueued")),
                reason=seed.get("reason"),
                trial=launched,
            )
        )
    return out
