"""Predict what a vLLM (V1 engine, 0.10.0 .. 0.33.0) launch gets on one GPU, and whether it fits.

Mirrors vLLM's own accounting per rank (vllm/v1/worker/gpu_worker.py, v1/core/kv_cache_utils.py):

    requested = gpu_memory_utilization * TOTAL memory      (not free memory: a desktop or another
                                                            process makes startup fail)
    kv_memory = requested - weights - peak activations of the profiling run (max_num_batched_tokens
                tokens, max_num_seqs sampled rows) - non-torch memory (NCCL, cuBLAS, custom
                all-reduce) - CUDA graph memory (profiled and subtracted from 0.20.0, or with
                VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 on 0.18/0.19; before, graphs live in
                the headroom above `requested`)
    num_blocks = kv_memory // (page_bytes * layers_per_tensor)

Dense models: one KV group; page = block_size (16) * per-token-per-layer bytes; every attention
layer has its own tensor. Hybrid models (Qwen3.5/3.8 Gated DeltaNet, F1): vLLM's hybrid KV cache
manager raises the attention block size until one page holds one layer's GDN state
(platforms/interface.py _align_hybrid_block_size: 16 * cdiv(mamba_page, 16 * attn_bytes_per_token),
784 tokens at TP1 bf16 for Qwen3.8), pads the mamba page to the same size, and groups layers so
each group has as many layers as the full-attention type (16; 17 with an MTP draft layer): 1
full-attention group + cdiv(48, 16) = 3 GDN groups share one block pool. A request at
max_model_len takes cdiv(max_model_len, block_size) blocks of the attention group and, per GDN
group, 1 block (mamba cache mode none) or 2 (align: prefix caching on) plus one per speculative
token. So vLLM has no separate mamba pool: `mamba_slots` here is how many running requests' state
the pool holds (at most max_num_seqs), `mamba_pool_gib` the memory those take.

Logged KV capacity ("GPU KV cache size: N tokens", what the adapter parses into kv_pool_tokens):
num_blocks // num_groups * block_size up to 0.19.1, int(max_concurrency * max_model_len) from
0.20.0; max_concurrency = num_blocks / blocks per max_model_len request.

Calibrated on public startup logs (tests/planner/test_vllm.py): Qwen3.5-27B on 0.19.0 (290,864
tokens, 33.04x), Qwen3.6-35B-A3B fp8 KV with prefix caching on 0.24.0 (5.98 GiB -> 567,978
tokens, 4.33x), Qwen3.6-27B TP2 fp8 KV on a 0.2x release (9.84 GiB -> 619,202 tokens, 2.36x),
Qwen3.8-27B fp8 KV (block 1568, padding 0.13 %), and the CUDA-graph capture counts of two logs.
The activation and non-torch terms are estimates (documented constants), not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from autotune.errors import ConfigError
from autotune.hardware.gpus import GPUSpec
from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner.sglang import Plan, weights_per_rank

GIB = 2**30
MIB = 2**20

# Free memory at vLLM's initial snapshot = capacity - CUDA context - desktop share (F3). The
# snapshot is taken after the context exists, so the context only matters for the startup check
# (free >= requested) and for the headroom where graphs live before 0.20.
CUDA_CONTEXT_MIB = 500
# Memory outside torch's allocator that appears after the snapshot (cuBLAS workspaces, attention
# backend buffers; NCCL and custom all-reduce buffers with TP > 1).
NON_TORCH_MIB = 150
NON_TORCH_TP_MIB = 400
# Profiling-run activation workspace per token, in units of the widest per-token tensors on a
# rank (gate_up out, qkv, GDN in_proj), x2 for temporaries beside them (as the SGLang planner);
# plus the sampler's fp32 logits (and probabilities) for min(max_num_seqs, tokens) rows.
ACT_TENSORS_FACTOR = 2.0
LOGITS_COPIES = 2
# CUDA graph memory: first capture plus each further graph (fit to two public 0.2x logs:
# 5 graphs 0.09 GiB on Qwen3.6-27B TP2; 86 graphs 0.52 GiB on Qwen3-8B).
GRAPH_BASE_MIB = 64
GRAPH_PER_GRAPH_MIB = 5.5
DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE; FlashAttention kernels: multiples of 16
KERNEL_BLOCK_ALIGNMENT = 16
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9

# Bytes per element of each --kv-cache-dtype vLLM offers (scales of the quantized formats folded
# in approximately).
KV_DTYPE_BYTES = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
    "fp8_per_token_head": 1.0,
    "int8_per_token_head": 1.0,
    "nvfp4": 0.5 + 1 / 16,
}
_MTP_METHODS = {"mtp", "deepseek_mtp", "qwen3_next_mtp", "qwen3_5_mtp"}
# First release whose model registry has the hybrid architectures of FIELD-NOTES F1
# (vllm/model_executor/models/registry.py in each wheel).
ARCHITECTURE_SINCE = {
    "Qwen3NextForCausalLM": "0.10.2",
    "Qwen3_5ForConditionalGeneration": "0.17.0",
    "Qwen3_5MoeForConditionalGeneration": "0.17.0",
    "Qwen3_5ForCausalLM": "0.27.0",
    "Qwen3_5MoeForCausalLM": "0.27.0",
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
    kv_cache_gib: float = Field(description="'Available KV cache memory' as vLLM logs it")
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


def _kv_bytes(card: ModelCard, kv_dtype: str) -> float:
    if kv_dtype == "auto":
        return DTYPE_BYTES.get(card.dtype, 2.0)
    if kv_dtype not in KV_DTYPE_BYTES:
        raise ConfigError(
            f"unknown kv_cache_dtype {kv_dtype!r}; valid: auto, {', '.join(KV_DTYPE_BYTES)}",
            field="kv_cache_dtype",
        )
    return KV_DTYPE_BYTES[kv_dtype]


def attention_bytes_per_token(card: ModelCard, kv_dtype: str, tp: int) -> int:
    """K+V bytes of one token in ONE attention layer on one rank (FullAttentionSpec page / block)."""
    heads = max(1, card.num_kv_heads // tp)
    return int(heads * (card.head_dim + card.value_head_dim) * _kv_bytes(card, kv_dtype))


def mamba_page_bytes(
    card: ModelCard,
    tp: int,
    *,
    num_spec: int = 0,
    conv_dtype: str | None = None,
    ssm_dtype: str | None = None,
) -> tuple[int, int]:
    """(conv, ssm) bytes of one GDN layer's state on one rank (MambaStateShapeCalculator.
    gated_delta_net_state_shape: the conv window grows by the speculative tokens)."""
    la = card.linear_attention
    if la is None:
        return 0, 0
    conv_dim = la.num_key_heads * la.key_head_dim * 2 + la.num_value_heads * la.value_head_dim
    conv_b = DTYPE_BYTES[conv_dtype or card.dtype]
    conv = int(conv_dim // tp * (la.conv_kernel - 1 + num_spec) * conv_b)
    ssm_b = DTYPE_BYTES[ssm_dtype or la.ssm_dtype]
    ssm = int(la.num_value_heads // tp * la.value_head_dim * la.key_head_dim * ssm_b)
    return conv, ssm


def hybrid_block_size(attn_per_token: int, mamba_page: int, block_size: int) -> int:
    """The attention block size vLLM settles on for a hybrid model: the smallest multiple of
    the kernel alignment whose page holds one mamba state, unless the user's is larger."""
    align = max(KERNEL_BLOCK_ALIGNMENT, block_size)
    needed = align * -(-mamba_page // (align * attn_per_token))
    return max(block_size, needed)


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


def activation_bytes(card: ModelCard, tp: int, tokens: int, num_reqs: int) -> int:
    """Peak activations of the profiling run (estimate, see module constants)."""
    widths = (2 * card.intermediate_size) // tp + 2 * card.hidden_size
    la = card.linear_attention
    if la is not None:
        widths += (
            2 * la.num_key_heads * la.key_head_dim + 2 * la.num_value_heads * la.value_head_dim
        ) // tp
    act = int(tokens * widths * 2 * ACT_TENSORS_FACTOR)
    logits = int(min(num_reqs, tokens) * card.vocab_size * 4 * LOGITS_COPIES)
    return act + logits


@dataclass(frozen=True)
class KVLayout:
    """How vLLM lays out the KV cache for a model, and what a given KV budget holds."""

    block_size: int
    attn_bytes_per_token: int  # one attention layer, one rank
    attention_layers: int  # target full-attention layers + MTP draft layers
    conv_bytes: int  # one GDN layer's conv state
    ssm_bytes: int  # one GDN layer's SSM state
    page_bytes: int  # block_size * attn_bytes_per_token (>= the GDN state, padded to it)
    layers_per_group: int  # tensors sharing one block id (KV cache group size)
    full_groups: int
    mamba_groups: int
    mamba_mode: str  # none / align (prefix caching) / n/a (dense)
    mamba_blocks: int  # blocks per request per GDN group
    num_blocks: int
    blocks_per_request: int  # at max_model_len
    concurrency: float
    kv_tokens: int  # as "GPU KV cache size: N tokens" logs it for the version
    estimated_max_model_len: int

    @property
    def mamba_state_bytes(self) -> int:
        return self.conv_bytes + self.ssm_bytes

    @property
    def groups(self) -> int:
        return self.full_groups + self.mamba_groups

    @property
    def block_bytes(self) -> int:
        """Memory one block id takes across the tensors of a group."""
        return self.page_bytes * self.layers_per_group


def kv_layout(
    card: ModelCard,
    *,
    version: str,
    tp: int,
    kv_dtype: str,
    max_model_len: int,
    kv_memory_bytes: float,
    prefix_caching: bool,
    block_size: int = DEFAULT_BLOCK_SIZE,
    num_spec: int = 0,
    draft_layers: int = 0,
    conv_dtype: str | None = None,
    ssm_dtype: str | None = None,
) -> KVLayout:
    """vLLM's KV cache arithmetic for `kv_memory_bytes` ("Available KV cache memory")."""
    from autotune.engines.vllm.flags import at_least

    a1 = attention_bytes_per_token(card, kv_dtype, tp)
    n_full = len(card.full_attention_layers) + draft_layers
    n_lin = len(card.linear_layers)
    conv_b = ssm_b = 0
    if card.is_hybrid:
        conv_b, ssm_b = mamba_page_bytes(
            card, tp, num_spec=num_spec, conv_dtype=conv_dtype, ssm_dtype=ssm_dtype
        )
        block_size = hybrid_block_size(a1, conv_b + ssm_b, block_size)
        # _get_kv_cache_groups_uniform_page_size: the smaller layer count is the group size,
        # unless the larger is within 1.5x of it.
        lo, hi = min(n_full, n_lin), max(n_full, n_lin)
        group = hi if hi < 1.5 * lo else lo
        full_groups, mamba_groups = -(-n_full // group), -(-n_lin // group)
        mode = "align" if prefix_caching else "none"
        mamba_blocks = (2 if prefix_caching else 1) + num_spec
    else:
        group, full_groups, mamba_groups, mode, mamba_blocks = n_full, 1, 0, "n/a", 0
    page = block_size * a1
    per_block = page * group
    num_blocks = max(int(kv_memory_bytes // per_block), 0) if per_block else 0
    per_request = -(-max_model_len // block_size) * full_groups + mamba_groups * mamba_blocks
    concurrency = num_blocks / per_request if per_request else 0.0
    if at_least(version, "0.20.0"):
        tokens = int(concurrency * max_model_len)  # get_kv_cache_capacity
    else:
        tokens = num_blocks // (full_groups + mamba_groups) * block_size
    est = max((num_blocks - mamba_groups * mamba_blocks) // full_groups, 0) * block_size
    return KVLayout(
        block_size=block_size,
        attn_bytes_per_token=a1,
        attention_layers=n_full,
        conv_bytes=conv_b,
        ssm_bytes=ssm_b,
        page_bytes=page,
        layers_per_group=group,
        full_groups=full_groups,
        mamba_groups=mamba_groups,
        mamba_mode=mode,
        mamba_blocks=mamba_blocks,
        num_blocks=num_blocks,
        blocks_per_request=per_request,
        concurrency=concurrency,
        kv_tokens=tokens,
        estimated_max_model_len=min(est, max_model_len) if num_blocks else 0,
    )


def _defaults(total_mib: int, gpu_name: str, version: str) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) for `vllm serve` by GPU size (EngineArgs.
    _set_default_args: 70 GiB+ cards other than A100 get the larger pair; from 0.28.0 cards of
    160 GiB+ batch 16384 tokens)."""
    from autotune.engines.vllm.flags import at_least

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
    fields); missing keys mean "engine decides". host_free_gib is accepted for a uniform call
    with plan_sglang and unused (vLLM keeps no host KV pool here).

    Raises:
        ConfigError: an unsupported version, a TP size that disagrees with the config, or an
            unknown kv_cache_dtype.
    """
    from autotune.engines.vllm.flags import at_least, parse_version, speculative_config

    del host_free_gib
    cfg = dict(config or {})
    version = parse_version(version)
    cfg_tp = cfg.get("tensor_parallel_size", cfg.get("tp_size"))
    if cfg_tp is not None and int(cfg_tp) != tp:
        if tp != 1:
            raise ConfigError(
                f"tensor_parallel_size={cfg_tp} in the config but tp={tp} given",
                field="tensor_parallel_size",
            )
        tp = int(cfg_tp)
    reasons: list[str] = []
    assumptions: list[str] = []

    total_gib = gpu.memory_mib / 1024
    if gpu_free_gib is not None:
        init_free = float(gpu_free_gib)
        assumptions.append(f"free memory at startup given: {init_free:.2f} GiB")
    else:
        reserve = CUDA_CONTEXT_MIB + gpu.desktop_reserve_mib
        init_free = (gpu.memory_mib - reserve) / 1024
        assumptions.append(
            f"free memory at startup = {gpu.memory_mib} MiB - CUDA context {CUDA_CONTEXT_MIB} "
            f"MiB - desktop {gpu.desktop_reserve_mib} MiB"
        )
    gmu = float(cfg.get("gpu_memory_utilization") or DEFAULT_GPU_MEMORY_UTILIZATION)
    requested = total_gib * gmu
    if init_free < requested:
        reasons.append(
            f"Free memory on device ({init_free:.2f}/{total_gib:.2f} GiB) on startup is less "
            f"than desired GPU memory utilization ({gmu}, {requested:.2f} GiB): lower "
            "gpu_memory_utilization"
        )

    seqs_default, tokens_default = _defaults(gpu.memory_mib, gpu.name, version)
    max_num_seqs = int(cfg.get("max_num_seqs") or seqs_default)
    max_len = int(cfg.get("max_model_len") or card.max_position_embeddings)
    chunked = cfg.get("enable_chunked_prefill") is not False
    if cfg.get("max_num_batched_tokens"):
        max_tokens = int(cfg["max_num_batched_tokens"])
    else:
        max_tokens = tokens_default if chunked else max(max_len, tokens_default)
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
    since = ARCHITECTURE_SINCE.get(card.architecture)
    if since is not None and not at_least(version, since):
        reasons.append(
            f"{card.architecture} is not in vLLM {version}'s model registry (it is from "
            f"{since}; a text-only Qwen3.5 pack can declare Qwen3_5ForConditionalGeneration)"
        )

    # speculative decoding
    spec = speculative_config(cfg, version) or {}
    method = spec.get("method")
    num_spec = int(spec.get("num_speculative_tokens") or 0) if method else 0
    mtp = method in _MTP_METHODS
    if mtp and not card.has_mtp and not spec.get("model"):
        reasons.append(
            f"speculative method {method} needs MTP weights; {card.name} has none (vllm#35548)"
        )
    draft_layers = card.mtp_layers if mtp and card.has_mtp else 0

    # prefix caching (hybrid models: default on from 0.26.0) and the mamba cache mode
    prefix = _truthy(cfg.get("enable_prefix_caching"))
    if prefix is None:
        prefix = not card.is_hybrid or at_least(version, "0.26.0")
        assumptions.append(f"enable_prefix_caching not set: vLLM {version} defaults to {prefix}")
    if card.is_hybrid and prefix and not chunked:
        reasons.append(
            "prefix caching on a hybrid model (mamba cache mode align) needs chunked prefill"
        )

    # weights, activations, non-torch, graphs
    weights = weights_per_rank(card, tp, load_mtp=mtp) / GIB
    act = activation_bytes(card, tp, max_tokens, max_num_seqs) / GIB
    non_torch = (NON_TORCH_MIB + (NON_TORCH_TP_MIB if tp > 1 else 0)) / 1024
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
    kv_mem = requested - weights - act - non_torch - (graph if in_budget else 0.0)
    headroom = init_free - requested
    if not in_budget and graph > 0 and headroom < graph:
        reasons.append(
            f"CUDA graphs (~{graph:.2f} GiB) are captured outside gpu_memory_utilization on "
            f"vLLM {version}, and only {max(headroom, 0):.2f} GiB is left above it: graph "
            "capture would run out of memory; lower gpu_memory_utilization or "
            "max_cudagraph_capture_size"
        )

    # KV layout
    kv_dtype = str(cfg.get("kv_cache_dtype") or "auto")
    conv_dtype, ssm_dtype = cfg.get("mamba_cache_dtype"), cfg.get("mamba_ssm_cache_dtype")
    lay = kv_layout(
        card,
        version=version,
        tp=tp,
        kv_dtype=kv_dtype,
        block_size=int(cfg.get("block_size") or DEFAULT_BLOCK_SIZE),
        max_model_len=max_len,
        kv_memory_bytes=max(kv_mem, 0.0) * GIB,
        prefix_caching=prefix,
        num_spec=num_spec,
        draft_layers=draft_layers,
        conv_dtype=None if conv_dtype in (None, "auto") else str(conv_dtype),
        ssm_dtype=None if ssm_dtype in (None, "auto") else str(ssm_dtype),
    )
    if lay.block_size != int(cfg.get("block_size") or DEFAULT_BLOCK_SIZE):
        assumptions.append(
            f"hybrid model: vLLM sets the attention block size to {lay.block_size} tokens so a "
            f"page ({lay.page_bytes} B) holds a GDN state ({lay.mamba_state_bytes} B)"
        )
    num_blocks, per_request, concurrency = lay.num_blocks, lay.blocks_per_request, lay.concurrency
    needed = per_request * lay.block_bytes / GIB
    est_len = lay.estimated_max_model_len
    if kv_mem <= 0:
        reasons.append(
            "No available memory for the cache blocks: weights "
            f"({weights:.2f} GiB), the profiling peak ({act:.2f} GiB) and the rest use all of "
            f"{requested:.2f} GiB; raise gpu_memory_utilization or lower max_num_batched_tokens"
        )
    elif num_blocks < per_request:
        reasons.append(
            f"To serve at least one request with the model's max seq len ({max_len}), "
            f"({needed:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({kv_mem:.2f} GiB). Based on the available memory, the estimated maximum "
            f"model length is {est_len}: lower max_model_len or raise gpu_memory_utilization"
        )
    if 0 < concurrency < max_num_seqs:
        assumptions.append(
            f"only {concurrency:.2f} requests of max_model_len fit at once: with {max_num_seqs} "
            "long requests vLLM preempts (recomputes) some"
        )

    mamba_per_req = lay.mamba_groups * lay.mamba_blocks
    slots = min(max_num_seqs, num_blocks // mamba_per_req) if mamba_per_req else 0
    n_lin = len(card.linear_layers)
    return VLLMPlan(
        weights_gib=round(weights, 3),
        kv_cell_bytes=lay.attn_bytes_per_token * lay.attention_layers,
        kv_pool_tokens=lay.kv_tokens,
        mamba_slots=slots,
        mamba_pool_gib=round(slots * mamba_per_req * lay.block_bytes / GIB, 3),
        max_running_requests=max_num_seqs,
        fits=not reasons,
        reasons=reasons,
        engine_version=version,
        model=card.name,
        gpu=gpu.name,
        tp=tp,
        kv_dtype=kv_dtype,
        pre_weights_free_gib=round(init_free, 3),
        mem_fraction_static=gmu,
        static_budget_gib=round(requested - weights, 3),
        kv_pool_gib=round(num_blocks * lay.block_bytes / GIB, 3),
        mamba_conv_gib=round(slots * lay.conv_bytes * n_lin / GIB, 3),
        mamba_ssm_gib=round(slots * lay.ssm_bytes * n_lin / GIB, 3),
        mamba_spec_gib=0.0,
        mamba_slot_mib=round(lay.mamba_state_bytes * n_lin / MIB, 2),
        slack_gib=round(headroom, 3),
        slack_needed_gib=round(0.0 if in_budget else graph, 3),
        chunked_prefill_size=max_tokens,
        cuda_graph_max_bs=max(sizes) if sizes else 0,
        context_len=max_len,
        mamba_strategy=lay.mamba_mode,
        slots_per_request=lay.mamba_blocks,
        radix_cache=prefix,
        overlap_schedule=False,
        mixed_chunk=chunked,
        speculative={"method": method, "num_speculative_tokens": num_spec or None, **spec},
        bound_by="user" if cfg.get("max_num_seqs") else "default",
        assumptions=assumptions,
        gpu_memory_utilization=gmu,
        total_gib=round(total_gib, 3),
        requested_gib=round(requested, 3),
        activation_gib=round(act, 3),
        non_torch_gib=round(non_torch, 3),
        graph_gib=round(graph, 3),
        graph_in_budget=in_budget,
        kv_cache_gib=round(kv_mem, 3),
        block_size=lay.block_size,
        num_gpu_blocks=num_blocks,
        kv_groups=lay.groups,
        layers_per_group=lay.layers_per_group,
        page_bytes=lay.page_bytes,
        blocks_per_request=per_request,
        max_concurrency=round(concurrency, 4),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_tokens,
        max_model_len=max_len,
        prefix_caching=prefix,
        kv_needed_gib=round(needed, 3),
        estimated_max_model_len=est_len,
        capture_sizes=sizes,
    )
