"""POST /v1/plan and /v1/inspect (tag tools): the VRAM planner and the checkpoint inspector,
answered at once."""

from __future__ import annotations

from fastapi import APIRouter

from autotune.planner.sglang import Plan
from autotune.service.routes.deps import AUTH, ServiceDep
from autotune.service.schemas import InspectOut, InspectRequest, PlanRequest

router = APIRouter(tags=["tools"], dependencies=AUTH)


@router.post("/v1/plan", response_model=Plan)
def plan(req: PlanRequest, service: ServiceDep) -> Plan:
    """The VRAM planner (as `autotune plan --json`): fits, KV pool, mamba slots, reasons."""
    return service.plan(req)


@router.post("/v1/inspect", response_model=InspectOut)
def inspect(req: InspectRequest, service: ServiceDep) -> InspectOut:
    """The checkpoint inspector on a server-local folder under the allowed paths."""
    return service.inspect(req)
