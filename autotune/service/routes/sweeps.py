"""/v1/sweeps (tag sweeps): submit a sweep (YAML or JSON body), list them, one's status and its
server-sent events, stop and resume."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import PlainTextResponse
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from autotune.service.core import Service
from autotune.service.errors import Invalid, UnsupportedMedia
from autotune.service.routes.deps import AUTH, ServiceDep, SweepName
from autotune.service.schemas import (
    TERMINAL_STATES,
    ErrorOut,
    ResumeRequest,
    StopRequest,
    SubmitResult,
    SweepList,
    SweepOverrides,
    SweepStatusOut,
    SweepSubmit,
    TrialBrief,
)

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")

router = APIRouter(tags=["sweeps"], dependencies=AUTH)


def submit_body() -> dict[str, Any]:
    """POST /v1/sweeps's request body as documented: JSON (SweepSubmit) or the YAML itself."""
    return {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/SweepSubmit"}},
            "application/yaml": {
                "schema": {"type": "string", "description": "the sweep spec (YAML)"}
            },
        },
    }


@router.post(
    "/v1/sweeps",
    response_model=SubmitResult,
    status_code=202,
    openapi_extra={"requestBody": submit_body()},
    responses={415: {"model": ErrorOut, "description": "neither YAML nor JSON"}},
)
async def submit_sweep(
    request: Request,
    service: ServiceDep,
    max_trials: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    wall_clock_s: Annotated[float | None, Query(gt=0, le=30 * 86400)] = None,
    until: Annotated[str | None, Query(pattern=r"^([01]?\d|2[0-3]):([0-5]\d)$")] = None,
    workers: Annotated[int | None, Query(ge=1, le=1024)] = None,
    executor: Annotated[str | None, Query(pattern="^(inprocess|ray)$")] = None,
) -> SubmitResult:
    """Submit a sweep: the spec as YAML (Content-Type application/yaml) or as JSON
    (`{"spec": {...}}` or `{"spec_yaml": "..."}`, plus budget overrides). Query
    parameters override the budget too (the JSON body's values win). Returns at once:
    the sweep runs as a job, or waits as `queued` (job.queue_position) while jobs on the
    same GPUs run; follow it at links.events."""
    raw = await request.body()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    query = {
        k: v
        for k, v in dict(
            max_trials=max_trials,
            wall_clock_s=wall_clock_s,
            until=until,
            workers=workers,
            executor=executor,
        ).items()
        if v is not None
    }
    text, data, overrides = read_submission(raw, ctype, query)
    return await run_in_threadpool(
        lambda: service.submit_sweep(text=text, data=data, overrides=overrides)
    )


def read_submission(
    raw: bytes, ctype: str, query: dict[str, Any]
) -> tuple[str | None, dict[str, Any] | None, SweepOverrides]:
    """The body by its media type -> (YAML text, or the spec as a mapping; the overrides:
    the query's, a JSON body's own winning)."""
    text: str | None = None
    data: dict[str, Any] | None = None
    if ctype in YAML_TYPES or ctype == "text/plain":
        text = _decode(raw)
        overrides = SweepOverrides.model_validate(query)
    elif ctype == "application/json" or ctype.endswith("+json"):
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise Invalid(f"the body is not valid JSON: {exc}", field="body") from None
        if not isinstance(doc, dict):
            raise Invalid('expected a JSON object: {"spec": {...}} or {"spec_yaml": "..."}')
        submit = SweepSubmit.model_validate({**query, **doc})
        overrides = SweepOverrides.model_validate(submit.given())
        text, data = submit.spec_yaml, submit.spec
    else:
        raise UnsupportedMedia(
            f"Content-Type {ctype or '(none)'} is not accepted; send the spec as "
            f"{' or '.join(YAML_TYPES[:1] + ('application/json',))}"
        )
    return text, data, overrides


@router.get("/v1/sweeps", response_model=SweepList)
def list_sweeps(service: ServiceDep) -> SweepList:
    """Every sweep in the database, and the jobs of this service."""
    return service.list_sweeps()


@router.get("/v1/sweeps/{name}", response_model=SweepStatusOut)
def sweep_status(name: SweepName, service: ServiceDep) -> SweepStatusOut:
    """State, progress, best so far, failures by class, and what can be done next."""
    return service.sweep_status(name)


@router.get(
    "/v1/sweeps/{name}/events",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "SSE stream"}},
)
async def sweep_events(
    name: SweepName,
    service: ServiceDep,
    interval_s: Annotated[float, Query(ge=0.1, le=60)] = 1.0,
) -> Any:
    """Server-sent events until the sweep ends: `status` (the whole status, on every
    change), `trial` (a trial's status or value changed), `best` (a new best), `end`."""
    first = await run_in_threadpool(service.sweep_status, name)  # 404 before streaming
    return EventSourceResponse(_events(service, name, first, interval_s), ping=15)


@router.post("/v1/sweeps/{name}/stop", response_model=SweepStatusOut)
def stop_sweep(
    name: SweepName, service: ServiceDep, req: Annotated[StopRequest | None, Body()] = None
) -> SweepStatusOut:
    """Stop gracefully (SIGTERM: running trials are stopped and marked interrupted; the
    sweep is resumable), or at once with force. A queued sweep leaves the queue."""
    return service.stop_sweep(name, req)


@router.post("/v1/sweeps/{name}/resume", response_model=SubmitResult, status_code=202)
def resume_sweep(
    name: SweepName, service: ServiceDep, req: Annotated[ResumeRequest | None, Body()] = None
) -> SubmitResult:
    """Continue a stopped, interrupted or finished sweep (raise max_trials to search
    further)."""
    return service.resume_sweep(name, req)


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"the body is not UTF-8 text: {exc}", field="body") from None


async def _events(
    service: Service, name: str, first: SweepStatusOut, interval_s: float
) -> AsyncIterator[dict[str, str]]:
    """Poll the database; emit what changed. Ends when the sweep reaches a final state."""
    seq = 0
    status: SweepStatusOut | None = None
    trials: dict[int, TrialBrief] = {}
    current = first
    while True:
        new_trials = await run_in_threadpool(service.trials, name)
        events: list[tuple[str, str]] = []
        for number, t in sorted(new_trials.items()):
            old = trials.get(number)
            if old is None or (old.status, old.value) != (t.status, t.value):
                events.append(("trial", t.model_dump_json()))
        best = current.best
        if best is not None and (status is None or status.best != best):
            events.append(("best", best.model_dump_json()))
        if status is None or _changed(status, current):
            events.append(("status", current.model_dump_json()))
        for event, data in events:
            seq += 1
            yield {"event": event, "data": data, "id": str(seq)}
        status, trials = current, new_trials
        if current.state in TERMINAL_STATES:
            seq += 1
            yield {"event": "end", "data": current.model_dump_json(), "id": str(seq)}
            return
        await anyio.sleep(interval_s)
        current = await run_in_threadpool(service.sweep_status, name)


def _changed(a: SweepStatusOut, b: SweepStatusOut) -> bool:
    keys = ("state", "status", "counts", "best", "stop_reason", "failures_by_class", "running")
    return any(getattr(a, k) != getattr(b, k) for k in keys) or (
        a.progress.launched != b.progress.launched
    )
