"""`autotune mcp`: the service's operations as MCP tools over stdio (the `mcp` package).

The tools call the same service layer (core.Service) as the HTTP API, on the same state folder
and database, so a sweep started here shows up in `autotune serve` and the other way round.
Every result is a typed model (structured output); a failure is a tool error whose text says
what was wrong and what would be valid. stdout carries the protocol: jobs log to files.
The tools themselves live in mcp_tools/, one module per group.
"""

from __future__ import annotations

from typing import Any

from autotune import __version__
from autotune.service.core import Service
from autotune.service.mcp_tools.kernels import add_kernel_tools
from autotune.service.mcp_tools.planning import add_planning_tools
from autotune.service.mcp_tools.sweeps import (
    add_report_tools,
    add_sweep_control_tools,
    add_sweep_tools,
)

INSTRUCTIONS = """\
autotune tunes LLM serving engines (SGLang, vLLM, llama.cpp) unattended. Typical loop:
plan (does a configuration fit?) -> start_sweep (a YAML spec; returns at once, the sweep runs
as a job) -> sweep_status (poll; `state` and `next_steps` say what to do) -> stop_sweep /
resume_sweep -> get_report (report.md, launch.sh, winner.json). inspect_checkpoint checks a
model folder before a night is spent on it. Files must lie under the service's allowed paths.
Jobs on the same GPUs queue (state queued, job.queue_position) and start by themselves in
submission order.
"""


def build_server(service: Service) -> Any:
    """An MCPServer with the tools bound to `service` (not started)."""
    from mcp.server.mcpserver import MCPServer

    mcp = MCPServer(name="autotune", instructions=INSTRUCTIONS, version=__version__)
    # The order of tools/list: planning, sweeps, their control, reports, kernels.
    add_planning_tools(mcp, service)
    add_sweep_tools(mcp, service)
    add_sweep_control_tools(mcp, service)
    add_report_tools(mcp, service)
    add_kernel_tools(mcp, service)
    _forbid_unknown_arguments(mcp)
    return mcp


def _forbid_unknown_arguments(mcp: Any) -> None:
    """Every tool refuses an argument it does not have (a `max_trial` typo would otherwise be
    dropped and the sweep run with the spec's budget) and says so in its schema
    (additionalProperties: false). The mcp package builds argument models that ignore extras
    and offers no switch, so each tool's model is replaced by a strict subclass; its
    FuncMetadata reads the model at call time."""
    from pydantic import BaseModel, ConfigDict, model_validator

    from autotune.errors import did_you_mean

    class Strict(BaseModel):
        @model_validator(mode="before")
        @classmethod
        def _known_arguments(cls, data: Any) -> Any:
            if isinstance(data, dict):
                valid = sorted(f.alias or n for n, f in cls.model_fields.items())
                unknown = sorted(set(data) - set(valid))
                if unknown:
                    raise ValueError(
                        f"unknown argument {unknown[0]!r}{did_you_mean(unknown[0], valid)}"
                    )
            return data

    for tool in mcp._tool_manager.list_tools():
        loose = tool.fn_metadata.arg_model
        config = ConfigDict(**{**loose.model_config, "extra": "forbid"})  # type: ignore[typeddict-item]
        strict: type[BaseModel] = type(loose.__name__, (loose, Strict), {"model_config": config})
        tool.fn_metadata.arg_model = strict
        tool.parameters = strict.model_json_schema(by_alias=True)


def run_stdio(service: Service, *, recover: bool = True) -> None:
    """Serve the tools on stdin/stdout until the client closes the session."""
    server = build_server(service)
    service.startup(recover=recover)
    try:
        server.run("stdio")
    finally:
        service.shutdown()
