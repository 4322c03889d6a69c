"""Pure views for the service layer: one state word per sweep, job records as API models,
links and next steps an agent can act on."""

from __future__ import annotations

from datetime import UTC, datetime

import yaml

from autotune.service.jobs import JobRecord
from autotune.service.schemas import JobInfo, Links, SweepState, SweepStatusOut


def sweep_state(
    db_status: str | None, rec: JobRecord | None, updated_at: datetime | None
) -> SweepState:
    """One word for what is going on, from the database status and the job."""
    if rec is not None and rec.state == "queued":
        return "queued"
    alive = rec is not None and rec.state == "running"
    if db_status is None:
        if rec is not None and rec.state == "cancelled":
            return "cancelled"
        if rec is not None and rec.stop_requested:
            # stopped before it wrote its row: what the request did, not a failure
            return "stopping" if alive else "cancelled"
        return "starting" if alive else "failed_to_start"
    if alive:
        assert rec is not None
        if rec.stop_requested:
            return "stopping"
        if db_status == "running":
            return "running"
        # A resumed job has not yet written its row: the status is the last run's.
        if updated_at is None or rec.started_at is None or updated_at < rec.started_at:
            return "starting"
        return db_status  # type: ignore[return-value]
    if db_status == "running":
        return "interrupted" if rec is not None else "running"
    if db_status in ("finished", "stopped", "failed"):
        return db_status  # type: ignore[return-value]
    return "failed"


def job_info(rec: JobRecord, log_tail: str | None = None) -> JobInfo:
    return JobInfo(
        kind=rec.kind,
        state=rec.state,
        pid=rec.pid,
        started_at=rec.started_at,
        ended_at=rec.ended_at,
        exit_code=rec.exit_code,
        runs=rec.runs,
        started_by=rec.started_by,
        stop_requested=rec.stop_requested,
        overrides=dict(rec.overrides),
        log_path=rec.log_path,
        log_tail=log_tail,
        note=rec.note,
        queue_position=rec.queue_position,
        gpus=rec.gpus,
    )


def links(name: str) -> Links:
    base = f"/v1/sweeps/{name}"
    return Links(
        status=base,
        events=f"{base}/events",
        stop=f"{base}/stop",
        resume=f"{base}/resume",
        report=f"{base}/report",
        launch_sh=f"{base}/launch.sh",
        winner_json=f"{base}/winner.json",
    )


def next_steps(s: SweepStatusOut) -> list[str]:
    n = s.name
    if s.state == "queued":
        pos = s.job.queue_position if s.job is not None else None
        return [
            f"wait: queued (position {pos}) until the jobs ahead of it free its GPUs; it "
            "starts by itself; poll sweep_status",
            f"leave the queue: POST /v1/sweeps/{n}/stop (MCP stop_sweep)",
        ]
    if s.state == "cancelled":
        return ["it never started; submit the spec again to queue it anew"]
    if s.state in ("starting", "running"):
        return [
            f"follow: GET /v1/sweeps/{n}/events (SSE) or poll sweep_status",
            f"stop gracefully: POST /v1/sweeps/{n}/stop (MCP stop_sweep)",
            f"report so far: GET /v1/sweeps/{n}/report (MCP get_report)",
        ]
    if s.state == "stopping":
        return ["wait: the sweep is stopping its engines; poll sweep_status"]
    if s.state in ("stopped", "interrupted"):
        return [
            f"continue: POST /v1/sweeps/{n}/resume (MCP resume_sweep)",
            f"report so far: GET /v1/sweeps/{n}/report (MCP get_report)",
        ]
    if s.state == "finished":
        return [
            f"read the report: GET /v1/sweeps/{n}/report, /launch.sh, /winner.json "
            "(MCP get_report)",
            f"search further: POST /v1/sweeps/{n}/resume with a higher max_trials",
        ]
    if s.state == "failed_to_start":
        return ["read job.log_tail for why; fix the spec and submit again"]
    return [f"read error and job.log_tail; resume after fixing: POST /v1/sweeps/{n}/resume"]


def spec_max_trials(spec_yaml: str) -> int | None:
    from autotune.sweep.spec import BudgetSpec

    try:
        data = yaml.safe_load(spec_yaml) or {}
        budget = data.get("budget") if isinstance(data, dict) else None
        return BudgetSpec.model_validate(budget or {}).max_trials
    except Exception:  # an older stored spec: progress without a total
        return None


def as_int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def elapsed(rec: JobRecord | None) -> float | None:
    if rec is None or rec.started_at is None:
        return None
    end = rec.ended_at or datetime.now(UTC)
    return round((end - rec.started_at).total_seconds(), 1)


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=UTC)
