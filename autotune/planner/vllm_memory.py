"""vLLM's memory accounting before the KV cache, per rank (vllm/v1/worker/gpu_worker.py): the
startup check of free memory against gpu_memory_utilization x total, and what comes off that
budget before the KV cache (weights, the profiling run's peak activations, non-torch memory,
CUDA graphs by release). The profiling peak's sampler phase is derived from the releases
(vllm_sampler.py, from 0.10.0); its forward pass and the non-torch terms are estimates
(documented constants), not measurements. A multimodal model's encoder profiling before the text
pass (what it keeps and the larger phase) is vllm_encoder.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.hardware.gpus import GPUSpec
from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner.common import GIB, MIB, weights_per_rank
from autotune.planner.vllm_encoder import encoder_profile
from autotune.planner.vllm_extensible import extensible_kv_cache, measured_kv_gib
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_moe import held_moe_workspace_bytes, transient_moe_phase_bytes
from autotune.planner.vllm_sampler import sampler_phase_bytes, v2_penalty_state_bytes

# Free memory at vLLM's initial snapshot = capacity - CUDA context - desktop share (F3). The
# snapshot is taken after the context exists, so the context only matters for the startup check
# (free >= requested) and for the headroom where graphs live before 0.20.
CUDA_CONTEXT_MIB = 500
# Memory outside torch's allocator that appears after the snapshot (cuBLAS workspaces, attention
# backend buffers; NCCL and custom all-reduce buffers with TP > 1).
NON_TORCH_MIB = 150
NON_TORCH_TP_MIB = 400
# Hopper (H100/H200/H800/H20) with TP > 1: NCCL takes more (more channels and larger buffers
# over NVLink 4, NVLS above two GPUs). Public figure: vLLM PR #10511 logged non_torch_memory
# 1.79 GiB at TP1 and 3.58 GiB at TP2 for Meta-Llama-3-8B on one H100 box.
HOPPER_TP_NON_TORCH_MIB = 1830
# From 0.18.0 the same on Hopper measures more: the 0.19.0 logs of H100 TP2 launches state a
# "non-torch forward increase memory" of 2.06 .. 2.11 GiB whatever the model (7B .. 72B, dense,
# MoE, fp8, int8), 0.13 .. 0.18 GiB above NON_TORCH_MIB + HOPPER_TP_NON_TORCH_MIB. What the
# 0.19.0 wheel changes in that window (v1/worker/gpu_worker.py): the snapshot it starts from is
# taken after init_worker_distributed_environment (from 0.11.0: NCCL's and the custom
# all-reduce's buffers are outside it), the sampler's dummy run is in the torch peak, CUDA graphs
# are captured after the KV cache (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS "0" before 0.20), but
# from 0.18.0 determine_available_memory runs profile_cudagraph_memory (two captures per graph
# mode under graph_capture) inside memory_profiling, so what that pass leaves outside torch is
# measured as non-torch increase. Fitted (not derived) on one log: 2.07 GiB,
# more-llama-3.1-8b-instruct-h100-tp2.yaml, less NON_TORCH_MIB.
HOPPER_TP_NON_TORCH_MIB_0_18 = 1970
# The GPUs whose TP ranks talk over NVLink / NVSwitch, where NCCL sets up those larger buffers:
# Hopper, and Blackwell's B200 / GB200 (sm_100), given Hopper's measured size (no B200 figure is
# public); the public SGLang launches at TP 4 and 8 on B200 and GB200 come closer with it (the
# GLM-4.5-Air FP8, MiMo-V2-Flash and DeepSeek-V3.2 records), none is fitted.
NVLINK_ARCHS = frozenset({"sm_90", "sm_100"})


def tp_non_torch_mib(gpu: GPUSpec, tp: int, version: str = "0.10.0") -> int:
    """Non-torch memory TP adds on one rank (NCCL, custom all-reduce; on NVLink GPUs from 0.18.0
    the graph-memory profiling pass too, HOPPER_TP_NON_TORCH_MIB_0_18): 0 at TP 1."""
    if tp <= 1:
        return 0
    if gpu.arch not in NVLINK_ARCHS:
        return NON_TORCH_TP_MIB
    return HOPPER_TP_NON_TORCH_MIB_0_18 if at_least(version, "0.18.0") else HOPPER_TP_NON_TORCH_MIB


# Profiling-run forward workspace per token, in units of the widest per-token tensors on a rank
# (gate_up out, qkv, GDN in_proj), x2 for temporaries beside them (as the SGLang planner).
# Estimate: the forward pass is not derived.
ACT_TENSORS_FACTOR = 2.0
# Before 0.10.0 (no release wheel read here): the sampler's fp32 logits and probabilities for
# min(max_num_seqs, tokens) rows, added to the forward term. Estimate.
LOGITS_COPIES = 2
# From 0.10.0 the sampler's dummy run is derived (sampler_bytes_per_logit): see vllm_sampler.py.
# CUDA graph memory: first capture plus each further graph (fit to two public 0.2x logs:
# 5 graphs 0.09 GiB on Qwen3.6-27B TP2; 86 graphs 0.52 GiB on Qwen3-8B).
GRAPH_BASE_MIB = 64
GRAPH_PER_GRAPH_MIB = 5.5
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def default_gpu_memory_utilization(version: str | None, extensible: bool = False) -> float:
    """vLLM's default gpu_memory_utilization: 0.9 through 0.19.x, 0.92 from 0.20.0 (CacheConfig's
    Field default in vllm/config/cache.py of the 0.19.1 and 0.20.0 wheels) through 0.33.x; from
    0.34.0 the field is None and CacheConfig.resolved_gpu_memory_utilization makes it 1.0 with
    the extensible KV cache (vllm_extensible), 0.92 without. None: the newest."""
    if extensible:
        return 1.0
    return (
        0.92 if version is None or at_least(version, "0.20.0") else DEFAULT_GPU_MEMORY_UTILIZATION
    )


# Vision-language architectures whose vLLM model splits the vision tower's linear layers (and
# the projector) across the TP ranks in mm_encoder_tp_mode "weights", the default; "data"
# (before 0.11: enable_multimodal_encoder_data_parallel) keeps the tower whole on every rank;
# the value is the first release that splits it.
# Llama 4: models/mllama4.py of 0.10.0, 0.12.0 and 0.19.0: ColumnParallelLinear /
# QKVParallelLinear / RowParallelLinear, ReplicatedLinear or disable_tp under data parallelism;
# the projector is column-parallel in both modes, counted whole there.
# Kimi-VL: models/moonvit.py builds each MoonViT block's wqkv / wo / fc0 / fc1 as nn.Linear in
# 0.10.0 and ReplicatedLinear in 0.11.0 to 0.13.0 (whole on every rank), QKVParallelLinear /
# RowParallelLinear / ColumnParallelLinear with disable_tp under data parallelism from 0.14.0
# (0.14.0, 0.15.1, 0.19.0, 0.25.1, 0.33.0); kimi_vl.py's projector stays ReplicatedLinear.
TP_SHARDED_VISION: dict[str, str] = {
    "Llama4ForConditionalGeneration": "0.0.0",
    "KimiVLForConditionalGeneration": "0.14.0",
}


def shards_vision(card: ModelCard, cfg: dict[str, Any], version: str | None = None) -> bool:
    """Whether vLLM `version` (None: the newest) splits this model's vision tower across the
    TP ranks."""
    data = cfg.get("mm_encoder_tp_mode") == "data" or bool(
        cfg.get("enable_multimodal_encoder_data_parallel")
    )
    first = TP_SHARDED_VISION.get(card.architecture)
    if first is None or data:
        return False
    return version is None or at_least(version, first)


# vLLM's gemma3.py gives the sliding-window layers their own rope (rope_type default, base
# rope_local_base_freq) beside the full-attention layers' (the config's rope_scaling): get_rope
# keys its cache on the rope parameters, so two cos/sin caches. The same in every release from
# gemma3.py's first, 0.8.0 (ARCHITECTURE_SINCE_HISTORY; 0.12.0 names the parameters
# rope_parameters, from 0.32.0 nested per layer type), to 0.33.0.
LOCAL_ROPE_ARCHS = frozenset({"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"})


def rope_cache_bytes(card: ModelCard) -> int:
    """The rotary embedding's cos/sin cache, built at load on every rank and counted in "Model
    loading took": max_position_embeddings x rotary_dim in the model's dtype, one buffer that
    the layers share (layers/rotary_embedding RotaryEmbeddingBase: register_buffer of
    cache.to(dtype); get_rope caches one module per shape; both in every release 0.6.3 ..
    0.33.0, whose fp32 flashinfer branch only DeepSeek's YaRN rope takes, from 0.14.0). 2.5 GiB
    for Llama 4 Scout's 10 M positions. A linear-scaled rope holds max_position_embeddings x
    factor positions (LinearScalingRotaryEmbedding._compute_cos_sin_cache, 0.6.3 .. 0.33.0);
    Gemma 3's sliding layers add an unscaled cache of their own (LOCAL_ROPE_ARCHS). 0 where the
    card does not state the rotary width."""
    if card.rotary_dim is None:
        return 0
    per_position = card.rotary_dim * DTYPE_BYTES.get(card.dtype, 2.0)
    positions = card.max_position_embeddings
    rs = card.rope_scaling
    if rs is not None and rs.kind == "linear":
        positions = int(positions * rs.factor)
    if card.architecture in LOCAL_ROPE_ARCHS and card.local_attention is not None:
        positions += card.max_position_embeddings
    return int(positions * per_position)


def vllm_weights_bytes(
    card: ModelCard, cfg: dict[str, Any], tp: int, load_mtp: bool, version: str | None = None
) -> int:
    """What vLLM `version` (None: the newest)'s "Model loading took" counts on one rank: the
    weights as it shards them and the rope cache."""
    shard = shards_vision(card, cfg, version)
    return weights_per_rank(card, tp, load_mtp, shard_vision=shard) + rope_cache_bytes(card)


def capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_spec: int = 0,
    max_capture: int | None = None,
    sizes: list[int] | None = None,
) -> list[int]:
    """vLLM's default CUDA-graph capture sizes (VllmConfig._set_cudagraph_sizes, then rounded to
    multiples of 1 + num_speculative_tokens by adjust_cudagraph_sizes_for_spec_decode)."""
    q = 1 + num_spec
    cap = max_capture if max_capture is not None else min(max_num_seqs * q * 2, 512)
    cap = min(cap, max_num_batched_tokens)
    base = sizes or [1, 2, 4, *range(8, 256, 8), *range(256, cap + 1, 16)]
    out = sorted({s for s in base if s <= cap})
    if q > 1:
        rounded = sorted({-(-s // q) * q for s in out if -(-s // q) * q <= cap})
        out = rounded or ([q] if q <= cap else [])
    return out


def graph_bytes(sizes: list[int], max_num_seqs: int, num_spec: int) -> int:
    """CUDA graph memory: PIECEWISE graphs for every size plus FULL decode graphs up to
    max_num_seqs x (1 + spec) (FULL_AND_PIECEWISE, the V1 default)."""
    if not sizes:
        return 0
    full = [s for s in sizes if s <= max_num_seqs * (1 + num_spec)]
    n = len(sizes) + len(full)
    return int((GRAPH_BASE_MIB + GRAPH_PER_GRAPH_MIB * (n - 1)) * MIB)


def flashinfer_setting(cfg: dict[str, Any]) -> bool | None:
    """VLLM_USE_FLASHINFER_SAMPLER as the launch sets it (None: unset)."""
    value = cfg.get("vllm_use_flashinfer_sampler")
    return None if value is None else bool(value)


def forward_bytes(card: ModelCard, tp: int, tokens: int) -> int:
    """The forward pass's workspace over `tokens` (estimate, see ACT_TENSORS_FACTOR)."""
    widths = (2 * card.intermediate_size) // tp + 2 * card.hidden_size
    la = card.linear_attention
    if la is not None:
        widths += (
            2 * la.num_key_heads * la.key_head_dim + 2 * la.num_value_heads * la.value_head_dim
        ) // tp
    return int(tokens * widths * DTYPE_BYTES.get(card.dtype, 2.0) * ACT_TENSORS_FACTOR)


