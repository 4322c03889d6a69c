"""Predict what a vLLM (V1 engine, 0.9.1 .. 0.34.x) launch gets on one GPU, and whether it fits.

Mirrors vLLM's own accounting per rank (vllm/v1/worker/gpu_worker.py, v1/core/kv_cache_utils.py):

    requested = gpu_memory_utilization * TOTAL memory      (not free memory: a desktop or another
                                                            process makes startup fail)
    kv_memory = requested - weights - peak activations of the profiling run (max_num_batched_tokens
                tokens, max_num_seqs sampled rows) - non-torch memory (NCCL, cuBLAS, custom
                all-reduce) - CUDA graph memory (profiled and subtracted from 0.20.0, or with
                VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 on 0.18/0.19; before, graphs live in
                the headroom above `requested`)
    num_blocks = kv_memory // (page_bytes * layers_per_tensor)

From 0.34.0 the extensible KV cache (on by default) sizes the pool after warmup and graph
capture instead, with gpu_memory_utilization 1.0 when unset (vllm_extensible).

Calibrated on public startup logs (tests/planner/test_vllm.py): Qwen3.5-27B on 0.19.0 (290,864
tokens, 33.04x), Qwen3.6-35B-A3B fp8 KV with prefix caching on 0.24.0 (5.98 GiB -> 567,978
tokens, 4.33x), Qwen3.6-27B TP2 fp8 KV on a 0.2x release (9.84 GiB -> 619,202 tokens, 2.36x),
Qwen3.8-27B fp8 KV (block 1568, padding 0.13 %), and the CUDA-graph capture counts of two logs.
The profiling peak's sampler phase is derived from the releases (vllm_sampler); its forward pass
and the non-torch term are estimates (vllm_memory's constants), not measurements.

Here: the batch limits, speculative decoding, prefix caching, the KV fit and the plan. Beside
it: vllm_memory (the startup check, the profiling run, CUDA graphs) and vllm_kv (the KV cache
layout, and how vLLM logs its capacity); what callers use of them is importable from here too.
Older releases (0.4.0 .. 0.9.0, and V0 launches of 0.9.x) follow their own accounting:
vllm_history (the releases, the engine a launch runs, defaults and KV geometry by release) and
vllm_legacy (their memory accounting); `planner_version` parses the versions the planner takes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import Field

from autotune.errors import ConfigError
from autotune.hardware.gpus import GPUSpec
from autotune.models.card import ModelCard
from autotune.planner.common import GIB, Plan
from autotune.planner.vllm_alloc import cublas_workspace_bytes, weight_padding_bytes
from autotune.planner.vllm_connector import note_kv_connector
from autotune.planner.vllm_draft import draft_kv, separate_draft
from autotune.planner.vllm_dtype import apply_checkpoint_kv, launch_card
from autotune.planner.vllm_extensible import default_block_size
from autotune.planner.vllm_history import (
    CURRENT_MODEL_SINCE,
    at_least,
    check_history_architecture,
    check_version_for_model,
    engine_of,
    planner_version,
)
from autotune.planner.vllm_kv import (
    KVLayout,
    attention_bytes_per_token,
    hybrid_block_size,
    kv_layout,
    mamba_page_bytes,
)
from autotune.planner.vllm_legacy import plan_history
from autotune.planner.vllm_memory import (
    ProfiledMemory,
    StartupMemory,
    activation_bytes,
    capture_sizes,
    graph_bytes,
    profiled_memory,
    startup_memory,
    tp_non_torch_mib,
)
from autotune.planner.vllm_mxfp4 import mxfp4_padding_bytes
from autotune.planner.vllm_parts import (
    BatchLimits,
    PlanParts,
    SpecDecode,
    async_default,
    kv_needed_gib,
    plan_fields,
    vllm_fields,
)
from autotune.planner.vllm_pipeline import Stage, pipeline_stages
from autotune.planner.vllm_window import in_flight_tokens, mm_prefix_floor

__all__ = [
    "ARCHITECTURE_SINCE",
    "BatchLimits",
    "KVLayout",
    "SpecDecode",
    "VLLMPlan",
    "activation_bytes",
    "attention_bytes_per_token",
    "capture_sizes",
    "graph_bytes",
    "hybrid_block_size",
    "kv_layout",
    "mamba_page_bytes",
    "plan_vllm",
    "planner_version",
]

_MTP_METHODS = {"mtp", "deepseek_mtp", "qwen3_next_mtp", "qwen3_5_mtp"}
# First release whose model registry has the hybrid architectures of FIELD-NOTES F1
# (vllm/model_executor/models/registry.py in each wheel).
ARCHITECTURE_SINCE = {
    "Qwen3NextForCausalLM": "0.10.2",
    "Qwen3_5ForConditionalGeneration": "0.17.0",
    "Qwen3_5MoeForConditionalGeneration": "0.17.0",
    "Qwen3_5ForCausalLM": "0.27.0",
    "Qwen3_5MoeForCausalLM": "0.27.0",
    "Gemma4ForConditionalGeneration": "0.19.0",
}


class VLLMPlan(Plan):
    """The planner contract (Plan) for vLLM, plus vLLM's own quantities.

    Plan fields map as: mem_fraction_static = gpu_memory_utilization; static_budget_gib =
    requested - weights; chunked_prefill_size = max_num_batched_tokens; cuda_graph_max_bs = the
    largest captured size (0 with enforce_eager); mamba_strategy = mamba cache mode;
    slots_per_request = mamba blocks per request per GDN group; radix_cache = prefix caching;
    slack_gib = headroom above `requested` at startup.
    """

    engine: str = "vllm"
    gpu_memory_utilization: float
    total_gib: float
    requested_gib: float = Field(description="gpu_memory_utilization x total memory")
    activation_gib: float = Field(description="profiling-run peak (estimate)")
    non_torch_gib: float
    graph_gib: float = Field(description="CUDA graph memory (estimate)")
    graph_in_budget: bool = Field(description="graphs taken from the KV budget (0.20+)")
    kv_cache_gib: float = Field(
        description="the KV cache's memory: 'Available KV cache memory' as vLLM logs it before "
        "0.34.0, the size committed after warmup with 0.34.0's extensible KV cache"
    )
    kv_reserve_gib: float = Field(
        description="'Available KV cache memory' as vLLM logs it (with the extensible KV cache: "
        "the reserved capacity, sized by the profiling run)"
    )
    extensible_kv_cache: bool = Field(description="KV cache sized after warmup (0.34.0+)")
    persistent_gib: float = Field(
        description="held beside the weights, outside 'Model loading took': the V2 Sampler's "
        "penalty state (0.34.0+)"
    )
    block_size: int
    num_gpu_blocks: int
    kv_groups: int
    layers_per_group: int
    page_bytes: int
    blocks_per_request: int
    max_concurrency: float = Field(description="requests of max_model_len the cache holds")
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    prefix_caching: bool
    kv_needed_gib: float = Field(description="KV memory one max_model_len request needs")
    estimated_max_model_len: int
    capture_sizes: list[int]


def _defaults(total_mib: int, gpu_name: str, version: str) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) for `vllm serve` by NVML's total memory
    (EngineArgs.get_batch_defaults: 70 GiB+ cards other than A100 get the larger pair; from
    0.28.0 cards of 160 GiB+ batch 16384 tokens; a GPU whose NVML has no total reads as 0;
    tests/planner/test_vllm_wheel_defaults.py runs the releases' own function)."""
    if total_mib >= 160 * 1024 and at_least(version, "0.28.0"):
        return 1024, 16384
    if total_mib >= 70 * 1024 and "a100" not in gpu_name.lower():
        return 1024, 8192
    return 256, 2048


