"""Linear projections of a model, as the engines merge them (SGLang's fused layers).

Used for weight bytes (built-in cards), GEMM shapes (kernel tuning) and the checkpoint inspector.
N is the output width, K the input width, at TP 1. Column-parallel layers split N across TP
ranks, row-parallel layers split K.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from autotune.models.card import ModelCard


@dataclass(frozen=True)
class Projection:
    name: str  # SGLang's merged name: qkv_proj, o_proj, in_proj_qkvz, ...
    n: int
    k: int
    parallel: Literal["column", "row"]
    layers: int  # how many decoder layers carry it
    quantizable: bool = True  # in_proj_ba must stay unquantized (P10: Marlin size_n % 64)

    @property
    def params(self) -> int:
        return self.n * self.k * self.layers

    def at_tp(self, tp: int) -> tuple[int, int]:
        """(N, K) on one rank at tensor-parallel size tp."""
        if self.parallel == "column":
            return self.n // tp, self.k
        return self.n, self.k // tp


def projections(card: ModelCard) -> list[Projection]:
    h = card.hidden_size
    n_full = len(card.full_attention_layers)
    q_width = card.num_attention_heads * card.head_dim * (2 if card.attn_output_gate else 1)
    kv_width = card.num_kv_heads * (card.head_dim + card.value_head_dim)
    attn_out = card.num_attention_heads * card.value_head_dim
    out = [
        Projection("qkv_proj", q_width + kv_width, h, "column", n_full),
        Projection("o_proj", h, attn_out, "row", n_full),
    ]
    if card.block_pattern is not None:
        return out + _nemotron_h(card)
    la = card.linear_attention
    n_lin = len(card.linear_layers)
    if la is not None and n_lin:
        key_dim = la.num_key_heads * la.key_head_dim
        value_dim = la.num_value_heads * la.value_head_dim
        out += [
            Projection("in_proj_qkvz", 2 * key_dim + 2 * value_dim, h, "column", n_lin),
            Projection("in_proj_ba", 2 * la.num_value_heads, h, "column", n_lin, False),
            Projection("out_proj", h, value_dim, "row", n_lin),
        ]
    out += [
        Projection("gate_up_proj", 2 * card.intermediate_size, h, "column", card.num_layers),
        Projection("down_proj", h, card.intermediate_size, "row", card.num_layers),
    ]
    return out


def _nemotron_h(card: ModelCard) -> list[Projection]:
    """Nemotron-H's Mamba-2 in/out projections, its non-gated MLP blocks and the shared experts
    of its MoE blocks (routed experts are left out, as for the other MoE cards)."""
    h, la, plan = card.hidden_size, card.linear_attention, card.block_pattern or ""
    out: list[Projection] = []
    n_lin = len(card.linear_layers)
    if la is not None and n_lin:
        inner = la.num_value_heads * la.value_head_dim
        in_n = 2 * inner + 2 * la.num_key_heads * la.key_head_dim + la.num_value_heads
        out += [
            Projection("in_proj", in_n, h, "column", n_lin),
            Projection("out_proj", h, inner, "row", n_lin),
        ]
    n_mlp = plan.count("-")
    if n_mlp:
        out += [
            Projection("up_proj", card.intermediate_size, h, "column", n_mlp),
            Projection("down_proj", h, card.intermediate_size, "row", n_mlp),
        ]
    e = card.experts
    if e is not None and e.shared_intermediate_size and plan.count("E"):
        width = e.shared_intermediate_size
        out += [
            Projection("shared_experts.up_proj", width, h, "column", plan.count("E")),
            Projection("shared_experts.down_proj", h, width, "row", plan.count("E")),
        ]
    return out


def conv_state_params(card: ModelCard) -> int:
    """Depthwise conv1d weights of all linear-attention layers."""
    la = card.linear_attention
    if la is None:
        return 0
    conv_dim = la.num_value_heads * la.value_head_dim + 2 * la.num_key_heads * la.key_head_dim
    return conv_dim * la.conv_kernel * len(card.linear_layers)
