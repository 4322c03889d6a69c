"""The pieces one vLLM plan is assembled from (vllm.py's plan_vllm): the scheduler's limits, the
speculative method, the bundle the current model (vllm.py) and the release history
(vllm_legacy.py) each produce for the report step, and the plan's own fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

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