def _truthy(value: Any) -> bool | None:
    return None if value is None else bool(value)


def plan_vllm(
    card: ModelCard,
    gpu: GPUSpec,
    config: dict[str, Any] | None = None,
    *,
    version: str,
    tp: int = 1,
    gpu_free_gib: float | None = None,
    host_free_gib: float | None = None,
) -> VLLMPlan:
    """Plan one vLLM launch. `config` holds vLLM field names (and the search space's speculative
    fields); missing keys mean "engine decides". host_free_gib is unused (no host KV pool here).

    Raises:
        ConfigError: an unsupported version (outside 0.4.0 .. 0.34.x, or a hybrid model before
            0.10.0), a TP size that disagrees with the config, or an unknown kv_cache_dtype.
    """
    del host_free_gib
    cfg = dict(config or {})
    build, version = version, planner_version(version)
    tp = _tensor_parallel(cfg, tp)
    check_version_for_model(card, version)
    reasons: list[str] = []
    assumptions: list[str] = []
    card = launch_card(card, cfg, assumptions, version=version, arch=gpu.arch)
    apply_checkpoint_kv(card, cfg, version, assumptions)
    if _follows_history(card, gpu, cfg, version):
        parts = plan_history(
            card,
            gpu,
            cfg,
            version=version,
            build=build,
            tp=tp,
            gpu_free_gib=gpu_free_gib,
            reasons=reasons,
            assumptions=assumptions,
        )
    else:
        parts = _current_parts(card, gpu, cfg, version, tp, gpu_free_gib, reasons, assumptions)
    return VLLMPlan(
        engine_version=version,
        model=card.name,
        gpu=gpu.name,
        tp=tp,
        kv_dtype=str(cfg.get("kv_cache_dtype") or "auto"),
        fits=not reasons,
        reasons=reasons,
        assumptions=assumptions,
        bound_by="user" if cfg.get("max_num_seqs") else "default",
        **{**plan_fields(card, parts), "overlap_schedule": async_scheduling(cfg, version, parts)},
        **vllm_fields(parts),
    )


