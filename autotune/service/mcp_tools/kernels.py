"""The kernel tuning tools: tune_kernels (a background job), kernels_status, and
install_kernels (an engine job's files where that engine reads them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from autotune.service.core import Service
from autotune.service.mcp_tools.calls import name_arg, run_tool
from autotune.service.schemas import (
    NK_MAX,
    NK_PATTERN,
    TP_MAX,
    KernelsInstallOut,
    KernelsInstallRequest,
    KernelsRequest,
    KernelsStatus,
)

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


# Arguments as the HTTP request model declares them (bounds, patterns, descriptions), so the
# tool's schema says what the service enforces.
_KR = KernelsRequest.model_fields


def add_kernel_tools(mcp: MCPServer, service: Service) -> None:
    @mcp.tool()
    def tune_kernels(
        name: Annotated[str, name_arg("job name (its id for kernels_status)")],
        model: Annotated[str | None, _KR["model"]] = None,
        nk: Annotated[
            list[Annotated[str, Field(pattern=NK_PATTERN)]] | None,
            Field(max_length=NK_MAX, description="explicit GEMM shapes 'N,K'"),
        ] = None,
        tp: Annotated[
            list[Annotated[int, Field(ge=1, le=64)]] | None,
            Field(min_length=1, max_length=TP_MAX, description="TP sizes (default [1])"),
        ] = None,
        kind: Annotated[Literal["fp8", "int4"] | None, _KR["kind"]] = None,
        batch_sizes: Annotated[str | None, _KR["batch_sizes"]] = None,
        strategy: Literal["budgeted", "exhaustive"] = "budgeted",
        packing: Literal["awq", "gptq"] = "awq",
        max_evals: Annotated[int, Field(ge=1, le=100_000)] = 40,
        deadline_s: Annotated[float | None, _KR["deadline_s"]] = None,
        deterministic: Annotated[
            bool, Field(description="leave out configs whose output can differ run to run")
        ] = False,
        engine: Annotated[
            Literal["sglang", "vllm"] | None,
            Field(
                description="tune this engine's own FP8 kernel and write the files that "
                "release reads (then install_kernels); default: autotune's own kernels"
            ),
        ] = None,
        engine_version: Annotated[str | None, _KR["engine_version"]] = None,
        engine_python: Annotated[
            str | None,
            Field(description="with engine: the interpreter of the engine's environment"),
        ] = None,
    ) -> KernelsStatus:
        """Tune Triton GEMM configs (FP8 W8A8 block-wise, INT4 W4A16) for a model's shapes on
        the server's GPU, as a background job; poll kernels_status. With engine, the engine
        release's own FP8 kernel is tuned (the kernel it really runs)."""

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
                engine=engine,
                engine_version=engine_version,
                engine_python=engine_python,
            )
            return service.submit_kernels(req)

        return run_tool(run)

    @mcp.tool()
    def kernels_status(name: Annotated[str, name_arg("the kernel job name")]) -> KernelsStatus:
        """A kernel tuning job's state, its result (files written) or its log tail."""
        return run_tool(lambda: service.kernels_status(name))

    @mcp.tool()
    def install_kernels(
        name: Annotated[str, name_arg("an ended tune_kernels job that had engine")],
        dry_run: Annotated[
            bool,
            Field(
                description="prove where the files would go and that the release's own lookup "
                "finds them, changing nothing (a real install needs allow_kernel_install in "
                "the service's config.yaml)"
            ),
        ] = True,
        device_name: Annotated[
            str | None, Field(description="only files for this device, e.g. NVIDIA_H200")
        ] = None,
    ) -> KernelsInstallOut:
        """Install an engine kernel job's files where that engine release reads them and run
        its own config lookup to prove it finds each one (`autotune kernels install`)."""
        return run_tool(
            lambda: service.install_kernels(
                name, KernelsInstallRequest(dry_run=dry_run, device_name=device_name)
            )
        )
