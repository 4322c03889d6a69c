"""What the simulated engine prints as vLLM at startup and when it refuses to start: vLLM's own
lines, rendered by the vLLM adapter (`format_startup_lines`, `format_failure`) from the planner's
figures, so that the adapter's `parse_startup` and `classify_failure` read the simulator exactly
as they read a real vLLM log (sim/startup.py is the same for SGLang)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping

from autotune.engines.vllm import format_failure, format_startup_lines
from autotune.engines.vllm.flags import at_least
from autotune.engines.vllm.logs import VLLMLaunchReport
from autotune.hardware import GPU_CATALOG
from autotune.models.card import ModelCard
from autotune.planner.vllm import VLLMPlan
from autotune.planner.vllm_extensible import NON_TORCH_RESERVE_GIB, withheld_gib
from autotune.sim.launch import write_line

TS = "00-00 00:00:00"  # placeholder timestamp, replaced by the wall clock when printed
# ModelCard quantization schemes as vLLM's engine config line names them.
QUANTIZATION = {"fp8_block": "fp8", "fp8": "fp8", "awq": "awq_marlin", "gptq": "gptq_marlin"}
QUANTIZATION.update({"int8": "compressed-tensors", "nvfp4": "modelopt_fp4"})


def stamp(line: str) -> str:
    """The line with the wall-clock time where the placeholder is."""
    return line.replace(TS, time.strftime("%m-%d %H:%M:%S"), 1)


def emit(line: str) -> None:
    """Print a line rendered with the placeholder timestamp, the wall-clock time in its place."""
    write_line(stamp(line))


def info_line(message: str, src: str = "sim.py:1") -> str:
    """A line in vLLM's API-server format (prefix from 0.10.1 on every release we print)."""
    return f"(APIServer pid={os.getpid()}) INFO {TS} [{src}] {message}"


def weights_load_s(card: ModelCard, tp: int) -> float:
    """Seconds the simulated launch takes to load its share of the weights (2 GB/s)."""
    return card.weights.total / tp / 2.0e9


def launch_report(
    plan: VLLMPlan, config: Mapping[str, object], card: ModelCard, version: str, startup_s: float
) -> VLLMLaunchReport:
    """The figures a real launch of `plan` logs (set only where vLLM prints them: max_num_seqs
    and gpu_memory_utilization appear in `non-default args` only when given)."""
    eager = bool(config.get("enforce_eager"))
    extensible = plan.extensible_kv_cache
    graph_estimate = (
        plan.graph_gib
        if plan.graph_in_budget and at_least(version, "0.18.0") and not extensible
        else None
    )
    load_s = weights_load_s(card, plan.tp)
    scheme = card.quantization.scheme
    return VLLMLaunchReport(
        weights_gib=plan.weights_gib,
        kv_dtype=plan.kv_dtype,
        kv_pool_tokens=plan.kv_pool_tokens,
        max_concurrency=plan.max_concurrency,
        context_len=plan.max_model_len,
        kv_cache_gib=plan.kv_cache_gib,
        gpu_memory_utilization=plan.gpu_memory_utilization
        if config.get("gpu_memory_utilization") is not None
        else None,
        graph_estimate_gib=graph_estimate,
        graph_gib=None if eager else plan.graph_gib,
        num_gpu_blocks=plan.num_gpu_blocks,
        block_size=plan.block_size if card.is_hybrid else None,
        max_num_batched_tokens=plan.max_num_batched_tokens,
        max_num_seqs=plan.max_num_seqs if config.get("max_num_seqs") is not None else None,
        quantization=None if scheme == "none" else QUANTIZATION.get(scheme, scheme),
        enforce_eager=eager,
        enable_prefix_caching=plan.prefix_caching,
        enable_chunked_prefill=plan.mixed_chunk,
        weights_load_s=round(load_s, 6),
        graph_capture_s=0.0 if eager else max(1.0, 0.05 * len(plan.capture_sizes)),
        init_engine_s=round(max(startup_s - load_s, 1.0), 2),
        ready=True,
        **(after_warmup(plan, config) if extensible else {}),
    )