def async_scheduling(cfg: dict[str, Any], version: str, parts: PlanParts) -> bool:
    """Whether the launch schedules asynchronously (vllm_parts.async_default)."""
    return async_default(cfg, version, parts.spec.method)


def _follows_history(card: ModelCard, gpu: GPUSpec, cfg: dict[str, Any], version: str) -> bool:
    """Whether the launch follows an older release's accounting (vllm_legacy): any release
    before 0.9.1, and a 0.9.x launch that falls back to the V0 engine."""
    if not at_least(version, CURRENT_MODEL_SINCE):
        return True
    return not at_least(version, "0.10.0") and engine_of(card, gpu, cfg, version, []) == "v0"


def _current_parts(
    card: ModelCard,
    gpu: GPUSpec,
    cfg: dict[str, Any],
    version: str,
    tp: int,
    gpu_free_gib: float | None,
    reasons: list[str],
    assumptions: list[str],
) -> PlanParts:
    """The plan's parts under the current model (V1, 0.9.1 .. 0.34.x)."""
    startup = startup_memory(gpu, cfg, gpu_free_gib, reasons, assumptions, version)
    limits = _batch_limits(card, gpu, cfg, version, reasons, assumptions)
    _check_architecture(card, version, reasons)
    if not at_least(version, "0.10.0"):
        check_history_architecture(card, version, reasons)
    spec = _speculative(card, cfg, version, reasons)
    pp = int(cfg.get("pipeline_parallel_size") or 1)
    draft = separate_draft(spec.config, spec.method, assumptions, version=version, pp=pp)
    spec = replace(spec, draft=draft)
    prefix = _prefix_caching(card, cfg, version, limits.chunked_prefill, reasons, assumptions)
    kv_dtype = str(cfg.get("kv_cache_dtype") or "auto")
    note_kv_connector(card, cfg, version, tp, kv_dtype, assumptions)
    found: tuple[ProfiledMemory, KVLayout] | None = None
    for stage in pipeline_stages(card, pp, version=version):
        mem, lay = _stage_parts(
            stage, gpu, cfg, version, tp, startup, limits, spec, prefix, kv_dtype, reasons,
            assumptions,
        )  # fmt: skip
        if found is None or lay.num_blocks < found[1].num_blocks:
            found = (mem, lay)
    assert found is not None
    mem, lay = found
    if pp > 1:
        assumptions.append(
            f"pipeline parallel {pp}: every stage gets the smallest stage's KV blocks "
            f"({lay.num_blocks}); the weights shown are that stage's"
        )
        reasons[:] = dict.fromkeys(reasons)
        assumptions[:] = dict.fromkeys(assumptions)
    _check_kv_fit(lay, limits, startup, mem, reasons, assumptions)
    return PlanParts(startup, limits, spec, prefix, mem, lay)


def _stage_parts(
    stage: Stage,
    gpu: GPUSpec,
    cfg: dict[str, Any],
    version: str,
    tp: int,
    startup: StartupMemory,
    limits: BatchLimits,
    spec: SpecDecode,
    prefix: bool,
    kv_dtype: str,
    reasons: list[str],
    assumptions: list[str],
) -> tuple[ProfiledMemory, KVLayout]:
    """One pipeline stage's memory before the KV cache and its KV layout (PP 1: the model)."""
    card = stage.card
    mem = profiled_memory(
        card,
        cfg,
        version=version,
        tp=tp,
        max_num_seqs=limits.max_num_seqs,
        max_tokens=limits.max_num_batched_tokens,
        num_spec=spec.num_spec,
        mtp=spec.mtp,
        startup=startup,
        reasons=reasons,
        tp_mib=tp_non_torch_mib(gpu, tp, version),
        padding_bytes=mxfp4_padding_bytes(card, gpu, version, tp)
        + weight_padding_bytes(card, tp, version, gpu.vendor),
        draft_bytes=spec.draft.weights_per_rank(tp) if spec.draft else 0,
        workspace_bytes=cublas_workspace_bytes(gpu),
        gpu=gpu,
        last_stage=stage.last,
        first_stage=stage.start == 0,
        max_model_len=limits.max_model_len,
        chunked_prefill=limits.chunked_prefill,
    )
    return mem, _layout(card, cfg, version, tp, kv_dtype, limits, spec, prefix, mem, assumptions)