def activation_bytes(
    card: ModelCard,
    tp: int,
    tokens: int,
    num_reqs: int,
    version: str,
    sm_count: int,
    use_flashinfer: bool | None = None,
    sampler: bool = True,
) -> int:
    """Peak of the profiling run above the weights. From 0.10.0 profile_run runs the forward
    pass, frees its temporaries, then the sampler on the last tokens' hidden states while the
    forward's output is still held: the peak is the larger of the two phases (the sampler's is
    derived, vllm_sampler.py; the forward's an estimate). Before 0.10.0, the estimate of both
    added (LOGITS_COPIES). `use_flashinfer`: VLLM_USE_FLASHINFER_SAMPLER as given (None:
    unset). `sampler` False: a pipeline stage before the last, which runs no sampler."""
    fwd = forward_bytes(card, tp, tokens)
    if not sampler:
        return fwd
    rows = min(num_reqs, tokens)
    if not at_least(version, "0.10.0"):
        return fwd + int(rows * card.vocab_size * 4 * LOGITS_COPIES)
    return max(fwd, sampler_phase_bytes(card, version, tokens, rows, sm_count, use_flashinfer))


@dataclass(frozen=True)
class StartupMemory:
    """Memory at vLLM's startup check, in GiB: total, free at the initial snapshot, and what
    gpu_memory_utilization requests of the total."""

    total_gib: float
    init_free_gib: float
    gpu_memory_utilization: float
    # 0.34.0+: the KV cache is sized after warmup (vllm_extensible)
    extensible: bool = False

    @property
    def requested_gib(self) -> float:
        return self.total_gib * self.gpu_memory_utilization

    @property
    def headroom_gib(self) -> float:
        """Free memory above `requested` at startup (where graphs live before 0.20)."""
        return self.init_free_gib - self.requested_gib


