"""`autotune serve`: the HTTP jobs API (FastAPI; OpenAPI schema at /openapi.json).

The routes live in routes/, one APIRouter per resource; this module assembles the app (routers,
error handlers, the OpenAPI document, the guards). Every endpoint calls the service layer
(core.Service), as the MCP tools do. Requests pass two
guards first: the bearer token (401) and the body limit (413); bodies are validated by the
pydantic models in schemas.py (422 naming the field). Errors are JSON:
`{"detail": "...", "error": "ConfigError", "field": "target.model"}`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from http import HTTPMethod
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from autotune import __version__
from autotune.errors import AutotuneError
from autotune.service.auth import BearerAuth, BodyLimit
from autotune.service.core import Service
from autotune.service.errors import error_field, http_status
from autotune.service.routes import health, kernels, reports, sweeps, tools
from autotune.service.schemas import QUEUE_DOC, ErrorOut, SweepSubmit

log = logging.getLogger(__name__)

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
# One router per resource, in the order of the OpenAPI document's paths.
ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    sweeps.router,
    reports.router,
    tools.router,
    kernels.router,
)


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
    app.state.service = service  # what the routes' ServiceDep reads
    _install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
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


def _allowed_methods(request: Request) -> list[str]:
    """The methods some route takes at the request's path: each method is matched against the
    app's routes (an included router answers for the routes it holds)."""
    methods: set[str] = set()
    for method in HTTPMethod:
        scope = {**request.scope, "method": method.value}
        if any(route.matches(scope)[0] == Match.FULL for route in request.app.router.routes):
            methods.add(method.value)
    return sorted(methods)


# -- the OpenAPI document --------------------------------------------------------------------


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