def _tensor_parallel(cfg: dict[str, Any], tp: int) -> int:
    """The TP size: the config's tensor_parallel_size (or tp_size) when `tp` is the default 1.

    Raises:
        ConfigError: the config and `tp` disagree.
    """
    cfg_tp = cfg.get("tensor_parallel_size", cfg.get("tp_size"))
    if cfg_tp is not None and int(cfg_tp) != tp:
        if tp != 1:
            raise ConfigError(
                f"tensor_parallel_size={cfg_tp} in the config but tp={tp} given",
                field="tensor_parallel_size",
            )
        tp = int(cfg_tp)
    return tp


def _batch_limits(
    card: ModelCard,
    gpu: GPUSpec,
    cfg: dict[str, Any],
    version: str,
    reasons: list[str],
    assumptions: list[str],
) -> BatchLimits:
    """max_num_seqs, max_model_len, chunked prefill and max_num_batched_tokens; a batch that
    cannot hold max_model_len without chunked prefill is a reason."""
    nvml_mib = gpu.runtime_memory_mib if gpu.nvml_memory else 0
    seqs_default, tokens_default = _defaults(nvml_mib, gpu.name, version)
    max_num_seqs = int(cfg.get("max_num_seqs") or seqs_default)
    max_len = int(cfg.get("max_model_len") or card.max_position_embeddings)
    chunked = cfg.get("enable_chunked_prefill") is not False
    if cfg.get("max_num_batched_tokens"):
        max_tokens = int(cfg["max_num_batched_tokens"])
    else:
        max_tokens = tokens_default if chunked else max(max_len, tokens_default)
        floor = mm_prefix_floor(card, version)
        if floor > max_tokens:
            assumptions.append(f"vLLM raises max_num_batched_tokens to {floor} (one video item)")
            max_tokens = min(floor, max_num_seqs * max_len)
    if not chunked and max_tokens < max_len:
        reasons.append(
            f"max_num_batched_tokens ({max_tokens}) is smaller than max_model_len ({max_len}) "
            "with chunked prefill off: vLLM rejects it"
        )
    if max_len > card.max_position_embeddings:
        assumptions.append(
            f"max_model_len {max_len} exceeds the model's {card.max_position_embeddings}: vLLM "
            "refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
        )
    return BatchLimits(max_num_seqs, max_len, chunked, max_tokens)


def _check_architecture(card: ModelCard, version: str, reasons: list[str]) -> None:
    """An architecture newer than `version`'s model registry is a reason."""
    since = ARCHITECTURE_SINCE.get(card.architecture)
    if since is not None and not at_least(version, since):
        reasons.append(
            f"{card.architecture} is not in vLLM {version}'s model registry (it is from "
            f"{since}; a text-only Qwen3.5 pack can declare Qwen3_5ForConditionalGeneration)"
        )


def _speculative(
    card: ModelCard, cfg: dict[str, Any], version: str, reasons: list[str]
) -> SpecDecode:
    """The speculative method and its draft; an MTP method without MTP weights is a reason.
    0.9.x is checked against the flag catalog's first release (0.10.0)."""
    from autotune.engines.vllm.flags import speculative_config
    from autotune.engines.vllm.speculative import speculative_method

    catalogued = version if at_least(version, "0.10.0") else "0.10.0"
    spec = speculative_config(cfg, catalogued) or {}
    method = speculative_method(spec, catalogued)
    num_spec = int(spec.get("num_speculative_tokens") or 0) if method else 0
    mtp = method in _MTP_METHODS
    if mtp and not card.has_mtp and not spec.get("model"):
        reasons.append(
            f"speculative method {method} needs MTP weights; {card.name} has none (vllm#35548)"
        )
    draft_layers = card.mtp_layers if mtp and card.has_mtp else 0
    return SpecDecode(spec, method, num_spec, mtp, draft_layers)


