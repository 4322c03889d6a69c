"""vLLM's memory accounting before the current model: the V0 engine (0.4.0 .. 0.9.2) and the
early V1 engine (0.8.0 .. 0.9.0, opted in from 0.6.5), per rank, as each release range does it
(worker/worker.py, utils memory_profiling, v1/worker/gpu_worker.py of each release wheel; the
release rules themselves are in vllm_history.py):

    kv = gpu_memory_utilization x total - weights - profiling-run peak - non-torch memory

- V0 0.4.0 .. 0.6.3: the peak is measured as free memory before the profile minus after it:
  NCCL / cuBLAS count, the CUDA context does not (it exists before the first measurement); the
  allocator's reserved pool counts, which may exceed the allocated peak (not modelled).
- V0 0.6.4: allocated peak + the whole device's memory outside torch, CUDA context included.
- V0 0.6.5 .. 0.9.2: memory_profiling from a baseline: weights + activation peak + non-torch
  increase (context excluded). The PR #12126 log (H100, Llama-3.2-11B-Vision) states it as
  79.22 x 0.90 = 71.29; 71.29 - 19.86 - 0.16 - 36.63 = 14.64 GiB (logged 14.65).
- V1 0.6.5 .. 0.9.0: allocated peak + whole-device non-torch (context included).

No release here checks free memory at startup, and every one captures CUDA graphs after the KV
cache is allocated (in the headroom above gpu_memory_utilization). V0 counts blocks:
num_gpu_blocks = kv // (block_size x bytes per token per layer x layers); V1 logs blocks x
block_size tokens. The activation and non-torch terms are estimates (constants below).
"""

from __future__ import annotations

from typing import Any

from autotune.hardware.gpus import GPUSpec
from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner.common import GIB, vision_per_rank
from autotune.planner.nccl_memory import extrapolated_channels_note, vllm_tp_growth_mib
from autotune.planner.vllm_history import (
    Engine,
    at_least,
    auto_chunked_prefill,
    check_history_architecture,
    derived_max_model_len,
    engine_of,
    history_block_size,
    history_bytes_per_token,
    history_capture_sizes,
    mla_active,
    speculative_settings,
    v0_batched_tokens,
    v1_defaults,
)
from autotune.planner.vllm_kv import KVLayout
from autotune.planner.vllm_memory import (
    GRAPH_BASE_MIB,
    GRAPH_PER_GRAPH_MIB,
    HOPPER_TP_NON_TORCH_MIB,
    NON_TORCH_MIB,
    NON_TORCH_TP_MIB,
    ProfiledMemory,
    StartupMemory,
    activation_bytes,
    rope_cache_bytes,
    shards_vision,
    startup_figures,
    vllm_weights_bytes,
)
from autotune.planner.vllm_moe import expert_parallel, moe_phase_bytes
from autotune.planner.vllm_parts import BatchLimits, PlanParts, SpecDecode
from autotune.planner.vllm_pipeline import layer_weights, pipeline_stages, pp_partition
from autotune.versions import Version

# Memory outside torch on the whole device at TP1 (CUDA context, cuBLAS), which V0 0.6.4 and
# early V1 subtract from the KV budget. Estimate, taken from the one term 0.6.4 logs state
# (non_torch_memory=0.35GiB on an RTX 3090, v-llama-3.1-8b-instruct-rtx3090-tp1*.yaml;
# 0.34GiB on a W7900, repo-llama-3.3-70b-instruct-gguf-q4km-w7900-tp1.yaml); a CUDA context
# alone takes 0.3 .. 0.6 GiB. TP adds NON_TORCH_TP_MIB as in the current model.
WHOLE_DEVICE_NON_TORCH_MIB = 350
# RCCL's buffers on AMD Instinct with TP > 1, in place of NON_TORCH_TP_MIB. Estimate, fitted
# on the one default-settings figure a log states: non_torch_memory=8.02GiB (whole device,
# 0.6.4.dev5, MI300X TP8, repo-llama-3.1-8b-instruct-mi300x-tp8.yaml) less the TP1 figure
# above. How it scales with the TP size is not known; it is used for every TP > 1.
ROCM_TP_NON_TORCH_MIB = 7850
# V0 profiling run, sampler phase (sampler.py Sampler.forward / _apply_top_k_top_p): the releases
# where the sampler casts the logits to float32 first (`logits = logits.to(torch.float)`: absent
# in 0.4.1 .. 0.5.4, present in 0.5.5 .. 0.7.1), and where the top-p step scatters into a new
# tensor instead of building an int64 inverse index and gathering (gather in 0.4.1 .. 0.6.1,
# `torch.empty_like(logits_sort).scatter_` in 0.6.2 .. 0.7.1); wheels read.
SAMPLER_FP32_SINCE = "0.5.5"
SAMPLER_SCATTER_SINCE = "0.6.2"


