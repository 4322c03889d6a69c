"""How vLLM (V1 engine) lays out the KV cache on one rank, and what a KV budget holds
(vllm/v1/core/kv_cache_utils.py).

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
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import ConfigError
from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_window import uses_window_groups, window_groups

DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE; FlashAttention kernels: multiples of 16
KERNEL_BLOCK_ALIGNMENT = 16

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


def kv_element_bytes(card: ModelCard, kv_dtype: str) -> float:
    """Bytes per KV element of `kv_dtype` ("auto": the model's dtype)."""
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
    mla = card.latent_attention
    if mla is not None:  # MLAAttentionSpec: one latent + rope key, not split across ranks
        return int((mla.kv_lora_rank + mla.qk_rope_head_dim) * kv_element_bytes(card, kv_dtype))
    heads = max(1, card.num_kv_heads // tp)
    return int(heads * (card.head_dim + card.value_head_dim) * kv_element_bytes(card, kv_dtype))


def mamba_page_bytes(
    card: ModelCard,
    tp: int,
    *,
    num_spec: int = 0,
    conv_dtype: str | None = None,
    ssm_dtype: str | None = None,
) -> tuple[int, int]:
    """(conv, ssm) bytes of one GDN or Mamba-2 layer's state on one rank
    (MambaStateShapeCalculator.gated_delta_net_state_shape / mamba2_state_shape: the conv window
    grows by the speculative tokens; Mamba-2 widens its groups to a multiple of TP when they do
    not divide, extra_groups_for_head_shards)."""
    la = card.linear_attention
    if la is None:
        return 0, 0
    groups = la.num_key_heads
    if la.kind in ("mamba2", "short_conv") and groups % tp:
        groups = tp
    conv_dim = groups * la.key_head_dim * 2 + la.num_value_heads * la.value_head_dim
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
    window_groups: int = 0  # sliding-window groups (vllm_window)
    cell_bytes: int | None = None  # KV bytes of one token over all layers, where they differ

    @property
    def mamba_state_bytes(self) -> int:
        return self.conv_bytes + self.ssm_bytes

    @property
    def groups(self) -> int:
        return self.full_groups + self.mamba_groups + self.window_groups

    @property
    def token_bytes(self) -> int:
        """KV bytes of one token over every attention layer on one rank."""
        return self.cell_bytes or self.attn_bytes_per_token * self.attention_layers

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
    context_parallel: int = 1,
    in_flight_tokens: int | None = None,
    separate_draft: tuple[int, int] | None = None,
) -> KVLayout:
    """vLLM's KV cache arithmetic for `kv_memory_bytes` ("Available KV cache memory").
    `context_parallel`: decode (x prefill) context parallel size; each rank keeps 1/cp of a
    request's tokens, so the logged capacity is cp times one rank's pool. `in_flight_tokens`
    (vllm_window.in_flight_tokens): given, a sliding-window model gets its window groups.
    `separate_draft`: (layers, K+V bytes per token per layer) of a draft model whose attention
    differs from the target's (a DFlash drafter), a KV cache type of its own (draft_groups)."""
    if in_flight_tokens is not None and uses_window_groups(card, version):
        return _window_layout(
            card,
            version=version,
            tp=tp,
            kv_dtype=kv_dtype,
            max_model_len=max_model_len,
            kv_memory_bytes=kv_memory_bytes,
            block_size=block_size,
            in_flight=in_flight_tokens,
            # a separate draft reaches here only as full attention of the target's own KV
            # cache type (vllm_draft.draft_kv)
            draft_layers=draft_layers + (separate_draft[0] if separate_draft else 0),
        )
    a1 = attention_bytes_per_token(card, kv_dtype, tp)
    n_full = len(card.full_attention_layers) + draft_layers
    n_lin = len(card.linear_layers)
    conv_b = ssm_b = 0
    n_d, a_d = separate_draft or (0, 0)
    if card.is_hybrid:
        conv_b, ssm_b = mamba_page_bytes(
            card, tp, num_spec=num_spec, conv_dtype=conv_dtype, ssm_dtype=ssm_dtype
        )
        block_size = hybrid_block_size(a1, conv_b + ssm_b, block_size)
        group, full_groups, mamba_groups = hybrid_groups(n_full, n_lin)
        mode = "align" if prefix_caching else "none"
        mamba_blocks = (2 if prefix_caching else 1) + num_spec
    else:
        group, full_groups, mamba_groups, mode, mamba_blocks = n_full, 1, 0, "n/a", 0
    page = block_size * a1
    draft = draft_groups(n_d, a_d, block_size, page, n_full, n_lin) if n_d else None
    d_groups, d_block = 0, block_size
    if draft is not None:
        group, full_groups, mamba_groups, d_groups, d_block = draft
        if not card.is_hybrid:  # one group, each layer its own page: the mean page here
            page = block_size * (n_full * a1 + n_d * a_d) // group
    per_block = page * group
    num_blocks = max(int(kv_memory_bytes // per_block), 0) if per_block else 0
    # AttentionSpec.max_memory_usage_bytes: a rank holds cdiv(max_model_len, cp) tokens.
    local_len = -(-max_model_len // context_parallel)
    per_request = -(-local_len // block_size) * full_groups + mamba_groups * mamba_blocks
    per_request += -(-local_len // d_block) * d_groups
    concurrency = num_blocks / per_request if per_request else 0.0
    tokens = logged_kv_tokens(
        version,
        num_blocks,
        concurrency,
        max_model_len,
        full_groups + d_groups + mamba_groups,
        block_size,
    )
    if not at_least(version, "0.20.0"):
        tokens *= context_parallel  # "Multiplying the GPU KV cache size by the dcp_world_size"
    est_groups = full_groups + -(-d_groups * block_size // d_block)
    est = max((num_blocks - mamba_groups * mamba_blocks) // est_groups, 0) * block_size
    return KVLayout(
        block_size=block_size,
        attn_bytes_per_token=a1,
        attention_layers=n_full,
        conv_bytes=conv_b,
        ssm_bytes=ssm_b,
        page_bytes=page,
        layers_per_group=group,
        full_groups=full_groups + d_groups,
        mamba_groups=mamba_groups,
        mamba_mode=mode,
        mamba_blocks=mamba_blocks,
        num_blocks=num_blocks,
        blocks_per_request=per_request,
        concurrency=concurrency,
        kv_tokens=tokens,
        estimated_max_model_len=min(est, max_model_len) if num_blocks else 0,
    )


def draft_groups(
    n_draft: int, draft_bytes: int, block_size: int, page: int, n_full: int, n_lin: int
) -> tuple[int, int, int, int, int] | None:
    """(layers per group, target full-attention groups, GDN groups, draft groups, draft block
    size) with a draft whose layers form a KV cache type of their own; None when vLLM would
    not lay it out this way (a draft page larger than the target's, or not dividing it).

    A dense target and such a draft are all full attention: one group of every layer
    (UniformTypeKVCacheSpecs), each with its own page. Beside GDN layers the page sizes are
    unified (unify_kv_cache_spec_page_size: a smaller page's block size is multiplied up to the
    largest page) and every type split into groups of the smallest type's layer count, or the
    largest's when that is under 1.5 times it (_get_kv_cache_groups_uniform_page_size)."""
    draft_page = block_size * draft_bytes
    if not n_lin:
        return n_full + n_draft, 1, 0, 0, block_size
    if draft_page <= 0 or draft_page > page or page % draft_page:
        return None
    d_block = block_size * (page // draft_page)
    counts = (n_full, n_draft, n_lin)
    lo, hi = min(counts), max(counts)
    group = hi if hi < 1.5 * lo else lo
    return group, -(-n_full // group), -(-n_lin // group), -(-n_draft // group), d_block


def hybrid_groups(n_full: int, n_lin: int) -> tuple[int, int, int]:
    """(layers per KV cache group, full-attention groups, GDN groups) of a hybrid model."""
    # _get_kv_cache_groups_uniform_page_size: the smaller layer count is the group size,
    # unless the larger is within 1.5x of it.
    lo, hi = min(n_full, n_lin), max(n_full, n_lin)
    group = hi if hi < 1.5 * lo else lo
    return group, -(-n_full // group), -(-n_lin // group)


def logged_kv_tokens(
    version: str,
    num_blocks: int,
    concurrency: float,
    max_model_len: int,
    groups: int,
    block_size: int,
) -> int:
    """KV capacity as "GPU KV cache size: N tokens" logs it on `version` (module docstring)."""
    if at_least(version, "0.20.0"):
        return int(concurrency * max_model_len)  # get_kv_cache_capacity
    return num_blocks // groups * block_size


def _window_layout(
    card: ModelCard,
    *,
    version: str,
    tp: int,
    kv_dtype: str,
    max_model_len: int,
    kv_memory_bytes: float,
    block_size: int,
    in_flight: int,
    draft_layers: int,
) -> KVLayout:
    """kv_layout for full + sliding-window layers (vllm_window's groups; no context parallel:
    vLLM's sliding-window spec refuses DCP)."""
    g = window_groups(
        card,
        kv_bytes=kv_element_bytes(card, kv_dtype),
        tp=tp,
        block_size=block_size,
        local_len=max_model_len,
        in_flight_tokens=in_flight,
        draft_layers=draft_layers,
    )
    per_block = g.page_bytes * g.layers_per_group
    num_blocks = max(int(kv_memory_bytes // per_block), 0)
    per_request = g.blocks_per_request
    concurrency = num_blocks / per_request if per_request else 0.0
    groups = g.full_groups + g.window_groups
    tokens = logged_kv_tokens(
        version, num_blocks, concurrency, max_model_len, groups, g.block_size
    )
    full_bs = g.page_bytes // max(attention_bytes_per_token_full(card, kv_dtype, tp), 1)
    est = max((num_blocks - g.window_groups * g.window_blocks) // g.full_groups, 0) * full_bs
    return KVLayout(
        block_size=g.block_size,
        attn_bytes_per_token=attention_bytes_per_token(card, kv_dtype, tp),
        attention_layers=len(card.full_attention_layers) + draft_layers,
        conv_bytes=0,
        ssm_bytes=0,
        page_bytes=g.page_bytes,
        layers_per_group=g.layers_per_group,
        full_groups=g.full_groups,
        mamba_groups=0,
        mamba_mode="n/a",
        mamba_blocks=0,
        num_blocks=num_blocks,
        blocks_per_request=per_request,
        concurrency=concurrency,
        kv_tokens=tokens,
        estimated_max_model_len=min(est, max_model_len) if num_blocks else 0,
        window_groups=g.window_groups,
        cell_bytes=g.cell_bytes,
    )


def attention_bytes_per_token_full(card: ModelCard, kv_dtype: str, tp: int) -> int:
    """K+V bytes of one token in one full (global) attention layer on one rank."""
    ga = card.global_attention
    if ga is None:
        return attention_bytes_per_token(card, kv_dtype, tp)
    return int(max(1, ga.num_kv_heads // tp) * 2 * ga.head_dim * kv_element_bytes(card, kv_dtype))
