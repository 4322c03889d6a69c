"""The tools that answer at once: plan (the VRAM planner) and inspect_checkpoint."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from autotune.planner.sglang import Plan
from autotune.service.core import Service
from autotune.service.mcp_tools.calls import run_tool
from autotune.service.schemas import InspectOut, InspectRequest, PlanRequest

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


def add_planning_tools(mcp: MCPServer, service: Service) -> None:
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

        return run_tool(run)

    @mcp.tool()
    def inspect_checkpoint(
        path: Annotated[str, Field(description="server-local model folder (allowed paths)")],
        tp: Annotated[int, Field(ge=1, le=64)] = 1,
    ) -> InspectOut:
        """Check a checkpoint against its config.json and the kernels: quantized vs
        unquantized tensors per layer, exclusion lists naming nothing, Marlin width limits,
        MTP presence. exit_code 0 ok, 10 warnings, 11 broken; findings carry fixes."""
        return run_tool(lambda: service.inspect(InspectRequest(path=path, tp=tp)))
