"""vLLM's hybrid KV cache manager for models with sliding-window layers (gpt-oss, Gemma 4), from
vllm/v1/core/kv_cache_utils.py and vllm/v1/kv_cache_interface.py of 0.10.0 .. 0.33.x.

Sliding-window layers get a SlidingWindowSpec, the rest a FullAttentionSpec; the manager is on
unless the user turns it off (chunked local attention turns it off by default, so Llama 4 stays
on the single-group path of vllm_kv). Per layer kind:

- page: block_size * KV heads * (K + V head width) * dtype bytes. Pages of different sizes are
  unified by raising the smaller page's block size by the ratio (unify_kv_cache_spec_page_size;
  Gemma 4: the 512-wide global layers with 2 KV heads have half the sliding layers' page, so
  they get 32-token blocks beside the sliding layers' 16).
- groups: the smaller layer count is the group size (the larger when within 1.5x of it), each
  kind cdiv(layers, group size) groups (_get_kv_cache_groups_uniform_page_size); one block id
  takes group size pages.
- a request at max_model_len holds cdiv(max_model_len, block) blocks of a full group and, of a
  sliding group, cdiv(min(window - 1 + tokens in flight, max_model_len), block) + 1
  (SlidingWindowSpec.max_admission_blocks_per_request): the tokens in flight are
  max_num_batched_tokens up to 0.25.x, from 0.26.0 max_in_flight_tokens (concurrent batches,
  2 with async scheduling, times max_num_batched_tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import ConfigError
from autotune.models.card import ModelCard
from autotune.planner.vllm_history import at_least

HYBRID_MANAGER_SINCE = "0.10.0"  # the V1 hybrid allocator (kv_cache_utils in the 0.10.0 wheel)


@dataclass(frozen=True)
class WindowGroups:
    """The KV cache groups of a full + sliding-window model on one rank."""

    block_size: int  # the smallest group block size (the logged capacity's unit up to 0.19.x)
    page_bytes: int  # every layer's page after unification
    layers_per_group: int
    full_groups: int
    window_groups: int
    full_blocks: int  # blocks per request of one full group
    window_blocks: int  # blocks per request of one sliding group
    cell_bytes: int  # KV bytes of one token over every attention layer (full-length pages)

    @property
    def blocks_per_request(self) -> int:
        return self.full_groups * self.full_blocks + self.window_groups * self.window_blocks


def uses_window_groups(card: ModelCard, version: str, hybrid_manager: bool = True) -> bool:
    """Whether vLLM gives the sliding-window layers their own groups: a sliding-window model
    without linear-attention layers, on a release with the hybrid manager, not turned off."""
    local = card.local_attention
    return (
        hybrid_manager
        and local is not None
        and local.kind == "sliding"
        and not card.is_hybrid
        and card.latent_attention is None
        and bool(card.global_layers)
        and at_least(version, HYBRID_MANAGER_SINCE)
    )


def window_groups(
    card: ModelCard,
    *,
    kv_bytes: float,
    tp: int,
    block_size: int,
    local_len: int,
    in_flight_tokens: int,
    draft_layers: int = 0,
) -> WindowGroups:
    """The groups and per-request blocks for `card` (uses_window_groups) at `local_len` tokens
    per request on this rank; `draft_layers` MTP layers count as full attention."""
    local = card.local_attention
    assert local is not None
    n_window = len(local.layers)
    n_full = len(card.global_layers) + draft_layers
    window_token = _token_bytes(
        card.num_kv_heads, card.head_dim, card.value_head_dim, kv_bytes, tp
    )
    ga = card.global_attention
    if ga is None:
        full_token = window_token
    else:  # Gemma 4: K and V both held even with k_eq_v (vLLM's Attention stores v = k)
        full_token = _token_bytes(ga.num_kv_heads, ga.head_dim, ga.head_dim, kv_bytes, tp)
    page = block_size * max(window_token, full_token)
    full_bs = _unified_block(block_size, full_token, page)
    window_bs = _unified_block(block_size, window_token, page)
    lo, hi = min(n_full, n_window), max(n_full, n_window)
    group = hi if hi < 1.5 * lo else lo
    held = min(local.window - 1 + in_flight_tokens, local_len)
    return WindowGroups(
        block_size=min(full_bs, window_bs),
        page_bytes=page,
        layers_per_group=group,
        full_groups=-(-n_full // group),
        window_groups=-(-n_window // group),
        full_blocks=-(-local_len // full_bs),
        window_blocks=-(-held // window_bs) + 1,
        cell_bytes=n_full * full_token + n_window * window_token,
    )


def in_flight_tokens(version: str, max_num_batched_tokens: int, async_scheduling: bool) -> int:
    """Tokens a sliding-window layer may hold beyond its window while steps are in flight
    (VllmConfig.max_in_flight_tokens from 0.26.0: 2 concurrent batches with async scheduling
    at pipeline size 1)."""
    if at_least(version, "0.26.0") and async_scheduling:
        return 2 * max_num_batched_tokens
    return max_num_batched_tokens


def _token_bytes(kv_heads: int, k_dim: int, v_dim: int, kv_bytes: float, tp: int) -> int:
    return int(max(1, kv_heads // tp) * (k_dim + v_dim) * kv_bytes)


def _unified_block(block_size: int, token_bytes: int, page: int) -> int:
    """The block size that makes this layer's page the largest one (the ratio must divide)."""
    own = block_size * token_bytes
    if page % own:
        raise ConfigError(
            f"page {own} B does not divide the largest page {page} B: vLLM pads such pages only "
            "for backends that index KV by block stride, which is not modelled"
        )
    return block_size * (page // own)


# vLLM's gemma4_mm.py (0.19.0+): a video item is at most 32 frames of 70 soft tokens plus
# boi, eoi and about 6 timestamp tokens; an image at most default_output_length (280).
_GEMMA4_VIDEO_TOKENS = 32 * (70 + 2 + 6)
MM_PREFIX_FLOOR_SINCE = "0.22.0"  # EngineArgs raises the default batch (arg_utils.py)


def mm_prefix_floor(card: ModelCard, version: str) -> int:
    """The smallest default max_num_batched_tokens vLLM allows a multimodal prefix-LM model:
    from 0.22.0 one whole item of its largest modality must fit in a batch (EngineArgs.
    _get_min_mm_batched_tokens; Gemma 4: a video, 2,496 tokens); 0 where no floor applies."""
    gemma4 = card.architecture.startswith("Gemma4")
    if not (gemma4 and card.mm_prefix_lm and card.is_multimodal):
        return 0
    return _GEMMA4_VIDEO_TOKENS if at_least(version, MM_PREFIX_FLOOR_SINCE) else 0
