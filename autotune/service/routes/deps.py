"""What the route modules share: the path parameters, the bearer scheme as the OpenAPI document
declares it, and the service the app serves (a dependency reading app.state.service)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPBearer

from autotune.service.core import Service
from autotune.sweep.spec_models import NAME_MAX, NAME_PATTERN

SweepName = Annotated[
    str, Path(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN, description="sweep name")
]
JobName = Annotated[
    str, Path(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN, description="job name")
]
# Declares the scheme in the OpenAPI document; BearerAuth (middleware) enforces it everywhere.
bearer = HTTPBearer(auto_error=False, description="the token in STATE/token")
AUTH = [Depends(bearer)]


async def current_service(request: Request) -> Service:
    """The Service that create_app put in app.state."""
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(current_service)]