def startup_figures(
    gpu: GPUSpec,
    cfg: dict[str, Any],
    gpu_free_gib: float | None,
    assumptions: list[str],
    version: str | None = None,
) -> StartupMemory:
    """CUDA's total, the free memory at the initial snapshot (given, else the total less the
    context and a desktop's share) and gpu_memory_utilization."""
    total_mib = gpu.runtime_memory_mib
    if gpu_free_gib is not None:
        init_free = float(gpu_free_gib)
        assumptions.append(f"free memory at startup given: {init_free:.2f} GiB")
    else:
        init_free = (total_mib - CUDA_CONTEXT_MIB - gpu.desktop_reserve_mib) / 1024
        assumptions.append(
            f"free memory at startup = CUDA's total {total_mib} MiB - CUDA context "
            f"{CUDA_CONTEXT_MIB} MiB - desktop {gpu.desktop_reserve_mib} MiB"
        )
    extensible = version is not None and extensible_kv_cache(cfg, version, gpu)
    gmu = float(cfg.get("gpu_memory_utilization") or 0.0)
    if not gmu:
        gmu = default_gpu_memory_utilization(version, extensible)
        assumptions.append(
            f"gpu_memory_utilization not set: vLLM {version or 'newest'}'s default {gmu}"
            + (" (the extensible KV cache)" if extensible else "")
        )
    return StartupMemory(total_mib / 1024, init_free, gmu, extensible)


