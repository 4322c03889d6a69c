"""The pieces one vLLM plan is assembled from (vllm.py's plan_vllm): the scheduler's limits, the
speculative method, the bundle the current model (vllm.py) and the release history
(vllm_legacy.py) each produce for the report step, and the plan's own fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from autotune.models.card import ModelCard
from autotune.planner.common import GIB, MIB, ContractAndWorking
from autotune.planner.drafts import DraftModel
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_kv import KVLayout
from autotune.planner.vllm_memory import ProfiledMemory, StartupMemory


@dataclass(frozen=True)
class BatchLimits:
    """The scheduler's limits as vLLM runs them (EngineArgs defaults filled in)."""

    max_num_seqs: int
    max_model_len: int
    chunked_prefill: bool
    max_num_batched_tokens: int


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding as vLLM's SpeculativeConfig describes it."""

    config: dict[str, Any]  # the SpeculativeConfig fields ({} without speculation)
    method: Any
    num_spec: int  # num_speculative_tokens (0 without speculation)
    mtp: bool  # an MTP method: the target's MTP weights are loaded
    draft_layers: int  # MTP layers whose KV the target's cache holds
    draft: DraftModel | None = None  # a separate draft model the planner knows (DFlash)


@dataclass(frozen=True)
class PlanParts:
    """Everything the report step (vllm.py) needs of one planned launch."""

    startup: StartupMemory
    limits: BatchLimits
    spec: SpecDecode
    prefix: bool  # prefix caching on
    mem: ProfiledMemory
    lay: KVLayout


class VLLMFields(TypedDict):
    """VLLMPlan's own fields (past the Plan contract), as the planner's report step fills them."""

    gpu_memory_utilization: float
    total_gib: float
    requested_gib: float
    activation_gib: float
    non_torch_gib: float
    graph_gib: float
    graph_in_budget: bool
    kv_cache_gib: float
    kv_reserve_gib: float
    extensible_kv_cache: bool
    persistent_gib: float
    block_size: int
    num_gpu_blocks: int
    kv_groups: int
    layers_per_group: int
    page_bytes: int
    blocks_per_request: int
    max_concurrency: float
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    prefix_caching: bool
    kv_needed_gib: float
    estimated_max_model_len: int
    capture_sizes: list[int]


# Speculative methods async scheduling runs with (vLLM's EagleModelTypes; draft_model from
# 0.16.0, ngram_gpu from 0.18.0): with any other the auto setting turns it off.
_ASYNC_SPEC = ("eagle", "eagle3", "mtp", "deepseek_mtp", "qwen3_next_mtp")


def async_default(cfg: dict[str, Any], version: str, method: object) -> bool:
    """Whether the launch schedules asynchronously: the user's choice, else off up to 0.13.0
    and on from 0.14.0 unless its speculative method does not support it (vLLM
    config/vllm.py VllmConfig.__post_init__)."""
    given = cfg.get("async_scheduling")
    if given is not None:
        return bool(given)
    if not at_least(version, "0.14.0"):
        return False
    if method in (None, ""):
        return True
    if method == "draft_model" and at_least(version, "0.16.0"):
        return True
    if method == "ngram_gpu" and at_least(version, "0.18.0"):
        return True
    return str(method) in _ASYNC_SPEC


def kv_needed_gib(lay: KVLayout) -> float:
    """KV memory one request of max_model_len needs."""
    return lay.blocks_per_request * lay.block_bytes / GIB


def _slack_gib(startup: StartupMemory, mem: ProfiledMemory) -> float:
    """Memory left free at peak load: the headroom above `requested`; with 0.34.0's extensible
    KV cache (sized to what the device has left) the free memory less all the engine holds at
    peak, the sizing margin (vllm_extensible)."""
    if not startup.extensible:
        return startup.headroom_gib
    held = mem.weights_gib + mem.non_torch_gib + mem.persistent_gib + mem.graph_gib
    held += mem.activation_gib
    return startup.init_free_gib - held - mem.kv_cache_gib


