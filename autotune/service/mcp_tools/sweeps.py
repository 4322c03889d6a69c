"""The sweep tools: start one and follow it (start_sweep, sweep_status, list_sweeps), control
it (stop_sweep, resume_sweep), and its report (get_report)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from autotune.service.core import Service
from autotune.service.mcp_tools.calls import name_arg, run_tool
from autotune.service.schemas import (
    ReportOut,
    ResumeRequest,
    StopRequest,
    SubmitResult,
    SweepList,
    SweepOverrides,
    SweepStatusOut,
)

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


# The budget arguments as the HTTP API's request model declares them (bounds, patterns,
# descriptions), so the tools' schemas say what the service enforces.
_OV = SweepOverrides.model_fields


def add_sweep_tools(mcp: MCPServer, service: Service) -> None:
    @mcp.tool()
    def start_sweep(
        spec_yaml: Annotated[str, Field(description="the sweep spec as YAML text")],
        max_trials: Annotated[int | None, _OV["max_trials"]] = None,
        wall_clock_s: Annotated[float | None, _OV["wall_clock_s"]] = None,
        until: Annotated[str | None, _OV["until"]] = None,
        workers: Annotated[int | None, _OV["workers"]] = None,
        executor: Annotated[Literal["inprocess", "ray"] | None, _OV["executor"]] = None,
    ) -> SubmitResult:
        """Validate a sweep spec and start it as a background job (queued while another job
        holds its GPUs); returns at once with its name (the id for the other tools). Budget
        arguments override the spec's."""

        def run() -> SubmitResult:
            ov = SweepOverrides(
                max_trials=max_trials,
                wall_clock_s=wall_clock_s,
                until=until,
                workers=workers,
                executor=executor,
            )
            return service.submit_sweep(text=spec_yaml, overrides=ov)

        return run_tool(run)

    @mcp.tool()
    def sweep_status(name: Annotated[str, name_arg("the sweep name")]) -> SweepStatusOut:
        """A sweep's state (queued/starting/running/stopping/finished/stopped/failed/
        interrupted/failed_to_start/cancelled), progress, best so far, failures by class, and
        next_steps; while queued, job.queue_position."""
        return run_tool(lambda: service.sweep_status(name))

    @mcp.tool()
    def list_sweeps() -> SweepList:
        """Every sweep in the database with its state and best value."""
        return run_tool(service.list_sweeps)


def add_sweep_control_tools(mcp: MCPServer, service: Service) -> None:
    @mcp.tool()
    def stop_sweep(
        name: Annotated[str, name_arg("the sweep name")],
        force: Annotated[bool, Field(description="SIGKILL instead of a graceful stop")] = False,
        wait_s: Annotated[float, Field(ge=0, le=300, description="wait for the exit")] = 30.0,
    ) -> SweepStatusOut:
        """Stop a running sweep gracefully: running trials are stopped and marked
        interrupted; the sweep can be resumed. A queued sweep leaves the queue (cancelled)."""
        return run_tool(lambda: service.stop_sweep(name, StopRequest(force=force, wait_s=wait_s)))

    @mcp.tool()
    def resume_sweep(
        name: Annotated[str, name_arg("the sweep name")],
        max_trials: Annotated[int | None, _OV["max_trials"]] = None,
        wall_clock_s: Annotated[float | None, _OV["wall_clock_s"]] = None,
        until: Annotated[str | None, _OV["until"]] = None,
        workers: Annotated[int | None, _OV["workers"]] = None,
        executor: Annotated[Literal["inprocess", "ray"] | None, _OV["executor"]] = None,
    ) -> SubmitResult:
        """Continue a stopped, interrupted or finished sweep as a background job."""

        def run() -> SubmitResult:
            req = ResumeRequest(
                max_trials=max_trials,
                wall_clock_s=wall_clock_s,
                until=until,
                workers=workers,
                executor=executor,
            )
            return service.resume_sweep(name, req)

        return run_tool(run)


def add_report_tools(mcp: MCPServer, service: Service) -> None:
    @mcp.tool()
    def get_report(
        name: Annotated[str, name_arg("the sweep name")], plots: bool = False
    ) -> ReportOut:
        """The sweep's report now: report.md text, launch.sh text (None until a trial
        completed), winner.json content, notes on anything missing."""
        return run_tool(lambda: service.report(name, plots=plots))
