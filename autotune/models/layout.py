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


def conv_state_params(card: ModelCard) -> int:
    """Depthwise conv1d weights of all linear-attention layers."""
    la = card.linear_attention
    if la is None:
        return 0
    conv_dim = la.num_value_heads * la.value_head_dim + 2 * la.num_key_heads * la.key_head_dim
    return conv_dim * la.conv_kernel * len(card.linear_layers)