def after_warmup(plan: VLLMPlan, config: Mapping[str, object]) -> dict[str, object]:
    """What 0.34.0's extensible KV cache logs after warmup (measure_kv_cache_blocks), from the
    planner's figures: warmup leaves only the null blocks committed (counted as 0 here), the
    transient reserve is the profiled activation peak (no torch growth), torch holds the weights
    and graphs and may grow into what the extended cache leaves free less the non-torch reserve
    (vllm_extensible.NON_TORCH_RESERVE_GIB); an explicit utilisation that keeps memory out of
    the cache is warned about as vllm_extensible.withheld_gib says."""
    gpu = GPU_CATALOG.get(plan.gpu)
    vendor = gpu.vendor if gpu is not None else "nvidia"
    resident = plan.weights_gib + plan.non_torch_gib + plan.persistent_gib + plan.graph_gib
    free = plan.pre_weights_free_gib - resident
    act = plan.activation_gib
    reserve = NON_TORCH_RESERVE_GIB.get(vendor, NON_TORCH_RESERVE_GIB["nvidia"])
    out: dict[str, object] = {
        "extensible_kv_cache": True,
        "kv_reserve_gib": plan.kv_reserve_gib,
        "free_after_warmup_gib": free,
        "warmup_kv_gib": 0.0,
        "transient_reserve_gib": act,
        "transient_peak_gib": act,
        "torch_reserve_growth_gib": 0.0,
        "requested_gib": plan.requested_gib,
        "torch_limit_gib": plan.weights_gib
        + plan.persistent_gib
        + plan.graph_gib
        + max(free - plan.kv_cache_gib - reserve, 0.0),
    }
    util = config.get("gpu_memory_utilization")
    held = withheld_gib(
        float(util) if isinstance(util, float) else None,
        requested_gib=plan.requested_gib,
        init_free_gib=plan.pre_weights_free_gib,
        resident_gib=resident,
        transient_gib=act,
        vendor=vendor,
    )
    if held is not None:
        out["kv_withheld_gib"] = held
    return out


def startup_lines(
    plan: VLLMPlan,
    config: Mapping[str, object],
    card: ModelCard,
    ns: argparse.Namespace,
    version: str,
    startup_s: float,
) -> list[str]:
    """Every line `vllm serve` prints for this launch, up to uvicorn's "Application startup
    complete." (ns: the server options: model, host, port)."""
    report = launch_report(plan, config, card, version, startup_s)
    return format_startup_lines(
        version,
        report,
        model=ns.model_path,
        host=ns.host,
        port=int(ns.port),
        tp_size=plan.tp,
        total_gib=plan.total_gib,
        timestamp=TS,
        pid=os.getpid(),
        elapsed_s=report.weights_load_s or 1.0,
    )


def startup_schedule(
    lines: list[str], startup_s: float, load_s: float
) -> tuple[list[tuple[float, str]], list[str]]:
    """(fraction of the startup time, line) pairs for the lines up to "Starting vLLM", in a
    monotone order, and the lines printed once the server is up (uvicorn's)."""
    cut = next((i + 1 for i, line in enumerate(lines) if "Starting vLLM" in line), len(lines))
    total = max(startup_s, 1e-9)
    load_end = min(0.2 + load_s / total, 0.8)
    out: list[tuple[float, str]] = []
    for line in lines[:cut]:
        if "Model loading took" in line:
            frac = load_end
        elif "Available KV cache memory" in line or "KV cache size" in line:
            frac = load_end + 0.05
        elif "Graph capturing finished" in line or "init engine" in line:
            frac = 0.98
        elif "Starting vLLM" in line:
            frac = 0.99
        else:
            frac = 0.1
        out.append((frac, line))
    best = 0.0
    return [(best := max(best, f), line) for f, line in out], lines[cut:]


