"""What the service tells about sweeps: the list, one sweep's status (from the database and its
job, or from the job alone while the sweep has not written its row yet), its trials."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from autotune.service.errors import NotFound
from autotune.service.jobs import JobManager, JobRecord
from autotune.service.schemas import (
    FailureInfo,
    Progress,
    SweepList,
    SweepState,
    SweepStatusOut,
    SweepSummary,
    TrialBrief,
)
from autotune.service.views import (
    as_int,
    elapsed,
    job_info,
    next_steps,
    parse_time,
    spec_max_trials,
    sweep_state,
)

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.store.models import SweepRow, TrialRow


class SweepQueries:
    """Reads of sweeps: the database (`store`) joined with this service's job table (`jobs`)."""

    def __init__(self, store: Store, jobs: JobManager):
        self.store = store
        self.jobs = jobs

    def list_sweeps(self) -> SweepList:
        from autotune.sweep.status import sweeps_overview

        jobs = {k: v for k, v in self.jobs.refresh().items() if v.kind == "sweep"}
        out: list[SweepSummary] = []
        seen: set[str] = set()
        for row in sweeps_overview(self.store):
            rec = jobs.get(row["name"])
            seen.add(row["name"])
            out.append(
                SweepSummary(
                    name=row["name"],
                    state=sweep_state(row["status"], rec, parse_time(row["updated_at"])),
                    status=row["status"],
                    trials=row["trials"],
                    best_value=row["best_value"],
                    created_at=row["created_at"],
                    updated_at=row["updated_at"],
                    job=rec.state if rec is not None else None,
                    queue_position=rec.queue_position if rec is not None else None,
                )
            )
        for name, rec in jobs.items():
            if name not in seen:
                out.append(
                    SweepSummary(
                        name=name,
                        state=sweep_state(None, rec, None),
                        status=None,
                        trials=0,
                        job=rec.state,
                        queue_position=rec.queue_position,
                    )
                )
        return SweepList(sweeps=out)

    def sweep_status(self, name: str) -> SweepStatusOut:
        """State, progress, best so far, failures by class, and next steps."""
        rec = self.jobs.get(name)
        if rec is not None and rec.kind != "sweep":
            rec = None
        row = self.store.find_sweep(name)
        if row is None:
            if rec is None:
                raise self.not_found(name)
            out = self._job_status(name, rec)
        else:
            out = self._recorded_status(name, row, rec)
        out.next_steps = next_steps(out)
        return out

    def _job_status(self, name: str, rec: JobRecord) -> SweepStatusOut:
        """A sweep known from its job only (queued, starting, or failed before its row)."""
        state = sweep_state(None, rec, None)
        return SweepStatusOut(
            name=name,
            state=state,
            status=None,
            progress=Progress(
                launched=0,
                max_trials=as_int(rec.overrides.get("max_trials")),
                fraction=0.0,
                running=0,
                elapsed_s=elapsed(rec),
                eta_s=None,
            ),
            job=job_info(rec, self.jobs.log_tail(name) if state == "failed_to_start" else None),
        )

    def _recorded_status(self, name: str, row: SweepRow, rec: JobRecord | None) -> SweepStatusOut:
        """A sweep with its row in the database (and maybe a job of this service)."""
        from autotune.sweep.status import sweep_status

        info = sweep_status(self.store, name)
        state = sweep_state(row.status, rec, row.updated_at)
        trials = self.store.get_trials(row.id or 0)
        failures = self._recent_failures(row, trials)
        notes = row.notes or {}
        return SweepStatusOut(
            name=name,
            state=state,
            status=row.status,
            engine=info["engine"],
            engine_version=info["engine_version"],
            model=info["model"],
            gpu=info["gpu"],
            simulated=bool(info["simulated"]),
            created_at=info["created_at"],
            updated_at=info["updated_at"],
            progress=progress(row, rec, info, trials, state),
            counts=info["counts"],
            best=TrialBrief(**info["best"]) if info["best"] else None,
            baseline=TrialBrief(**info["baseline"]) if info["baseline"] else None,
            running=info["running"],
            recent=info["recent"],
            failures_by_class=info["failures_by_class"],
            failures=failures,
            stop_reason=info.get("stop_reason"),
            error=notes.get("error"),
            finalists=list(info.get("finalists") or []),
            objective=info.get("objective"),
            job=job_info(rec, self._tail_if_failed(rec)) if rec is not None else None,
        )

    def _recent_failures(self, row: SweepRow, trials: list[TrialRow]) -> list[FailureInfo]:
        """The last ten failures, by trial number."""
        numbers = {t.id: t.number for t in trials}
        return [
            FailureInfo(
                trial=numbers.get(f.trial_id), failure_class=f.failure_class, reason=f.reason
            )
            for f in self.store.get_failures(row.id or 0)[-10:]
        ]

    def not_found(self, name: str) -> NotFound:
        """NotFound with the sweep names that do exist (the store's message)."""
        from autotune.errors import StorageError

        try:
            self.store.get_sweep(name)
        except StorageError as exc:
            return NotFound(str(exc))
        return NotFound(f"no sweep {name!r}")

    def trials(self, name: str) -> dict[int, TrialBrief]:
        """Every trial of the sweep by number (for progress events)."""
        row = self.store.find_sweep(name)
        if row is None:
            return {}
        return {
            t.number: TrialBrief(
                number=t.number,
                status=t.status,
                value=t.value,
                values=t.values,
                config={k: v for k, v in (t.config or {}).items() if v is not None},
            )
            for t in self.store.get_trials(row.id or 0)
            if t.number is not None
        }

    def _tail_if_failed(self, rec: JobRecord | None) -> str | None:
        if rec is None or rec.state == "running" or rec.exit_code in (0, None):
            return None
        return self.jobs.log_tail(rec.name)


def progress(
    row: SweepRow,
    rec: JobRecord | None,
    info: dict[str, Any],
    trials: list[TrialRow],
    state: SweepState,
) -> Progress:
    """Launched of max_trials (the job's override, else the stored spec's), elapsed time, and
    an ETA while the sweep runs (mean trial duration over the running slots)."""
    max_trials = as_int((rec.overrides if rec else {}).get("max_trials")) or spec_max_trials(
        row.spec_yaml
    )
    launched = int(info["launched"])
    durations = [t.duration_s for t in trials if t.duration_s]
    running = len(info["running"])
    eta = None
    if max_trials is not None and durations and state in ("running", "starting"):
        per_slot = statistics.mean(durations) / max(1, running)
        eta = round(max(0, max_trials - launched) * per_slot, 1)
    return Progress(
        launched=launched,
        max_trials=max_trials,
        fraction=round(min(1.0, launched / max_trials), 4) if max_trials else None,
        running=running,
        elapsed_s=elapsed(rec),
        eta_s=eta,
    )