def sampler_bytes_per_logit(version: str, b: float) -> float:
    """Bytes per element of the [rows, vocab] logits alive at the end of _apply_top_k_top_p,
    the sampler's largest set (later phases hold fewer), counted op by op; `b`: the model
    dtype's size (the LM head's logits). Beside the caller's logits b (execute_model holds
    them) and, from SAMPLER_FP32_SINCE, their float32 copy x = 4: sorted values x, sort
    indices 8, top-k and top-p masks 1 + 1, probs_sort x, cumsum x, then the inverse index 8
    and gathered logits x (or, from SAMPLER_SCATTER_SINCE, the scattered logits x).
    0.4.1 bf16: 5 x 2 + 18 = 28; 0.6.2 on: 2 + 30 = 32. The sort's own workspace and the
    caching allocator's pool (the peak is free memory before minus after) are not counted;
    FlashInfer's sampler (taken in 0.5.5 on when it is installed) is not modelled."""
    x = 4.0 if at_least(version, SAMPLER_FP32_SINCE) else b
    copy = x if x != b else 0.0  # .to(torch.float) of float32 logits returns them
    tail = x if at_least(version, SAMPLER_SCATTER_SINCE) else 8 + x
    return b + copy + x + 8 + 2 + 2 * x + tail


# Architectures whose V0 MLP keeps gate_up_proj's output alive through down_proj (`gate_up, _ =
# self.gate_up_proj(x); x = self.act_fn(gate_up); x, _ = self.down_proj(x)`), by the releases
# whose model file does: [first, end). Llama rebinds x from 0.6.4 (vLLM PR #10339; llama.py of
# 0.4.1 and 0.6.3.post1 keep gate_up, 0.6.4, 0.6.4.post1, 0.6.5 and 0.7.1 do not); Qwen2 keeps it
# in every wheel read (0.4.1 .. 0.7.1; later releases not read). A development build counts as
# before its release (0.6.4.dev5 < 0.6.4), as its logged peak shows.
MLP_KEEPS_GATE_UP: dict[str, tuple[str, str]] = {
    "LlamaForCausalLM": ("0.4.0", "0.6.4"),
    "Qwen2ForCausalLM": ("0.4.0", "0.7.2"),
}


def keeps_gate_up(architecture: str, version: str | None) -> bool:
    """Whether the release's MLP holds gate_up's output while down_proj runs (MLP_KEEPS_GATE_UP;
    `version` as logged, a development build before its release)."""
    span = MLP_KEEPS_GATE_UP.get(architecture)
    if span is None or version is None:
        return False
    v = Version(version)
    return Version(span[0]) <= v < Version(span[1])