def plan_fields(card: ModelCard, parts: PlanParts) -> ContractAndWorking:
    """The Plan contract's figures in vLLM's terms (VLLMPlan's docstring)."""
    startup, limits, spec, prefix = parts.startup, parts.limits, parts.spec, parts.prefix
    mem, lay = parts.mem, parts.lay
    max_num_seqs, sizes = limits.max_num_seqs, mem.capture_sizes
    mamba_per_req = lay.mamba_groups * lay.mamba_blocks
    slots = min(max_num_seqs, lay.num_blocks // mamba_per_req) if mamba_per_req else 0
    n_lin = len(card.linear_layers)
    return ContractAndWorking(
        weights_gib=round(mem.weights_gib, 3),
        kv_cell_bytes=lay.token_bytes,
        kv_pool_tokens=lay.kv_tokens,
        mamba_slots=slots,
        mamba_pool_gib=round(slots * mamba_per_req * lay.block_bytes / GIB, 3),
        max_running_requests=max_num_seqs,
        pre_weights_free_gib=round(startup.init_free_gib, 3),
        mem_fraction_static=startup.gpu_memory_utilization,
        static_budget_gib=round(startup.requested_gib - mem.weights_gib, 3),
        kv_pool_gib=round(lay.num_blocks * lay.block_bytes / GIB, 3),
        mamba_conv_gib=round(slots * lay.conv_bytes * n_lin / GIB, 3),
        mamba_ssm_gib=round(slots * lay.ssm_bytes * n_lin / GIB, 3),
        mamba_spec_gib=0.0,
        mamba_slot_mib=round(lay.mamba_state_bytes * n_lin / MIB, 2),
        slack_gib=round(_slack_gib(startup, mem), 3),
        slack_needed_gib=round(0.0 if mem.graph_in_budget else mem.graph_gib, 3),
        chunked_prefill_size=limits.max_num_batched_tokens,
        cuda_graph_max_bs=max(sizes) if sizes else 0,
        context_len=limits.max_model_len,
        mamba_strategy=lay.mamba_mode,
        slots_per_request=lay.mamba_blocks,
        radix_cache=prefix,
        overlap_schedule=False,
        mixed_chunk=limits.chunked_prefill,
        speculative={
            "method": spec.method,
            "num_speculative_tokens": spec.num_spec or None,
            **spec.config,
        },
    )


def vllm_fields(parts: PlanParts) -> VLLMFields:
    """VLLMPlan's own figures."""
    startup, limits, mem, lay = parts.startup, parts.limits, parts.mem, parts.lay
    return VLLMFields(
        gpu_memory_utilization=startup.gpu_memory_utilization,
        total_gib=round(startup.total_gib, 3),
        requested_gib=round(startup.requested_gib, 3),
        activation_gib=round(mem.activation_gib, 3),
        non_torch_gib=round(mem.non_torch_gib, 3),
        graph_gib=round(mem.graph_gib, 3),
        graph_in_budget=mem.graph_in_budget,
        kv_cache_gib=round(mem.kv_cache_gib, 3),
        kv_reserve_gib=round(
            mem.kv_cache_gib if mem.kv_reserve_gib is None else mem.kv_reserve_gib, 3
        ),
        extensible_kv_cache=startup.extensible,
        persistent_gib=round(mem.persistent_gib, 3),
        block_size=lay.block_size,
        num_gpu_blocks=lay.num_blocks,
        kv_groups=lay.groups,
        layers_per_group=lay.layers_per_group,
        page_bytes=lay.page_bytes,
        blocks_per_request=lay.blocks_per_request,
        max_concurrency=round(lay.concurrency, 4),
        max_num_seqs=limits.max_num_seqs,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        max_model_len=limits.max_model_len,
        prefix_caching=parts.prefix,
        kv_needed_gib=round(kv_needed_gib(lay), 3),
        estimated_max_model_len=lay.estimated_max_model_len,
        capture_sizes=mem.capture_sizes,
    )
