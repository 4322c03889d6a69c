"""/v1/kernels (tag kernels): Triton GEMM tuning as jobs: submit, status, stop; install an
engine job's files where that engine reads them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from autotune.service.routes.deps import AUTH, JobName, ServiceDep
from autotune.service.schemas import (
    ErrorOut,
    KernelsInstallOut,
    KernelsInstallRequest,
    KernelsRequest,
    KernelsStatus,
    StopRequest,
)

router = APIRouter(tags=["kernels"], dependencies=AUTH)


@router.post(
    "/v1/kernels",
    response_model=KernelsStatus,
    status_code=202,
    responses={
        501: {"model": ErrorOut, "description": "kernel tuning not installed"},
        503: {"model": ErrorOut, "description": "no NVIDIA GPU on the service's host"},
    },
)
def submit_kernels(req: KernelsRequest, service: ServiceDep) -> KernelsStatus:
    """Tune Triton GEMM configs as a job (`autotune kernels tune`; needs a GPU)."""
    return service.submit_kernels(req)


@router.get("/v1/kernels/{name}", response_model=KernelsStatus)
def kernels_status(name: JobName, service: ServiceDep) -> KernelsStatus:
    return service.kernels_status(name)


@router.post("/v1/kernels/{name}/stop", response_model=KernelsStatus)
def stop_kernels(
    name: JobName, service: ServiceDep, req: Annotated[StopRequest | None, Body()] = None
) -> KernelsStatus:
    return service.stop_kernels(name, req)


@router.post("/v1/kernels/{name}/install", response_model=KernelsInstallOut)
def install_kernels(
    name: JobName,
    service: ServiceDep,
    req: Annotated[KernelsInstallRequest | None, Body()] = None,
) -> KernelsInstallOut:
    """Install an ended engine job's files where that release's lookup reads them, and prove
    it finds each one (`autotune kernels install`); a dry run by default."""
    return service.install_kernels(name, req)
