"""`autotune serve`: the HTTP jobs API (FastAPI; OpenAPI schema at /openapi.json).

Every endpoint calls the service layer (core.Service), as the MCP tools do. Requests pass two
guards first: the bearer token (401) and the body limit (413); bodies are validated by the
pydantic models in schemas.py (422 naming the field). Errors are JSON:
`{"detail": "...", "error": "ConfigError", "field": "target.model"}`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
from fastapi import Body, Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPBearer
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from autotune import __version__
from autotune.errors import AutotuneError
from autotune.planner.sglang import Plan
from autotune.service.auth import BearerAuth, BodyLimit
from autotune.service.core import Service
from autotune.service.errors import (
    Invalid,
    NotFound,
    UnsupportedMedia,
    error_field,
    http_status,
)
from autotune.service.schemas import (
    NAME_PATTERN,
    QUEUE_DOC,
    TERMINAL_STATES,
    ErrorOut,
    Health,
    InspectOut,
    InspectRequest,
    KernelsRequest,
    KernelsStatus,
    PlanRequest,
    ResumeRequest,
    StopRequest,
    SubmitResult,
    SweepList,
    SweepOverrides,
    SweepStatusOut,
    SweepSubmit,
    TrialBrief,
)

log = logging.getLogger(__name__)

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": text}
    for code, text in (
        (401, "missing or invalid bearer token"),
        (403, "the service's configuration does not allow a path, engine or flag"),
        (404, "no such sweep or job"),
        (409, "conflicts with the current state (name taken, already running, not running)"),
        (413, "request body over the limit"),
        (422, "invalid request: the message names the field"),
    )
}

SweepName = Annotated[
    str, Path(min_length=1, max_length=200, pattern=NAME_PATTERN, description="sweep name")
]
JobName = Annotated[
    str, Path(min_length=1, max_length=100, pattern=NAME_PATTERN, description="job name")
]
# Declares the scheme in the OpenAPI document; BearerAuth (middleware) enforces it everywhere.
_bearer = HTTPBearer(auto_error=False, description="the token in STATE/token")


def create_app(service: Service, *, token: str, recover: bool = True) -> FastAPI:
    """The ASGI app over `service`; `recover`: resume interrupted sweeps at start-up."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        resumed = await run_in_threadpool(service.startup, recover=recover)
        if resumed:
            log.info("resumed after restart: %s", ", ".join(resumed))
        try:
            yield
        finally:
            await run_in_threadpool(service.jobs.stop_monitor)

    app = FastAPI(
        title="autotune",
        version=__version__,
        description=(
            "Jobs API of autotune: submit engine sweeps, follow them, stop and resume them, "
            "fetch reports; run the planner and the checkpoint inspector. Every request needs "
            "`Authorization: Bearer <token>` (the token is in the service's state folder). "
            + QUEUE_DOC
        ),
        lifespan=lifespan,
        responses=ERRORS,
    )
    _install_error_handlers(app)
    _routes(app, service)
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    app.add_middleware(BodyLimit, limit=service.config.max_body_bytes)
    app.add_middleware(BearerAuth, token=token)  # outermost: nothing runs before the token
    return app


# -- errors ----------------------------------------------------------------------------------


def _error(
    status: int, detail: str, error: str, field: str | None = None, **extra: Any
) -> JSONResponse:
    body = ErrorOut(detail=detail, error=error, field=field, **extra)
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status)


