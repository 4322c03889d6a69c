"""What the engines' planners share: the Plan contract each returns, the units, and the steps
that are the same for them (weights on a rank for SGLang and vLLM; host RAM for SGLang and
llama.cpp)."""

from __future__ import annotations

from typing import Any, TypedDict

from pydantic import BaseModel, Field

from autotune.models.card import ModelCard, WeightBytes

GIB = 2**30
MIB = 2**20


class Plan(BaseModel):
    """`autotune plan --json`: the contract fields first, then the working."""

    weights_gib: float
    kv_cell_bytes: int
    kv_pool_tokens: int
    mamba_slots: int
    mamba_pool_gib: float
    max_running_requests: int
    fits: bool
    reasons: list[str]
    host_pool_tokens: int | None = None
    # working
    engine: str = "sglang"
    engine_version: str
    model: str
    gpu: str
    tp: int
    kv_dtype: str
    pre_weights_free_gib: float
    mem_fraction_static: float
    static_budget_gib: float = Field(description="rest_memory: pre*mfs - weights")
    kv_pool_gib: float
    mamba_conv_gib: float
    mamba_ssm_gib: float
    mamba_spec_gib: float
    mamba_slot_mib: float
    slack_gib: float = Field(description="pre*(1-mfs): activations, graphs, draft model")
    slack_needed_gib: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    context_len: int
    mamba_strategy: str
    slots_per_request: int
    radix_cache: bool
    overlap_schedule: bool
    mixed_chunk: bool
    speculative: dict[str, Any]
    host_pool_gb: float | None = None
    host_mamba_gb: float | None = None
    host_available_gib: float | None = None
    prefill_graph_tokens: int = Field(
        default=0,
        description="SGLang: the largest prefill forward replayed from its prefill CUDA graph "
        "(0: every prefill forward runs eagerly)",
    )
    bound_by: str = Field(description="what caps concurrency: kv_tokens, mamba_slots or user")
    assumptions: list[str]
    perf: dict[str, Any] | None = None
    calibrated: dict[str, Any] | None = Field(
        default=None,
        description="`autotune plan --calibrated`: the KV pool corrected by this machine's "
        "stored launches (kv_pool_tokens, launches, model)",
    )


class PlanContract(TypedDict):
    """Plan's contract figures, as an engine's planner computes them (its report step builds
    the Plan from typed parts like this one, so a misspelt field is a type error)."""

    weights_gib: float
    kv_cell_bytes: int
    kv_pool_tokens: int
    mamba_slots: int
    mamba_pool_gib: float
    max_running_requests: int


class PlanWorking(TypedDict):
    """Plan's working figures every engine's planner fills in its own terms."""

    pre_weights_free_gib: float
    mem_fraction_static: float
    static_budget_gib: float
    kv_pool_gib: float
    mamba_conv_gib: float
    mamba_ssm_gib: float
    mamba_spec_gib: float
    mamba_slot_mib: float
    slack_gib: float
    slack_needed_gib: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    context_len: int
    mamba_strategy: str
    slots_per_request: int
    radix_cache: bool
    overlap_schedule: bool
    mixed_chunk: bool
    speculative: dict[str, Any]


class ContractAndWorking(PlanContract, PlanWorking):
    """Both parts, for a planner that computes them in one step (vLLM, llama.cpp)."""


def host_ram_available_gib(host_free_gib: float | None, assumptions: list[str]) -> float:
    """Host RAM available to the launch: `host_free_gib` when given, else this machine's
    (noted in `assumptions`)."""
    if host_free_gib is None:
        import psutil

        host_free_gib = psutil.virtual_memory().available / GIB
        assumptions.append(f"host RAM available read from this machine: {host_free_gib:.1f} GiB")
    return host_free_gib


def weights_per_rank(card: ModelCard, tp: int, load_mtp: bool, shard_vision: bool = False) -> int:
    """Weights on one rank: sharded parts / TP; the parts the engines build as replicated
    layers are whole on every rank, and so is the vision tower unless `shard_vision` (an engine
    that splits the tower's linear layers across the TP ranks)."""
    w = card.weights
    sharded = w.embed_tokens + w.lm_head + w.decoder + (w.mtp if load_mtp else 0)
    return (sharded + w.load_overhead) // tp + vision_per_rank(w, tp, shard_vision) + w.replicated


def vision_per_rank(w: WeightBytes, tp: int, shard: bool) -> int:
    """The vision tower on one rank: whole, or its linear layers / TP and the rest whole."""
    if not shard:
        return w.vision
    linear = min(w.vision_linear, w.vision)
    return w.vision - linear + linear // tp
