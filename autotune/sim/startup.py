"""What the simulated engine prints at startup and when it refuses to start: SGLang's own lines,
rendered by the SGLang adapter (autotune.engines.sglang.logformat) from the planner's figures, so
that the adapter's `parse_startup` and `classify_failure` read the simulator exactly as they read
a real SGLang log.
"""

from __future__ import annotations

import re
import time
from typing import Any

from autotune.engines.base import LaunchReport
from autotune.engines.sglang import SIMULATED_MARKER, format_failure, format_startup_lines
from autotune.errors import ConfigError
from autotune.models.card import ModelCard
from autotune.planner.sglang import GIB, GRAPH_BASE_MIB, GRAPH_PER_BS_MIB, Plan

# The first line of every simulated engine's output (the adapter's marker, then plain words).
BANNER = f"{SIMULATED_MARKER} SIMULATED: timings from a roofline model, no GPU used."
_TS = "1111-11-11 11:11:11"  # replaced by the wall clock when the line is printed
_TORCH_DTYPES = {
    "fp8_e4m3": "torch.float8_e4m3fn",
    "fp8_e5m2": "torch.float8_e5m2",
    "bf16": "torch.bfloat16",
    "bfloat16": "torch.bfloat16",
    "float16": "torch.float16",
    "mxfp8": "torch.float8_e4m3fn",
    "nvfp4": "torch.uint8",
    "fp4_e2m1": "torch.uint8",
    "fp4_mx_block16": "torch.uint8",
}


def stamp(line: str) -> str:
    """Put the current wall-clock time into a line rendered with the placeholder timestamp."""
    if line.startswith("[" + _TS):
        return "[" + time.strftime("%Y-%m-%d %H:%M:%S") + line[1 + len(_TS) :]
    return line


def graph_gib(plan: Plan) -> float:
    return (GRAPH_BASE_MIB + GRAPH_PER_BS_MIB * plan.cuda_graph_max_bs) / 1024


