"""What `autotune status` prints: read-only views of the database (another process may be
writing it: SQLite runs in WAL mode, so these reads never block the sweep)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.store.models import TrialStatus
from autotune.sweep.resume import row_launched

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.store.models import TrialRow


def _best(best_trial_id: int | None, trials: list[TrialRow]) -> TrialRow | None:
    """The sweep's best trial that breaks no constraint (the driver records only such a one):
    an infeasible trial is never shown as the best."""
    return next((t for t in trials if best_trial_id is not None and t.id == best_trial_id), None)


def sweeps_overview(store: Store) -> list[dict[str, Any]]:
    out = []
    for row in store.list_sweeps():
        trials = store.get_trials(row.id or 0)
        best = _best(row.best_trial_id, trials)
        out.append(
            {
                "name": row.name,
                "status": row.status,
                "trials": len(trials),
                "best_value": best.value if best else None,
                "created_at": row.created_at.isoformat(timespec="seconds"),
                "updated_at": row.updated_at.isoformat(timespec="seconds"),
            }
        )
    return out


def sweep_status(store: Store, name: str) -> dict[str, Any]:
    """One sweep: counts by status, launched, best, baseline, running trials, failures,
    the planner's correction, stop reason and finalists."""
    row = store.get_sweep(name)
    notes = dict(row.notes or {})
    trials = store.get_trials(row.id or 0)
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    launched = sum(1 for t in trials if row_launched(t))
    best = _best(row.best_trial_id, trials)
    baseline = next((t for t in trials if (t.launch or {}).get("source") == "baseline"), None)

    def brief(t: Any) -> dict[str, Any] | None:
        if t is None:
            return None
        return {
            "number": t.number,
            "status": t.status,
            "value": t.value,
            "values": t.values,
            "config": {k: v for k, v in (t.config or {}).items() if v is not None},
        }

    running = [
        {
            "number": t.number,
            "worker": t.worker,
            "started_at": t.started_at.isoformat(timespec="seconds") if t.started_at else None,
        }
        for t in trials
        if t.status == TrialStatus.RUNNING.value
    ]
    recent = sorted(
        (t for t in trials if t.finished_at is not None),
        key=lambda t: t.finished_at,  # type: ignore[arg-type,return-value]
    )[-5:]
    return {
        "name": row.name,
        "status": row.status,
        "engine": row.engine,
        "engine_version": row.engine_version,
        "model": row.model,
        "gpu": row.gpu,
        "simulated": bool(notes.get("simulated")),
        "created_at": row.created_at.isoformat(timespec="seconds"),
        "updated_at": row.updated_at.isoformat(timespec="seconds"),
        "counts": counts,
        "trials": len(trials),
        "launched": launched,
        "best": brief(best),
        "baseline": brief(baseline),
        "running": running,
        "recent": [
            {"number": t.number, "status": t.status, "value": t.value} for t in reversed(recent)
        ],
        "failures_by_class": store.failures_by_class(row.id or 0),
        "planner_correction": notes.get("planner_correction"),
        "stop_reason": notes.get("stop_reason"),
        "finalists": notes.get("finalists", []),
        "seeds": notes.get("seeds", []),
        "objective": notes.get("objective"),
    }
