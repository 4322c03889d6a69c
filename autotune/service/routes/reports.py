"""A sweep's report files (tag reports): report.md, launch.sh, winner.json, written from the
database on each request."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from autotune.service.core import Service
from autotune.service.errors import NotFound
from autotune.service.routes.deps import AUTH, ServiceDep, SweepName

router = APIRouter(tags=["reports"], dependencies=AUTH)


def report_file(service: Service, name: str, which: str, plots: bool) -> Any:
    """One of the report's files as a response (404 for launch.sh while there is no winner)."""
    rep = service.report(name, plots=plots)
    if which == "report.md":
        return PlainTextResponse(rep.report_md, media_type="text/markdown; charset=utf-8")
    if which == "launch.sh":
        if rep.launch_sh is None:
            why = next((n for n in rep.notes if "launch.sh" in n), "no winner yet")
            raise NotFound(f"no launch.sh for sweep {name!r}: {why}")
        return PlainTextResponse(rep.launch_sh, media_type="text/x-shellscript; charset=utf-8")
    return JSONResponse(rep.winner)


@router.get(
    "/v1/sweeps/{name}/report",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/markdown": {}}}},
)
def report_md(name: SweepName, service: ServiceDep, plots: bool = False) -> Any:
    """report.md, written from the database now (also while the sweep runs)."""
    return report_file(service, name, "report.md", plots)


@router.get(
    "/v1/sweeps/{name}/launch.sh",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/x-shellscript": {}}}},
)
def launch_sh(name: SweepName, service: ServiceDep) -> Any:
    """The winner's launch script (404 while no trial has completed)."""
    return report_file(service, name, "launch.sh", False)


@router.get("/v1/sweeps/{name}/winner.json")
def winner_json(name: SweepName, service: ServiceDep) -> Any:
    """The winner, baseline, comparison and provenance as JSON (schema autotune.winner/1)."""
    return report_file(service, name, "winner.json", False)