def _prefix_caching(
    card: ModelCard,
    cfg: dict[str, Any],
    version: str,
    chunked: bool,
    reasons: list[str],
    assumptions: list[str],
) -> bool:
    """Whether prefix caching is on (hybrid models: default on from 0.26.0); with it, the mamba
    cache mode align, which needs chunked prefill."""
    prefix = _truthy(cfg.get("enable_prefix_caching"))
    if prefix is None:
        prefix = not card.is_hybrid or at_least(version, "0.26.0")
        assumptions.append(f"enable_prefix_caching not set: vLLM {version} defaults to {prefix}")
    if card.is_hybrid and prefix and not chunked:
        reasons.append(
            "prefix caching on a hybrid model (mamba cache mode align) needs chunked prefill"
        )
    return prefix


def _layout(
    card: ModelCard,
    cfg: dict[str, Any],
    version: str,
    tp: int,
    kv_dtype: str,
    limits: BatchLimits,
    spec: SpecDecode,
    prefix: bool,
    mem: ProfiledMemory,
    assumptions: list[str],
) -> KVLayout:
    """The KV cache layout of the memory left (vllm_kv), a raised hybrid block size noted."""
    conv_dtype, ssm_dtype = cfg.get("mamba_cache_dtype"), cfg.get("mamba_ssm_cache_dtype")
    draft = spec.draft and draft_kv(
        spec.draft, card, version=version, tp=tp, kv_dtype=kv_dtype, assumptions=assumptions
    )
    lay = kv_layout(
        card,
        version=version,
        tp=tp,
        kv_dtype=kv_dtype,
        block_size=int(cfg.get("block_size") or default_block_size(version)),
        max_model_len=limits.max_model_len,
        kv_memory_bytes=max(mem.kv_cache_gib, 0.0) * GIB,
        prefix_caching=prefix,
        num_spec=spec.num_spec,
        draft_layers=spec.draft_layers,
        conv_dtype=None if conv_dtype in (None, "auto") else str(conv_dtype),
        ssm_dtype=None if ssm_dtype in (None, "auto") else str(ssm_dtype),
        context_parallel=int(cfg.get("decode_context_parallel_size") or 1)
        * int(cfg.get("prefill_context_parallel_size") or 1),
        in_flight_tokens=in_flight_tokens(
            version, limits.max_num_batched_tokens, async_default(cfg, version, spec.method)
        ),
        separate_draft=draft or None,
    )
    if lay.block_size != int(cfg.get("block_size") or default_block_size(version)):
        assumptions.append(
            f"hybrid model: vLLM sets the attention block size to {lay.block_size} tokens so a "
            f"page ({lay.page_bytes} B) holds a linear-attention (GDN / Mamba-2) state "
            f"({lay.mamba_state_bytes} B)"
        )
    return lay


def _check_kv_fit(
    lay: KVLayout,
    limits: BatchLimits,
    startup: StartupMemory,
    mem: ProfiledMemory,
    reasons: list[str],
    assumptions: list[str],
) -> None:
    """No KV memory, or not enough for one request of max_model_len, is a reason (vLLM's
    startup errors); fewer such requests than max_num_seqs is noted."""
    kv_mem, max_len, max_num_seqs = mem.kv_cache_gib, limits.max_model_len, limits.max_num_seqs
    concurrency = lay.concurrency
    if kv_mem <= 0:
        reasons.append(
            "No available memory for the cache blocks: weights "
            f"({mem.weights_gib:.2f} GiB), the profiling peak ({mem.activation_gib:.2f} GiB) "
            f"and the rest use all of {startup.requested_gib:.2f} GiB; raise "
            "gpu_memory_utilization or lower max_num_batched_tokens"
        )
    elif lay.num_blocks < lay.blocks_per_request:
        reasons.append(
            f"To serve at least one request with the model's max seq len ({max_len}), "
            f"({kv_needed_gib(lay):.2f} GiB KV cache is needed, which is larger than the "
            f"available KV cache memory ({kv_mem:.2f} GiB). Based on the available memory, the "
            f"estimated maximum model length is {lay.estimated_max_model_len}: lower "
            "max_model_len or raise gpu_memory_utilization"
        )
    if 0 < concurrency < max_num_seqs:
        assumptions.append(
            f"only {concurrency:.2f} requests of max_model_len fit at once: with {max_num_seqs} "
            "long requests vLLM preempts (recomputes) some"
        )
