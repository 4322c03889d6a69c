"""GET /healthz (tag service): liveness, the only endpoint without a token."""

from __future__ import annotations

from fastapi import APIRouter

from autotune import __version__
from autotune.service.schemas import Health

router = APIRouter(tags=["service"])


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """Liveness; the only endpoint without a token."""
    return Health(ok=True, version=__version__)
