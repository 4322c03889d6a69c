"""The agent-facing service: `autotune serve` (HTTP jobs API) and `autotune mcp` (MCP tools),
both over one service layer (core.Service), plus the client behind `autotune --server URL`.

    from autotune.service import Service, create_app
    service = Service.open(state_dir, db)
    app = create_app(service, token=ensure_token(service.state.token))

Attributes load on first use (FastAPI, uvicorn and mcp stay unimported for other commands).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.service.app import create_app
    from autotune.service.auth import ensure_token
    from autotune.service.client import RemoteError, ServiceClient
    from autotune.service.core import Service
    from autotune.service.mcp_server import build_server, run_stdio

_WHERE = {
    "Service": "core",
    "create_app": "app",
    "ensure_token": "auth",
    "ServiceClient": "client",
    "RemoteError": "client",
    "build_server": "mcp_server",
    "run_stdio": "mcp_server",
}

__all__ = [
    "RemoteError",
    "Service",
    "ServiceClient",
    "build_server",
    "create_app",
    "ensure_token",
    "run_stdio",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'autotune.service' has no attribute {name!r}")
    return getattr(importlib.import_module(f"autotune.service.{_WHERE[name]}"), name)
