"""The kernel tuning tools: tune_kernels (a background job) and kernels_status."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from autotune.service.core import Service
from autotune.service.mcp_tools.calls import run_tool
from autotune.service.schemas import KernelsRequest, KernelsStatus

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


def add_kernel_tools(mcp: MCPServer, service: Service) -> None:
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

        return run_tool(run)

    @mcp.tool()
    def kernels_status(name: str) -> KernelsStatus:
        """A kernel tuning job's state, its result (files written) or its log tail."""
        return run_tool(lambda: service.kernels_status(name))
