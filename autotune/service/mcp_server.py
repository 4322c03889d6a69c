"""`autotune mcp`: the service's operations as MCP tools over stdio (the `mcp` package).

The tools call the same service layer (core.Service) as the HTTP API, on the same state folder
and database, so a sweep started here shows up in `autotune serve` and the other way round.
Every result is a typed model (structured output); a failure is a tool error whose text says
what was wrong and what would be valid. stdout carries the protocol: jobs log to files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, ValidationError

from autotune import __version__
from autotune.errors import AutotuneError
from autotune.planner.sglang import Plan
from autotune.service.core import Service
from autotune.service.schemas import (
    InspectOut,
    InspectRequest,
    KernelsRequest,
    KernelsStatus,
    PlanRequest,
    ReportOut,
    ResumeRequest,
    StopRequest,
    SubmitResult,
    SweepList,
    SweepOverrides,
    SweepStatusOut,
)

T = TypeVar("T")

INSTRUCTIONS = """\
autotune tunes LLM serving engines (SGLang, vLLM, llama.cpp) unattended. Typical loop:
plan (does a configuration fit?) -> start_sweep (a YAML spec; returns at once, the sweep runs
as a job) -> sweep_status (poll; `state` and `next_steps` say what to do) -> stop_sweep /
resume_sweep -> get_report (report.md, launch.sh, winner.json). inspect_checkpoint checks a
model folder before a night is spent on it. Files must lie under the service's allowed paths.
Jobs on the same GPUs queue (state queued, job.queue_position) and start by themselves in
submission order.
"""


def _call(fn: Callable[[], T]) -> T:
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return fn()
    except AutotuneError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc
    except ValidationError as exc:  # a request model built from the tool's arguments
        errs = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ToolError(f"invalid arguments: {errs}") from exc


def build_server(service: Service) -> Any:
    """An MCPServer with the tools bound to `service` (not started)."""
    from mcp.server.mcpserver import MCPServer

    mcp = MCPServer(name="autotune", instructions=INSTRUCTIONS, version=__version__)

    @mcp.tool()
    def plan(
        model: Annotated[str, Field(description="built-in card name or an allowed model folder")],
        gpu: Annotated[str, Field(description="catalog GPU name, e.g. rtx-4080-super-32g")],
        engine: str = "sglang",
        engine_version: str | None = None,
        tp: Annotated[int, Field(ge=1, le=64)] = 1,
        gpu_free_gib: float | None = None,
        host_free_gib: float | None = None,
        config: Annotated[
            dict[str, str | int | float | bool | None] | None,
            Field(description="engine field -> value, e.g. {mem_fraction_static: 0.92}"),
        ] = None,
        perf: bool = False,
    ) -> Plan:
        """Predict weights, KV pool, mamba slots and max running requests of one launch, and
        whether it fits (`fits`, `reasons`); with perf, decode/prefill speed estimates."""

        def run() -> Plan:
            req = PlanRequest(
                model=model,
                gpu=gpu,
                engine=engine,
                engine_version=engine_version,
                tp=tp,
                gpu_free_gib=gpu_free_gib,
                host_free_gib=host_free_gib,
                config=config or {},
                perf=perf,
            )
            return service.plan(req)

        return _call(run)

    @mcp.tool()
    def inspect_checkpoint(
        path: Annotated[str, Field(description="server-local model folder (allowed paths)")],
        tp: Annotated[int, Field(ge=1, le=64)] = 1,
    ) -> InspectOut:
        """Check a checkpoint against its config.json and the kernels: quantized vs
        unquantized tensors per layer, exclusion lists naming nothing, Marlin width limits,
        MTP presence. exit_code 0 ok, 10 warnings, 11 broken; findings carry fixes."""
        return _call(lambda: service.inspect(InspectRequest(path=path, tp=tp)))

    @mcp.tool()
    def start_sweep(
        spec_yaml: Annotated[str, Field(description="the sweep spec as YAML text")],
        max_trials: Annotated[int | None, Field(ge=1)] = None,
        wall_clock_s: Annotated[float | None, Field(gt=0)] = None,
        until: Annotated[str | None, Field(description="HH:MM local time")] = None,
        workers: Annotated[int | None, Field(ge=1)] = None,
    ) -> SubmitResult:
        """Validate a sweep spec and start it as a background job (queued while another job
        holds its GPUs); returns at once with its name (the id for the other tools). Budget
        arguments override the spec's."""

        def run() -> SubmitResult:
            ov = SweepOverrides(
                max_trials=max_trials, wall_clock_s=wall_clock_s, until=until, workers=workers
            )
            return service.submit_sweep(text=spec_yaml, overrides=ov)

        return _call(run)

    @mcp.tool()
    def sweep_status(name: str) -> SweepStatusOut:
        """A sweep's state (queued/starting/running/stopping/finished/stopped/failed/
        interrupted/failed_to_start/cancelled), progress, best so far, failures by class, and
        next_steps; while queued, job.queue_position."""
        return _call(lambda: service.sweep_status(name))

    @mcp.tool()
    def list_sweeps() -> SweepList:
        """Every sweep in the database with its state and best value."""
        return _call(service.list_sweeps)

    @mcp.tool()
    def stop_sweep(
        name: str,
        force: Annotated[bool, Field(description="SIGKILL instead of a graceful stop")] = False,
        wait_s: Annotated[float, Field(ge=0, le=300, description="wait for the exit")] = 30.0,
    ) -> SweepStatusOut:
        """Stop a running sweep gracefully: running trials are stopped and marked
        interrupted; the sweep can be resumed. A queued sweep leaves the queue (cancelled)."""
        return _call(lambda: service.stop_sweep(name, StopRequest(force=force, wait_s=wait_s)))

    @mcp.tool()
    def resume_sweep(
        name: str,
        max_trials: Annotated[
            int | None, Field(ge=1, description="raise it to search further")
        ] = None,
        wall_clock_s: Annotated[float | None, Field(gt=0)] = None,
        until: str | None = None,
        workers: Annotated[int | None, Field(ge=1)] = None,
    ) -> SubmitResult:
        """Continue a stopped, interrupted or finished sweep as a background job."""

        def run() -> SubmitResult:
            req = ResumeRequest(
                max_trials=max_trials, wall_clock_s=wall_clock_s, until=until, workers=workers
            )
            return service.resume_sweep(name, req)

        return _call(run)

    @mcp.tool()
    def get_report(name: str, plots: bool = False) -> ReportOut:
        """The sweep's report now: report.md text, launch.sh text (None until a trial
        completed), winner.json content, notes on anything missing."""
        return _call(lambda: service.report(name, plots=plots))

    @mcp.tool()
    def tune_kernels(
        name: Annotated[str, Field(description="job name (its id for kernels_status)")],
        model: str | None = None,
        nk: Annotated[list[str] | None, Field(description="explicit shapes 'N,K'")] = None,
        tp: list[int] | None = None,
        kind: Literal["fp8", "int4"] | None = None,
        batch_sizes: Annotated[str | None, Field(description="comma-separated M values")] = None,
        strategy: Literal["budgeted", "exhaustive"] = "budgeted",
        packing: Literal["awq", "gptq"] = "awq",
        max_evals: Annotated[int, Field(ge=1)] = 40,
        deadline_s: Annotated[float | None, Field(gt=0)] = None,
        deterministic: Annotated[
            bool, Field(description="leave out configs whose output can differ run to run")
        ] = False,
    ) -> KernelsStatus:
        """Tune Triton GEMM configs (FP8 W8A8 block-wise, INT4 W4A16) for a model's shapes on
        the server's GPU, as a background job; poll kernels_status."""

        def run() -> KernelsStatus:
            req = KernelsRequest(
                name=name,
                model=model,
                nk=nk or [],
                tp=tp or [1],
                kind=kind,
                batch_sizes=batch_sizes,
                strategy=strategy,
                packing=packing,
                max_evals=max_evals,
                deadline_s=deadline_s,
                deterministic=deterministic,
            )
            return service.submit_kernels(req)

        return _call(run)

    @mcp.tool()
    def kernels_status(name: str) -> KernelsStatus:
        """A kernel tuning job's state, its result (files written) or its log tail."""
        return _call(lambda: service.kernels_status(name))

    return mcp


def run_stdio(service: Service, *, recover: bool = True) -> None:
    """Serve the tools on stdin/stdout until the client closes the session."""
    server = build_server(service)
    service.startup(recover=recover)
    try:
        server.run("stdio")
    finally:
        service.shutdown()