def _validation_summary(
    errors: list[dict[str, Any]],
) -> tuple[str, str | None, list[dict[str, Any]]]:
    clean = [
        {
            "loc": [str(p) for p in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": e.get("type"),
        }
        for e in errors
    ]
    loc = [str(p) for p in errors[0].get("loc", ())] if errors else []
    msg = str(clean[0]["msg"]) if clean else "invalid request"
    field = ".".join(p for p in loc if p != "body") or None
    if errors and errors[0].get("type") == "json_invalid":
        # loc holds the character position, not a field
        msg = f"the body is not valid JSON (at character {loc[-1] if loc else '?'})"
        field = "body"
    text = f"{field}: {msg}" if field and field != "body" else msg
    more = len(clean) - 1
    if more:
        text += f" (and {more} more error{'s' if more > 1 else ''})"
    return f"invalid request: {text}", field, clean


def _install_error_handlers(app: FastAPI) -> None:
    async def autotune_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AutotuneError)
        status = http_status(exc)
        if status >= 500:
            log.error("%s: %s", type(exc).__name__, exc)
        return _error(status, str(exc), type(exc).__name__, error_field(exc))

    async def validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError | ValidationError)
        detail, field, errors = _validation_summary([dict(e) for e in exc.errors()])
        return _error(422, detail, "ValidationError", field, errors=errors)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 405:  # Starlette lists the first matching route's methods only
            response = _error(405, str(exc.detail), "HTTPError")
            response.headers["Allow"] = ", ".join(_allowed_methods(request))
            return response
        if exc.status_code == 400:  # FastAPI's "error parsing the body": a malformed body
            return _error(422, f"malformed request body: {exc.detail}", "ValidationError", "body")
        response = _error(exc.status_code, str(exc.detail), "HTTPError")
        response.headers.update(exc.headers or {})
        return response

    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error(
            500, f"internal error ({type(exc).__name__}); see the service log", "InternalError"
        )

    app.add_exception_handler(AutotuneError, autotune_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(ValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


# -- routes ----------------------------------------------------------------------------------


def _routes(app: FastAPI, service: Service) -> None:
    auth = [Depends(_bearer)]

    @app.get("/healthz", response_model=Health, tags=["service"])
    def healthz() -> Health:
        """Liveness; the only endpoint without a token."""
        return Health(ok=True, version=__version__)

    @app.post(
        "/v1/sweeps",
        response_model=SubmitResult,
        status_code=202,
        tags=["sweeps"],
        dependencies=auth,
        openapi_extra={"requestBody": _submit_body()},
        responses={415: {"model": ErrorOut, "description": "neither YAML nor JSON"}},
    )
    async def submit_sweep(
        request: Request,
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
        return await run_in_threadpool(
            lambda: service.submit_sweep(text=text, data=data, overrides=overrides)
        )

    @app.get("/v1/sweeps", response_model=SweepList, tags=["sweeps"], dependencies=auth)
    def list_sweeps() -> SweepList:
        """Every sweep in the database, and the jobs of this service."""
        return service.list_sweeps()

    @app.get(
        "/v1/sweeps/{name}", response_model=SweepStatusOut, tags=["sweeps"], dependencies=auth
    )
    def sweep_status(name: SweepName) -> SweepStatusOut:
        """State, progress, best so far, failures by class, and what can be done next."""
        return service.sweep_status(name)

    @app.get(
        "/v1/sweeps/{name}/events",
        tags=["sweeps"],
        dependencies=auth,
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/event-stream": {}}, "description": "SSE stream"}},
    )
    async def sweep_events(
        name: SweepName,
        interval_s: Annotated[float, Query(ge=0.1, le=60)] = 1.0,
    ) -> Any:
        """Server-sent events until the sweep ends: `status` (the whole status, on every
        change), `trial` (a trial's status or value changed), `best` (a new best), `end`."""
        first = await run_in_threadpool(service.sweep_status, name)  # 404 before streaming
        return EventSourceResponse(_events(service, name, first, interval_s), ping=15)

    @app.post(
        "/v1/sweeps/{name}/stop",
        response_model=SweepStatusOut,
        tags=["sweeps"],
        dependencies=auth,
    )
    def stop_sweep(
        name: SweepName, req: Annotated[StopRequest | None, Body()] = None
    ) -> SweepStatusOut:
        """Stop gracefully (SIGTERM: running trials are stopped and marked interrupted; the
        sweep is resumable), or at once with force. A queued sweep leaves the queue."""
        return service.stop_sweep(name, req)

    @app.post(
        "/v1/sweeps/{name}/resume",
        response_model=SubmitResult,
        status_code=202,
        tags=["sweeps"],
        dependencies=auth,
    )
    def resume_sweep(
        name: SweepName, req: Annotated[ResumeRequest | None, Body()] = None
    ) -> SubmitResult:
        """Continue a stopped, interrupted or finished sweep (raise max_trials to search
        further)."""
        return service.resume_sweep(name, req)

    def _file(name: str, which: str, plots: bool) -> Any:
        rep = service.report(name, plots=plots)
        if which == "report.md":
            return PlainTextResponse(rep.report_md, media_type="text/markdown; charset=utf-8")
        if which == "launch.sh":
            if rep.launch_sh is None:
                why = next((n for n in rep.notes if "launch.sh" in n), "no winner yet")
                raise NotFound(f"no launch.sh for sweep {name!r}: {why}")
            return PlainTextResponse(rep.launch_sh, media_type="text/x-shellscript; charset=utf-8")
        return JSONResponse(rep.winner)

    @app.get(
        "/v1/sweeps/{name}/report",
        tags=["reports"],
        dependencies=auth,
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/markdown": {}}}},
    )
    def report_md(name: SweepName, plots: bool = False) -> Any:
        """report.md, written from the database now (also while the sweep runs)."""
        return _file(name, "report.md", plots)

    @app.get(
        "/v1/sweeps/{name}/launch.sh",
        tags=["reports"],
        dependencies=auth,
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/x-shellscript": {}}}},
    )
    def launch_sh(name: SweepName) -> Any:
        """The winner's launch script (404 while no trial has completed)."""
        return _file(name, "launch.sh", False)

    @app.get("/v1/sweeps/{name}/winner.json", tags=["reports"], dependencies=auth)
    def winner_json(name: SweepName) -> Any:
        """The winner, baseline, comparison and provenance as JSON (schema autotune.winner/1)."""
        return _file(name, "winner.json", False)

    @app.post("/v1/plan", response_model=Plan, tags=["tools"], dependencies=auth)
    def plan(req: PlanRequest) -> Plan:
        """The VRAM planner (as `autotune plan --json`): fits, KV pool, mamba slots, reasons."""
        return service.plan(req)

    @app.post("/v1/inspect", response_model=InspectOut, tags=["tools"], dependencies=auth)
    def inspect(req: InspectRequest) -> InspectOut:
        """The checkpoint inspector on a server-local folder under the allowed paths."""
        return service.inspect(req)

    @app.post(
        "/v1/kernels",
        response_model=KernelsStatus,
        status_code=202,
        tags=["kernels"],
        dependencies=auth,
        responses={501: {"model": ErrorOut, "description": "kernel tuning not installed"}},
    )
    def submit_kernels(req: KernelsRequest) -> KernelsStatus:
        """Tune Triton GEMM configs as a job (`autotune kernels tune`; needs a GPU)."""
        return service.submit_kernels(req)

    @app.get(
        "/v1/kernels/{name}", response_model=KernelsStatus, tags=["kernels"], dependencies=auth
    )
    def kernels_status(name: JobName) -> KernelsStatus:
        return service.kernels_status(name)

    @app.post(
        "/v1/kernels/{name}/stop",
        response_model=KernelsStatus,
        tags=["kernels"],
        dependencies=auth,
    )
    def stop_kernels(
        name: JobName, req: Annotated[StopRequest | None, Body()] = None
    ) -> KernelsStatus:
        return service.stop_kernels(name, req)


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


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


def _submit_body() -> dict[str, Any]:
    return {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/SweepSubmit"}},
            "application/yaml": {
                "schema": {"type": "string", "description": "the sweep spec (YAML)"}
            },
        },
    }


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """FastAPI's schema plus the models only referenced from openapi_extra."""

    def build() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        extra = SweepSubmit.model_json_schema(ref_template="#/components/schemas/{model}")
        for key, value in extra.pop("$defs", {}).items():
            comps.setdefault(key, value)
        comps["SweepSubmit"] = extra
        # FastAPI documents extra responses in the route's media type; errors are JSON always.
        error_json = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
        for ops in schema.get("paths", {}).values():
            for op in ops.values():
                for code, resp in op.get("responses", {}).items():
                    if code[:1] in ("4", "5") and "application/json" not in resp.get(
                        "content", {}
                    ):
                        resp["content"] = dict(error_json)
        app.openapi_schema = schema
        return schema

    return build
