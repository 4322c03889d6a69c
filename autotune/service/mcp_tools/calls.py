"""One tool call: the service's errors become tool errors whose text an agent can act on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import Field, ValidationError

from autotune.errors import AutotuneError
from autotune.sweep.spec_models import NAME_MAX, NAME_PATTERN

T = TypeVar("T")


def name_arg(description: str) -> Any:
    """A sweep or job name argument, published with the bounds the service enforces."""
    return Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN, description=description)


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