def v0_activation_bytes(
    card: ModelCard,
    tp: int,
    tokens: int,
    seqs: int,
    version: str | None = None,
    ep: bool = False,
) -> int:
    """Peak of V0's profiling run above the weights (estimate): the larger of the forward pass
    over `tokens` and the sampler over `seqs` rows of the full vocabulary
    (sampler_bytes_per_logit) with the final hidden states. The forward's peak is at the MLP:
    the layer's input (the model's loop `hidden_states, residual = layer(...)` holds it through
    the call), the residual, the MLP's input, gate_up 2I and SiluAndMul's I; where the release's
    MLP keeps gate_up alive (keeps_gate_up) down_proj's output h adds to them. MoE: the expert
    MLP's phase with fused_moe's workspace by release (vllm_moe.moe_phase_bytes; `ep`: expert
    parallelism)."""
    b = DTYPE_BYTES.get(card.dtype, 2.0)
    h = card.hidden_size
    q = card.num_attention_heads * card.head_dim // tp
    kv = 2 * max(1, card.num_kv_heads // tp) * card.head_dim
    per_token = 3 * h + 2 * q + kv  # qkv, attention output, o_proj out, hidden, residual
    if card.experts is None or card.experts.moe_layers < card.num_layers:
        mlp = 3 * card.intermediate_size // tp + 3 * h
        if keeps_gate_up(card.architecture, version):
            mlp += h
        per_token = max(per_token, mlp)
    fwd = max(tokens * per_token * b, moe_phase_bytes(card, tp, tokens, version or "0.4.0", ep))
    per_logit = sampler_bytes_per_logit(version or "0.4.0", b)
    sampler = per_logit * min(seqs, tokens) * card.vocab_size + tokens * h * b
    return int(max(fwd, sampler))


def non_torch_mib(
    engine: Engine, version: str, tp: int, vendor: str, arch: str = "", gpu: GPUSpec | None = None
) -> int:
    """Non-torch memory the release subtracts: NCCL / cuBLAS / custom all-reduce, plus the CUDA
    context where it measures the whole device (V0 0.6.4, V1 before 0.9.1). On an NVSwitch node
    the TP group's NCCL buffers grow past the TP 2 figure with the ranks (nccl_memory)."""
    tp_mib = (ROCM_TP_NON_TORCH_MIB if vendor == "amd" else NON_TORCH_TP_MIB) if tp > 1 else 0
    if tp > 1 and arch == "sm_90":
        tp_mib = HOPPER_TP_NON_TORCH_MIB + (vllm_tp_growth_mib(gpu, tp, version) if gpu else 0)
    whole = engine == "v1" or (at_least(version, "0.6.4") and not at_least(version, "0.6.5"))
    return (WHOLE_DEVICE_NON_TORCH_MIB if whole else NON_TORCH_MIB) + tp_mib


def history_weights_gib(
    card: ModelCard, cfg: dict[str, Any], tp: int, version: str | None = None
) -> float:
    """Weights on the busiest rank of vLLM `version`: the heaviest pipeline stage (stage_share of
    the decoder and of the parts every TP rank holds whole, and the larger of the embedding and
    the LM head). Online `--quantization fp8` and `--dtype` are already in the card
    (vllm_dtype.launch_card)."""
    w = card.weights
    decoder = w.decoder
    pp = int(cfg.get("pipeline_parallel_size") or 1)
    if pp == 1:
        return vllm_weights_bytes(card, cfg, tp, load_mtp=False, version=version) / GIB
    share = stage_share(card, pp, version)
    sharded = int(decoder * share) + max(w.embed_tokens, w.lm_head)
    vision = vision_per_rank(w, tp, shards_vision(card, cfg, version))
    whole = vision + int(w.replicated * share) + rope_cache_bytes(card)
    return ((sharded + w.load_overhead) // tp + whole) / GIB


def stage_share(card: ModelCard, pp: int, version: str | None = None) -> float:
    """The heaviest pipeline stage's share of the decoder on vLLM `version` (estimate, by
    parameters: vllm_pipeline.layer_weights; the split: vllm_pipeline.pp_partition). Before
    0.8.0 the last stage takes the remainder: DeepSeek-V3's last stage of two, 31 expert
    layers."""
    weight, start, shares = layer_weights(card), 0, []
    for size in pp_partition(card.num_layers, pp, version=version):
        shares.append(sum(weight[start : start + size]))
        start += size
    return max(shares) / sum(weight)


def history_startup(
    gpu: GPUSpec,
    cfg: dict[str, Any],
    gpu_free_gib: float | None,
    assumptions: list[str],
    version: str,
) -> StartupMemory:
    """Total memory, free memory at startup (what the KV cache and graphs are allocated from)
    and the utilisation; these releases start without comparing free memory to the request."""
    mem = startup_figures(gpu, cfg, gpu_free_gib, assumptions, version)
    assumptions.append(
        "no startup free-memory check before 0.9.1: the KV budget is gpu_memory_utilization x "
        "total memory, whatever else the GPU holds"
    )
    return mem


def history_limits(
    card: ModelCard,
    gpu: GPUSpec,
    cfg: dict[str, Any],
    version: str,
    engine: Engine,
    reasons: list[str],
    assumptions: list[str],
) -> BatchLimits:
    """max_num_seqs, max_model_len, chunked prefill and max_num_batched_tokens by release."""
    derived = derived_max_model_len(card, version)
    max_len = int(cfg.get("max_model_len") or derived)
    if engine == "v1":  # chunked prefill always on
        seqs, tokens = v1_defaults(gpu, version)
        seqs = int(cfg.get("max_num_seqs") or seqs)
        return BatchLimits(seqs, max_len, True, int(cfg.get("max_num_batched_tokens") or tokens))
    seqs = int(cfg.get("max_num_seqs") or 256)
    given = cfg.get("enable_chunked_prefill")
    chunked = auto_chunked_prefill(card, gpu, cfg, version, max_len) if given is None else given
    tokens = int(
        cfg.get("max_num_batched_tokens")
        or v0_batched_tokens(card, cfg, version, bool(chunked), (seqs, max_len))
    )
    if chunked and mla_active(card, version) and not at_least(version, "0.8.0"):
        chunked = False  # VllmConfig turns it off for MLA, keeping the budget (0.7.1 .. 0.7.3)
        assumptions.append("MLA: vLLM turns chunked prefill off, max_num_batched_tokens kept")
    elif not chunked and tokens < max_len:
        reasons.append(
            f"max_num_batched_tokens ({tokens}) is smaller than max_model_len ({max_len}) "
            "with chunked prefill off: vLLM rejects it"
        )
    if tokens < seqs:
        reasons.append(
            f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs "
            f"({seqs}): vLLM rejects it"
        )
    rs = card.rope_scaling
    if rs is not None and derived != card.max_position_embeddings and not cfg.get("max_model_len"):
        assumptions.append(
            f"max_model_len {derived}: vLLM {version} scales the config's length by its "
            f"{rs.kind} rope-scaling factor {rs.factor:g}"
        )
    if max_len > derived:
        assumptions.append(
            f"max_model_len {max_len} exceeds the model's {derived}: vLLM "
            "refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
        )
    return BatchLimits(seqs, max_len, bool(chunked), tokens)


def history_spec(cfg: dict[str, Any], version: str, assumptions: list[str]) -> SpecDecode:
    """The speculative settings as given; the draft's weights and KV are not modelled here."""
    spec, method, num = speculative_settings(cfg)
    if method:
        assumptions.append(
            f"speculative decoding ({method}) on vLLM {version}: the draft's weights, KV cache "
            "and profiling memory are not counted"
        )
    return SpecDecode(spec, method, num, False, 0)


def history_memory(
    card: ModelCard,
    gpu: GPUSpec,
    cfg: dict[str, Any],
    version: str,
    engine: Engine,
    tp: int,
    limits: BatchLimits,
    startup: StartupMemory,
    reasons: list[str],
    *,
    build: str | None = None,
) -> ProfiledMemory:
    """Weights, profiling peak, non-torch memory and the KV memory they leave (module
    docstring); graphs the headroom cannot hold are a reason. `build`: the version as given
    (plan_history)."""
    tokens, seqs = limits.max_num_batched_tokens, limits.max_num_seqs
    weights = history_weights_gib(card, cfg, tp, version)
    ep = expert_parallel(cfg, tp)
    if engine == "v0":
        act = v0_activation_bytes(card, tp, tokens, seqs, build or version, ep) / GIB
    else:  # logits over every token up to 0.7.2, over the requests from 0.7.3
        rows = seqs if at_least(version, "0.7.3") else tokens
        text = activation_bytes(card, tp, tokens, rows, version, gpu.sm_count)  # before 0.10
        # The expert MLP's workspace (fused_moe's caches, vllm_moe.py) where it is larger.
        act = max(text, moe_phase_bytes(card, tp, tokens, version, ep)) / GIB
    non_torch = non_torch_mib(engine, version, tp, gpu.vendor, gpu.arch, gpu) / 1024
    sizes = (
        [] if cfg.get("enforce_eager") else history_capture_sizes(engine, version, seqs, tokens)
    )
    given = cfg.get("cudagraph_capture_sizes")
    if given and sizes:
        sizes = sorted({int(s) for s in given})
    graph = (GRAPH_BASE_MIB + GRAPH_PER_GRAPH_MIB * (len(sizes) - 1)) / 1024 if sizes else 0.0
    kv_mem = startup.requested_gib - weights - act - non_torch
    headroom = startup.headroom_gib
    if startup.init_free_gib < startup.requested_gib - act:  # activations are freed first
        reasons.append(
            f"only {startup.init_free_gib:.2f} GiB is free at startup and vLLM {version} sizes "
            f"the KV cache to fill {startup.requested_gib:.2f} GiB without checking: allocating "
            "it runs out of memory; lower gpu_memory_utilization"
        )
    elif graph > 0 and headroom < graph:
        reasons.append(
            f"CUDA graphs (~{graph:.2f} GiB) are captured outside gpu_memory_utilization on "
            f"vLLM {version}, and only {max(headroom, 0):.2f} GiB is left above it: graph "
            "capture would run out of memory; lower gpu_memory_utilization or use enforce_eager"
        )
    return ProfiledMemory(weights, act, non_torch, sizes, graph, False, kv_mem)


def history_layout(
    card: ModelCard,
    gpu: GPUSpec,
    cfg: dict[str, Any],
    version: str,
    engine: Engine,
    tp: int,
    limits: BatchLimits,
    mem: ProfiledMemory,
) -> KVLayout:
    """One KV group of every attention layer on the pipeline stage holding the most of them
    (sliding-window layers sized as full attention); tokens = blocks x block_size."""
    bs = history_block_size(card, gpu, cfg, version)
    a1 = history_bytes_per_token(card, cfg, version, engine, tp)
    pp = int(cfg.get("pipeline_parallel_size") or 1)
    stages = pipeline_stages(card, pp, version=version)
    layers = max(len(s.card.full_attention_layers) for s in stages)
    per_block = bs * a1 * layers
    blocks = max(int(max(mem.kv_cache_gib, 0.0) * GIB // per_block), 0) if per_block else 0
    max_len = limits.max_model_len
    return KVLayout(
        block_size=bs,
        attn_bytes_per_token=a1,
        attention_layers=layers,
        conv_bytes=0,
        ssm_bytes=0,
        page_bytes=bs * a1,
        layers_per_group=layers,
        full_groups=1,
        mamba_groups=0,
        mamba_mode="n/a",
        mamba_blocks=0,
        num_blocks=blocks,
        blocks_per_request=-(-max_len // bs),
        concurrency=blocks * bs / max_len,
        kv_tokens=blocks * bs,
        estimated_max_model_len=min(blocks * bs, max_len),
    )


def check_history_fit(
    lay: KVLayout,
    limits: BatchLimits,
    engine: Engine,
    kv_gib: float,
    reasons: list[str],
    assumptions: list[str],
) -> None:
    """No blocks, or fewer tokens than max_model_len, is a reason (the release's errors: V0's
    raise_if_cache_size_invalid, V1's check_enough_kv_cache_memory)."""
    max_len, tokens = limits.max_model_len, lay.kv_tokens
    advice = "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
    if lay.num_blocks <= 0:
        reasons.append(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine."
        )
    elif tokens < max_len and engine == "v0":
        reasons.append(
            f"The model's max seq len ({max_len}) is larger than the maximum number of tokens "
            f"that can be stored in KV cache ({tokens}). {advice}initializing the engine."
        )
    elif tokens < max_len:
        needed = lay.blocks_per_request * lay.block_bytes / GIB
        reasons.append(
            f"To serve at least one request with the models's max seq len ({max_len}), "
            f"({needed:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({kv_gib:.2f} GiB). {advice}initializing the engine."
        )
    if 0 < lay.concurrency < limits.max_num_seqs:
        assumptions.append(
            f"only {lay.concurrency:.2f} requests of max_model_len fit at once: with "
            f"{limits.max_num_seqs} long requests vLLM preempts (recomputes) some"
        )


def plan_history(
    card: ModelCard,
    gpu: GPUSpec,
    cfg: dict[str, Any],
    *,
    version: str,
    tp: int,
    gpu_free_gib: float | None,
    reasons: list[str],
    assumptions: list[str],
    build: str | None = None,
) -> PlanParts:
    """The plan's parts for a release before the current model, or a V0 launch of 0.9.x.
    `build`: the version as given, a development build's own (a rule that changed within a
    release's development, MLP_KEEPS_GATE_UP, reads it); `version` is the release planned."""
    engine = engine_of(card, gpu, cfg, version, assumptions)
    startup = history_startup(gpu, cfg, gpu_free_gib, assumptions, version)
    limits = history_limits(card, gpu, cfg, version, engine, reasons, assumptions)
    check_history_architecture(card, version, reasons)
    spec = history_spec(cfg, version, assumptions)
    given = cfg.get("enable_prefix_caching")
    prefix = engine == "v1" if given is None else bool(given)
    assumptions.append(f"enable_prefix_caching: {prefix} (vLLM {version}, {engine.upper()})")
    if card.is_multimodal:
        # V0's encoder-decoder profile run (enc_dec_model_runner.profile_run) gives each of
        # max_num_seqs dummy sequences its own dummy images (limit_mm_per_prompt, 1 by
        # default; Mllama: max_num_tiles tiles each), so the tower runs over max_num_seqs
        # images at once; its peak (dense SDPA masks, stacked intermediate layers,
        # cross-attention states) is not derived here.
        why = f" (V0 profiles {limits.max_num_seqs} dummy images at once, one per sequence)"
        assumptions.append(
            "the vision encoder's share of the profiling run is not modelled"
            + (why if engine == "v0" else "")
        )
    mem = history_memory(
        card, gpu, cfg, version, engine, tp, limits, startup, reasons, build=build or version
    )
    nccl_note = extrapolated_channels_note(gpu, tp, version)
    if nccl_note:
        assumptions.append(nccl_note)
    lay = history_layout(card, gpu, cfg, version, engine, tp, limits, mem)
    check_history_fit(lay, limits, engine, mem.kv_cache_gib, reasons, assumptions)
    return PlanParts(startup, limits, spec, prefix, mem, lay)
