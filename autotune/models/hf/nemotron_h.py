"""Nemotron-H (NemotronHForCausalLM) blocks: one mixer or one MLP per layer, as the layer plan
(`hybrid_override_pattern`) says, with the parameters vLLM's nemotron_h.py builds for each.

- M: Mamba-2 (MambaMixer2): in_proj hidden -> 2 * inner + 2 * n_groups * state + heads (z, x,
  B, C, dt), out_proj inner -> hidden, a depthwise conv over x, B, C with a bias, A, D and
  dt_bias per head, and a gated RMSNorm over inner (inner = mamba_num_heads * mamba_head_dim).
- *: attention: q/k/v/o without biases.
- -: a non-gated MLP (relu2): up_proj and down_proj only.
- E: MoE: a router (plus its e_score_correction_bias), non-gated routed experts over the latent
  width when `moe_latent_size` is set (the card's `experts.latent_size`; Nemotron 3 Super's
  LatentMoE: fc1_latent_proj and fc2_latent_proj, ReplicatedLinear on every TP rank), else over
  hidden, and a non-gated shared
  expert of moe_shared_expert_intermediate_size x n_shared_experts over hidden.

Each block has its own RMSNorm. The counts are per part of a layer (the LayerParams fields of
layer_params), so a quantized pack's per-module rules apply as for the other architectures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.models.card import ModelCard


def mamba2_params(card: ModelCard, parts: dict[str, int]) -> None:
    """One Mamba-2 mixer's parameters added to `parts` (its linear_attention and kept parts);
    GraniteMoeHybrid's mixer is the same block."""
    la = card.linear_attention
    if la is None or la.kind != "mamba2":
        raise ValueError("a Nemotron-H M block needs the card's Mamba-2 linear_attention")
    h = card.hidden_size
    inner = la.num_value_heads * la.value_head_dim
    groups_state = 2 * la.num_key_heads * la.key_head_dim
    conv_dim = inner + groups_state
    parts["linear_attention"] += h * (2 * inner + groups_state + la.num_value_heads) + inner * h
    # conv weight and bias, A / D / dt_bias per head, the gated norm over inner
    parts["kept"] += conv_dim * (la.conv_kernel + 1) + 3 * la.num_value_heads + inner


def _attention(card: ModelCard, parts: dict[str, int]) -> None:
    h, heads, kv = card.hidden_size, card.num_attention_heads, card.num_kv_heads
    q = heads * card.head_dim
    parts["attention"] += h * (q + kv * (card.head_dim + card.value_head_dim))
    parts["attention"] += heads * card.value_head_dim * h


def _moe(card: ModelCard, parts: dict[str, int]) -> None:
    e = card.experts
    if e is None:
        raise ValueError("a Nemotron-H E block needs the card's experts")
    h = card.hidden_size
    width = e.latent_size or h
    parts["experts"] += 2 * width * e.moe_intermediate_size * e.num_experts
    parts["shared"] += 2 * h * e.shared_intermediate_size
    if e.latent_size is not None:  # vLLM builds both projections whenever the size is set
        parts["replicated"] += 2 * h * width
    parts["kept"] += h * e.num_experts + e.num_experts  # router and its correction bias


def block_parts(card: ModelCard, blocks: str) -> dict[str, int]:
    """Parameters per part of the blocks `blocks` (one letter each: a layer of the main stack,
    or the MTP layer's plan such as Super's '*E')."""
    parts = dict.fromkeys(
        ("attention", "linear_attention", "mlp", "shared", "experts", "kept", "replicated"), 0
    )
    for c in blocks:
        parts["kept"] += card.hidden_size  # the block's norm
        if c == "M":
            mamba2_params(card, parts)
        elif c == "*":
            _attention(card, parts)
        elif c == "-":
            parts["mlp"] += 2 * card.hidden_size * card.intermediate_size
        elif c == "E":
            _moe(card, parts)
    return parts


def shared_intermediate(config: Mapping[str, Any]) -> int | None:
    """The shared expert's width: moe_shared_expert_intermediate_size x n_shared_experts (as
    vLLM's NemotronHMoE builds it); None when the config is not Nemotron-H's."""
    width = config.get("moe_shared_expert_intermediate_size")
    if not isinstance(width, int):
        return None
    n = config.get("n_shared_experts")
    return width * n if isinstance(n, int) else 0  # none or 0: no shared expert
