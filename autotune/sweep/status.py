"""What `autotune status` prints: read-only views of the database (another process may be
writing it: SQLite runs in WAL mode, so these reads never block the sweep)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune.store.models import SweepStatus, TrialStatus
from autotune.sweep.resume import row_launched

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.store.models import TrialRow


def _best(best_trial_id: int | None, trials: list[TrialRow]) -> TrialRow | None:
    """The sweep's best trial that breaks no constraint (the driver records only such a one):
    an infeasible trial is never shown as the best."""
    return next((t for t in trials if best_trial_id is not None and t.id == best_trial_id), None)


DRIVER_ALIVE, DRIVER_DEAD, DRIVER_UNKNOWN = "alive", "dead", "unknown"


def driver_state(notes: Mapping[str, Any]) -> str:
    """Whether the process that runs the sweep (recorded at start and resume in
    ``notes["driver"]``: pid, create_time, host) still does: "alive"; "dead" when on this host
    its PID is gone, a zombie or reused by another process (creation time differs): the driver
    was killed, and the sweep, still marked running, is resumable; "unknown" when it ran on
    another host or nothing was recorded."""
    import socket

    import psutil

    from autotune.process.tree import same_process

    d = notes.get("driver") or {}
    pid, born, host = d.get("pid"), d.get("create_time"), d.get("host")
    if not isinstance(pid, int) or not isinstance(born, int | float) or not host:
        return DRIVER_UNKNOWN
    if host != socket.gethostname():
        return DRIVER_UNKNOWN  # its PID means nothing here
    try:
        p = psutil.Process(pid)
        alive = same_process(p, float(born)) and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        alive = False
    except psutil.Error:
        return DRIVER_UNKNOWN  # cannot look
    return DRIVER_ALIVE if alive else DRIVER_DEAD


def _driver(status: str, notes: Mapping[str, Any]) -> str | None:
    """driver_state for a sweep marked running; None for the others (nothing drives them)."""
    return driver_state(notes) if status == SweepStatus.RUNNING.value else None


def sweeps_overview(store: Store) -> list[dict[str, Any]]:
    out = []
    for row in store.list_sweeps():
        trials = store.get_trials(row.id or 0)
        best = _best(row.best_trial_id, trials)
        out.append(
            {
                "name": row.name,
                "status": row.status,
                "driver": _driver(row.status, row.notes or {}),
                "trials": len(trials),
                "best_value": best.value if best else None,
                "created_at": row.created_at.isoformat(timespec="seconds"),
                "updated_at": row.updated_at.isoformat(timespec="seconds"),
            }
        )
    return out


def _brief(t: TrialRow | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {
        "number": t.number,
        "status": t.status,
        "value": t.value,
        "values": t.values,
        "config": {k: v for k, v in (t.config or {}).items() if v is not None},
    }


def _running(trials: list[TrialRow]) -> list[dict[str, Any]]:
    return [
        {
            "number": t.number,
            "worker": t.worker,
            "started_at": t.started_at.isoformat(timespec="seconds") if t.started_at else None,
        }
        for t in trials
        if t.status == TrialStatus.RUNNING.value
    ]


def sweep_status(store: Store, name: str) -> dict[str, Any]:
    """One sweep: counts by status, launched, best, baseline, running trials, failures,
    the planner's correction, stop reason and finalists; for a sweep marked running, whether
    its driver process still runs (``driver``: see driver_state)."""
    row = store.get_sweep(name)
    notes = dict(row.notes or {})
    trials = store.get_trials(row.id or 0)
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    # confirmation re-runs (sweep/confirm.py) are launches stored as repeats, not rows
    launched = sum(1 for t in trials if row_launched(t)) + int(notes.get("confirm_launched") or 0)
    best = _best(row.best_trial_id, trials)
    baseline = next((t for t in trials if (t.launch or {}).get("source") == "baseline"), None)
    recent = sorted(
        (t for t in trials if t.finished_at is not None),
        key=lambda t: t.finished_at,  # type: ignore[arg-type,return-value]
    )[-5:]
    driver = dict(notes.get("driver") or {})
    return {
        "name": row.name,
        "status": row.status,
        # for a sweep marked running: "alive", "dead" (killed: resume it) or "unknown"
        "driver": _driver(row.status, notes),
        "driver_pid": driver.get("pid"),
        "driver_host": driver.get("host"),
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
        "best": _brief(best),
        "baseline": _brief(baseline),
        "running": _running(trials),
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