def failure_lines(plan: VLLMPlan, version: str) -> list[str]:
    """vLLM's own error text for the first reason the planner rejects the config, in the order
    vLLM meets them (startup memory check, profiling, KV cache sizing, graph capture); a reason
    vLLM reports as a config error gets the engine core's traceback with the planner's words."""
    refusal = _Refusal(plan, version)
    lines = refusal.own_message()
    return refusal.config_error() if lines is None else lines


class _Refusal:
    """The lines vLLM `version` prints for a plan the planner rejects."""

    def __init__(self, plan: VLLMPlan, version: str):
        self.plan, self.version = plan, version
        self.reasons = list(plan.reasons)

    def render(self, kind: str, **values: float | bool | None) -> list[str]:
        return format_failure(
            kind, self.version, timestamp=TS, tp_size=self.plan.tp, pid=os.getpid(), **values
        )

    def kv_hint(self, after_warmup: bool) -> dict[str, float | bool]:
        """What 0.34.0 words its KV cache errors' advice from (_more_kv_cache_memory_hint): the
        extensible KV cache, the resolved gpu_memory_utilization, and whether the check failed
        after warmup (only with the extensible cache) rather than on the profiled capacity."""
        plan = self.plan
        extensible = plan.extensible_kv_cache
        return {
            "extensible_kv_cache": extensible,
            "gpu_memory_utilization": plan.gpu_memory_utilization,
            "after_warmup": extensible and after_warmup,
        }

    def first(self, *needles: str) -> str | None:
        return next((r for r in self.reasons if any(n in r for n in needles)), None)

    def own_message(self) -> list[str] | None:
        """vLLM's message for the first kind of reason it meets (None: a config error)."""
        plan = self.plan
        if self.first("Free memory on device"):
            return self.render(
                "startup_free_memory",
                free_gib=plan.pre_weights_free_gib,
                total_gib=plan.total_gib,
                gpu_memory_utilization=plan.gpu_memory_utilization,
            )
        if self.first("No available memory for the cache blocks"):
            # after warmup: the profiled capacity had blocks, the size measured after it none
            return self.render("no_cache_memory", **self.kv_hint(plan.kv_reserve_gib > 0))
        if self.first("To serve at least one request"):
            # after warmup: the profiled capacity held one request of max_model_len, the size
            # measured after warmup (shrink_kv_cache_configs) does not
            warmup = plan.kv_reserve_gib >= plan.kv_needed_gib
            return self.render(
                "kv_cache_too_small",
                max_model_len=plan.max_model_len,
                needed_gib=plan.kv_needed_gib,
                available_gib=plan.kv_cache_gib
                if warmup or not plan.extensible_kv_cache
                else plan.kv_reserve_gib,
                estimated_max_len=plan.estimated_max_model_len or None,
                **self.kv_hint(warmup),
            )
        if self.first("CUDA graphs (~"):
            return self.graph_capture_oom()
        return None

    def graph_capture_oom(self) -> list[str]:
        plan = self.plan
        free = max(plan.slack_gib, 0.0)
        in_use = plan.total_gib - free
        return self.render(
            "graph_capture_oom",
            tried_gib=min(plan.graph_gib, 2.0),
            total_gib=plan.total_gib,
            free_gib=free,
            in_use_gib=in_use,
            allocated_gib=max(in_use - 0.5, 0.0),
        )

    def config_error(self) -> list[str]:
        """A configuration vLLM refuses while building its config (unsupported architecture, no
        MTP weights, chunked prefill off below max_model_len): the traceback and the core's
        exit."""
        core = "EngineCore_DP0" if at_least(self.version, "0.10.2") else "EngineCore_0"
        pid = os.getpid()
        return [
            f"({core} pid={pid}) ERROR {TS} [core.py:632] EngineCore failed to start.",
            f"({core} pid={pid}) Traceback (most recent call last):",
            f"({core} pid={pid}) ValueError: {'; '.join(self.reasons)}",
            *self.render("engine_dead", exit_code=1),
        ]
