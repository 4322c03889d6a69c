"""One tool call: the service's errors become tool errors whose text an agent can act on."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError

from autotune.errors import AutotuneError

T = TypeVar("T")


def run_tool(fn: Callable[[], T]) -> T:
    """fn(); an AutotuneError or a request model's ValidationError raised as a ToolError."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return fn()
    except AutotuneError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc
    except ValidationError as exc:  # a request model built from the tool's arguments
        errs = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ToolError(f"invalid arguments: {errs}") from exc