def host_mamba_slots(plan: Plan) -> int:
    slot = plan.mamba_slot_mib * 2**20
    return int((plan.host_mamba_gb or 0.0) * 1e9 // slot) if slot else 0


def launch_report(plan: Plan, config: dict[str, Any], *, hybrid: bool) -> LaunchReport:
    """The figures a real launch of this plan would log."""
    page = int(config.get("page_size") or 1)
    # K and V are each (tokens + one padding page) x half the cell (reference §2.2)
    half = (plan.kv_pool_tokens + page) * plan.kv_cell_bytes / 2 / GIB
    spec = plan.speculative.get("algorithm")
    graph = graph_gib(plan)
    avail = (
        plan.pre_weights_free_gib
        - plan.weights_gib
        - plan.kv_pool_gib
        - plan.mamba_pool_gib
        - plan.mamba_spec_gib
        - graph
    )
    host_gb = None
    if plan.host_pool_tokens is not None and plan.host_pool_gb is not None:
        host_gb = plan.host_pool_gb + ((plan.host_mamba_gb or 0.0) if hybrid else 0.0)
    warnings = []
    if spec and config.get("max_running_requests") is None:
        warnings.append(
            "Max running requests is reset to 48 for speculative decoding. You can "
            "override this by explicitly setting --max-running-requests."
        )
    if (
        hybrid
        and plan.mamba_strategy == "no_buffer"
        and not plan.overlap_schedule
        and (plan.radix_cache and not spec)
    ):
        warnings.append(
            "Disabling overlap schedule since mamba no_buffer is not compatible with "
            "overlap schedule, try to use --disable-radix-cache if overlap schedule "
            "is necessary"
        )
    return LaunchReport(
        weights_gib=plan.weights_gib,
        kv_dtype=_TORCH_DTYPES.get(plan.kv_dtype, "torch.bfloat16"),
        kv_pool_tokens=plan.kv_pool_tokens,
        kv_k_gib=round(half, 2),
        kv_v_gib=round(half, 2),
        mamba_slots=plan.mamba_slots if hybrid else None,
        mamba_conv_gib=plan.mamba_conv_gib if hybrid else None,
        mamba_ssm_gib=plan.mamba_ssm_gib if hybrid else None,
        mamba_spec_gib=plan.mamba_spec_gib if hybrid and spec else None,
        graph_gib=round(graph, 2),
        max_total_num_tokens=plan.kv_pool_tokens,
        chunked_prefill_size=plan.chunked_prefill_size,
        max_prefill_tokens=int(config.get("max_prefill_tokens") or 16384),
        max_running_requests=plan.max_running_requests,
        context_len=plan.context_len,
        available_gpu_mem_gib=round(max(avail, 0.0), 2),
        host_pool_tokens=plan.host_pool_tokens,
        host_pool_gb=None if host_gb is None else round(host_gb, 2),
        warnings=warnings,
        simulated=False,  # the banner, printed first, carries the marker
    )


def startup_lines(
    plan: Plan, card: ModelCard, cfg: dict[str, Any], version: str, startup_s: float
) -> list[tuple[float, str]]:
    """(fraction of the startup time, line) pairs, in order, up to the summary line, for SGLang
    `version` starting `card` as planned (startup_s: the perf model's startup time)."""
    hybrid = card.is_hybrid
    report = launch_report(plan, cfg, hybrid=hybrid)
    q = card.quantization
    load_s = card.weights.total / plan.tp / 2.0e9
    lines = format_startup_lines(
        version,
        report,
        tp_size=plan.tp,
        model_class=card.architecture,
        quant_str=None if q.scheme == "none" else f"quant={q.checkpoint_format or q.scheme}",
        free_before_gib=plan.pre_weights_free_gib,
        speculative=bool(plan.speculative.get("algorithm")),
        host_mamba_gb=plan.host_mamba_gb if hybrid and report.host_pool_gb is not None else None,
        host_mamba_slots=host_mamba_slots(plan),
        host_layout=str(cfg.get("hicache_mem_layout") or "page_first"),
        timestamp=_TS,
        elapsed_s=load_s,
    )
    total = max(startup_s, 1e-9)
    out = []
    for line in lines:
        if "Load weight begin" in line:
            frac = 0.2
        elif "Load weight end" in line:
            frac = min(0.2 + load_s / total, 0.8)
        elif "Capture" in line:
            frac = 0.95
        elif "max_total_num_tokens=" in line:
            frac = 0.99
        else:
            frac = min(0.2 + load_s / total, 0.8) + 0.01
        out.append((frac, line))
    # keep the order monotone
    best = 0.0
    return [(best := max(best, f), line) for f, line in out]


def _float(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def failure_lines(plan: Plan, version: str, config: dict[str, Any], total_gib: float) -> list[str]:
    """SGLang's own error text for the first reason the planner rejects the config, in the order
    SGLang meets them at startup (weights, pools, CUDA graphs, then the HiCache host pool)."""
    refusal = _Refusal(plan, version, total_gib)
    lines = refusal.own_message()
    if lines is None:
        lines = refusal.scheduler_traceback()
    return [stamp(line) for line in lines]


class _Refusal:
    """The lines SGLang `version` prints for a plan the planner rejects."""

    def __init__(self, plan: Plan, version: str, total_gib: float):
        self.plan, self.version, self.total_gib = plan, version, total_gib
        self.reasons = list(plan.reasons)

    def render(self, kind: str, **values: float | None) -> list[str] | None:
        """format_failure's lines for `kind`, None where this version has no such message."""
        try:
            return format_failure(
                kind, self.version, timestamp=_TS, tp_size=self.plan.tp, **values
            )
        except ConfigError:
            return None

    def first(self, *needles: str) -> str | None:
        return next((r for r in self.reasons if any(n in r for n in needles)), None)

    def own_message(self) -> list[str] | None:
        """SGLang's message for the first kind of reason it meets (None: it has none)."""
        mfs = self.plan.mem_fraction_static
        if self.first("leave no GPU memory for the KV cache"):
            return self.render(
                "weights_leave_no_memory",
                mem_fraction_static=mfs,
                available_gib=self.plan.pre_weights_free_gib - self.plan.weights_gib,
                pre_gib=self.plan.pre_weights_free_gib,
            )
        if self.first("Not enough GPU memory for hybrid", "too small to serve any requests"):
            return self.mamba_pool()
        if self.first("Not enough memory for the KV cache"):
            return self.render("kv_cache_oom", mem_fraction_static=mfs)
        if self.first("non-static slack"):
            return self.graph_capture()
        if reason := self.first("Not enough host memory available"):
            return self.render(
                "host_memory",
                requested_gb=_float(r"Requesting ([\d.]+) GB", reason) or 0.0,
                available_gb=_float(r"only have ([\d.]+) GB", reason) or 0.0,
            )
        return None

    def mamba_pool(self) -> list[str] | None:
        plan = self.plan
        if self.first("Not enough GPU memory for hybrid"):
            lines = self.render(
                "mamba_cache_oom",
                max_mamba_cache_size=plan.mamba_slots,
                total_rest_gib=plan.static_budget_gib,
                per_req_mb=plan.mamba_slot_mib,
            )
        else:
            lines = self.render(
                "mamba_too_small",
                max_mamba_cache_size=plan.mamba_slots,
                ratio=plan.slots_per_request,
                max_num_reqs=0,
            )
        if lines is None:  # before 0.5.13 SGLang has no message of its own: the pool sizing fails
            lines = self.render("kv_cache_oom", mem_fraction_static=plan.mem_fraction_static)
        return lines

    def graph_capture(self) -> list[str] | None:
        plan = self.plan
        free = max(plan.slack_gib - (plan.slack_needed_gib - graph_gib(plan)), 0.0) * 0.5
        used = self.total_gib - free
        return self.render(
            "graph_capture",
            tried_gib=min(graph_gib(plan), 2.0),
            total_gib=self.total_gib,
            free_gib=free,
            in_use_gib=used,
            allocated_gib=max(used - 0.5, 0.0),
        )

    def scheduler_traceback(self) -> list[str]:
        """No SGLang message of its own (missing MTP weights, unsupported combination): the
        scheduler's traceback with the planner's words, then the launcher's propagation."""
        return [
            f"[{_TS}] Scheduler hit an exception: Traceback (most recent call last):",
            f"RuntimeError: {'; '.join(self.reasons)}",
            *(self.render("scheduler_dead", exit_code=1) or []),
        ]
