"""Optional dependency groups (`pip install 'autotune[NAME]'`): a command that needs one says
so, instead of ending in a ModuleNotFoundError traceback."""

from __future__ import annotations

import importlib.util

from autotune.errors import ConfigError

SERVICE_HTTP = ("fastapi", "uvicorn", "sse_starlette")
SERVICE_MCP = ("mcp",)
SERVICE_CLIENT = ("httpx_sse",)


def missing(modules: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that are not importable."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require(extra: str, what: str, modules: tuple[str, ...]) -> None:
    """Raise ConfigError naming the extra to install when a module of `modules` is missing.

    Raises:
        ConfigError: `what needs the optional `extra` dependencies ...: pip install ...`.
    """
    absent = missing(modules)
    if absent:
        raise ConfigError(
            f"{what} needs the optional `{extra}` dependencies ({', '.join(absent)} not "
            f"installed): pip install 'autotune[{extra}]'"
        )