def startup_memory(
    gpu: GPUSpec,
    cfg: dict[str, Any],
    gpu_free_gib: float | None,
    reasons: list[str],
    assumptions: list[str],
    version: str | None = None,
) -> StartupMemory:
    """The startup figures; less free memory than requested is a reason (vLLM fails to start)."""
    mem = startup_figures(gpu, cfg, gpu_free_gib, assumptions, version)
    init_free, total_gib, gmu = mem.init_free_gib, mem.total_gib, mem.gpu_memory_utilization
    requested = mem.requested_gib
    # with the extensible KV cache the budget is only a cap (v1/worker/utils.py request_memory)
    if init_free < requested and not mem.extensible:
        reasons.append(
            f"Free memory on device ({init_free:.2f}/{total_gib:.2f} GiB) on startup is less "
            f"than desired GPU memory utilization ({gmu}, {requested:.2f} GiB): lower "
            "gpu_memory_utilization"
        )
    return mem


@dataclass(frozen=True)
class ProfiledMemory:
    """What vLLM takes from `requested` before the KV cache, in GiB (vllm.py's docstring)."""

    weights_gib: float
    activation_gib: float  # profiling-run peak (estimate)
    non_torch_gib: float
    capture_sizes: list[int]
    graph_gib: float  # CUDA graph memory (estimate)
    graph_in_budget: bool  # graphs taken from the KV budget (0.20+)
    kv_cache_gib: float  # the KV cache's memory ("Available KV cache memory" before 0.34.0)
    # held beside the weights outside "Model loading took" (vllm_sampler.v2_penalty_state_bytes)
    persistent_gib: float = 0.0
    # "Available KV cache memory" as logged: the reserved capacity under the extensible KV cache
    kv_reserve_gib: float | None = None


def profiled_memory(
    card: ModelCard,
    cfg: dict[str, Any],
    *,
    version: str,
    tp: int,
    max_num_seqs: int,
    max_tokens: int,
    num_spec: int,
    mtp: bool,
    startup: StartupMemory,
    reasons: list[str],
    tp_mib: int | None = None,
    padding_bytes: int = 0,
    draft_bytes: int = 0,
    workspace_bytes: int = 0,
    gpu: GPUSpec,
    last_stage: bool = True,
    first_stage: bool = True,
    max_model_len: int = 0,
    chunked_prefill: bool = True,
) -> ProfiledMemory:
    """Weights (plus what the kernels and the caching allocator pad them by, `padding_bytes`,
    and a separate draft model's, `draft_bytes`), activations (the GPU's SM count sizes
    the Triton sampler's buffer; `workspace_bytes`, what the run's first GEMM allocates beside
    them; the MoE experts' kept buffer by the GPU's kernel, vllm_moe.held_moe_workspace_bytes,
    and fused_experts' freed caches on 0.9.1 .. 0.13.x, vllm_moe.transient_moe_phase_bytes),
    non-torch memory and graphs, and the KV memory they leave; graphs captured outside
    the budget that the headroom cannot hold are a reason. `last_stage` False: a pipeline stage
    before the last (no sampler in its profiling run). A multimodal model's encoder profiling
    (vllm_encoder.py; `max_model_len` and `chunked_prefill` size its batch; `first_stage` False:
    a stage after the first, which runs none from 0.34.0) takes the larger phase of the run."""
    requested = startup.requested_gib
    loaded = vllm_weights_bytes(card, cfg, tp, load_mtp=mtp, version=version)
    weights = (loaded + padding_bytes + draft_bytes) / GIB
    # 0.9.1 .. 0.13.x: fused_experts' caches, freed on return, peak in the forward's phase (as
    # vllm_legacy.py counts them before).
    text = max(
        activation_bytes(
            card,
            tp,
            max_tokens,
            max_num_seqs,
            version,
            gpu.sm_count,
            flashinfer_setting(cfg),
            sampler=last_stage,
        ),
        transient_moe_phase_bytes(card, cfg, tp, max_tokens, version, gpu.arch),
    ) + held_moe_workspace_bytes(card, cfg, tp, max_tokens, version, gpu.arch)
    enc = encoder_profile(
        card,
        cfg,
        version,
        max_num_batched_tokens=max_tokens,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        chunked_prefill=chunked_prefill,
        first_stage=first_stage,
    )
    act = ((enc.peak(text) if enc else text) + workspace_bytes) / GIB
    if tp_mib is None:
        tp_mib = NON_TORCH_TP_MIB if tp > 1 else 0
    non_torch = (NON_TORCH_MIB + tp_mib) / 1024
    eager = bool(cfg.get("enforce_eager"))
    sizes: list[int] = []
    if not eager:
        given = cfg.get("cudagraph_capture_sizes")
        sizes = capture_sizes(
            max_num_seqs,
            max_tokens,
            num_spec,
            cfg.get("max_cudagraph_capture_size"),
            list(given) if given else None,
        )
    graph = graph_bytes(sizes, max_num_seqs, num_spec) / GIB
    estimate_env = cfg.get("memory_profiler_estimate_cudagraphs")
    in_budget = (
        at_least(version, "0.20.0")
        if estimate_env is None
        else bool(estimate_env) and at_least(version, "0.18.0")
    )
    state = v2_penalty_state_bytes(card.vocab_size, max_num_seqs, version) if last_stage else 0
    held = non_torch + state / GIB
    kv_mem = requested - weights - act - held - (graph if in_budget else 0.0)
    if startup.extensible:
        # the profile gives the capacity only (no graph estimate); the pool is what is left
        # after warmup and capture (vllm_extensible)
        reserve = requested - weights - act - held
        measured = measured_kv_gib(
            requested_gib=requested,
            init_free_gib=startup.init_free_gib,
            resident_gib=weights + held + graph,
            transient_gib=act,
            vendor=gpu.vendor,
        )
        kv = min(reserve, measured)
        return ProfiledMemory(
            weights,
            act,
            non_torch,
            sizes,
            graph,
            True,
            kv,
            kv_reserve_gib=reserve,
            persistent_gib=state / GIB,
        )
    headroom = startup.headroom_gib
    if not in_budget and graph > 0 and headroom < graph:
        reasons.append(
            f"CUDA graphs (~{graph:.2f} GiB) are captured outside gpu_memory_utilization on "
            f"vLLM {version}, and only {max(headroom, 0):.2f} GiB is left above it: graph "
            "capture would run out of memory; lower gpu_memory_utilization or "
            "max_cudagraph_capture_size"
        )
    return ProfiledMemory(
        weights, act, non_torch, sizes, graph, in_budget, kv_mem, persistent_gib=state / GIB
    )
