"""Parameters and bytes of each decoder layer, part by part: the one count of a card's layers.

`layer_params` splits a decoder layer into attention, linear attention (GDN, Mamba-2, short
conv), dense MLP, shared experts, routed experts, kept parts (norms, routers, biases, sinks) and
replicated parts (MLA down-projections); embeddings and the LM head are counted apart
(`weight_bytes`). config_card counts a checkpoint's loaded bytes from it with the config facts
the card does not hold (`Extras`: MoE layer ids, the vision tower, the pack's per-module rules);
the planner splits a loaded card by it (`card_layers`, with what the card alone says), so vLLM's
pipeline stages and SGLang's KTransformers offload weigh the same layers the card's bytes were
counted from. The shape facts themselves are the card's (attention and expert biases, Gemma 4's
dense MLP beside the experts, Nemotron-H's latent expert width), so both counts agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.models.card import DTYPE_BYTES, ModelCard, WeightBytes
from autotune.models.hf.fields import mlp_matrices
from autotune.models.hf.nemotron_h import block_parts, mamba2_params
from autotune.models.hf.pack_parts import bytes_per_param, ct_bytes, modelopt_bytes, module_names


@dataclass
class LayerParams:
    """Parameters of one decoder layer per part: what a quantized pack may quantize, and what
    it keeps at the model's dtype."""

    attention: int = 0  # q/k/v/o and MLA up-projections (full-attention layers)
    linear_attention: int = 0  # GDN projections and conv
    mlp: int = 0  # dense MLP
    shared: int = 0  # shared experts
    experts: int = 0  # routed experts
    kept: int = 0  # norms, routers, biases, sinks, GDN b/a: never quantized
    replicated: int = 0  # MLA down-projections: whole on every TP rank

    @property
    def beside_attention(self) -> int:
        """The layer's other projections: linear attention, dense MLP, shared and routed
        experts."""
        return self.linear_attention + self.mlp + self.shared + self.experts

    @property
    def projections(self) -> int:
        """Every projection of the layer (all but the kept parts)."""
        return self.attention + self.replicated + self.beside_attention


@dataclass(frozen=True)
class Extras:
    """Config facts the card does not hold but the weight count needs."""

    moe_layers: tuple[int, ...] = ()
    vision_params: int = 0
    vision_linear_params: int = 0
    conv_bias: bool = False  # LFM2's short convolution has a bias
    quant: Mapping[str, Any] | None = None
    source: str = ""
    mtp_pattern: str = ""  # Nemotron-H's MTP layer plan (mtp_hybrid_override_pattern)
    parts: dict[tuple[str, int | None], float] = field(default_factory=dict, compare=False)


def _attention_params(card: ModelCard, layer: int) -> tuple[int, int]:
    """(sharded, replicated) attention parameters of attention layer `layer` (Gemma 4's global
    layers and MiMo-V2's window layers have their own shapes)."""
    h, heads = card.hidden_size, card.num_attention_heads
    la = card.latent_attention
    ga = card.global_attention
    if ga is not None and layer in card.global_layers:
        # vLLM's QKVParallelLinear keeps a V slot even with k_eq_v (K loaded into both).
        q, kv = heads * ga.head_dim, 2 * ga.num_kv_heads * ga.head_dim
        return h * (q + kv) + heads * ga.head_dim * h, 0
    if la is None:
        kv_heads, k_dim, v_dim = card.num_kv_heads, card.head_dim, card.value_head_dim
        local = card.local_attention
        if local is not None and local.own_shape and layer in local.layers:
            kv_heads = local.num_kv_heads or kv_heads
            k_dim = local.head_dim or k_dim
            v_dim = local.v_head_dim or v_dim
        q = heads * k_dim * (2 if card.attn_output_gate else 1)
        kv = kv_heads * (k_dim + v_dim)
        return h * (q + kv) + heads * v_dim * h, 0
    qk = la.qk_nope_head_dim + la.qk_rope_head_dim
    v = card.value_head_dim
    if la.q_lora_rank:
        q_down, q_up = h * la.q_lora_rank, la.q_lora_rank * heads * qk
    else:
        q_down, q_up = 0, h * heads * qk
    kv_down = h * (la.kv_lora_rank + la.qk_rope_head_dim)
    kv_up = la.kv_lora_rank * heads * (la.qk_nope_head_dim + v)
    indexer = 0  # DSA indexer: wq_b, wk and weights_proj, replicated like the down-projections
    if la.index_head_dim and la.index_n_heads:
        q_in = la.q_lora_rank or h
        indexer = q_in * la.index_n_heads * la.index_head_dim + h * la.index_head_dim
        indexer += h * la.index_n_heads
    return q_up + kv_up + heads * v * h, q_down + kv_down + indexer


def _attention_extras(card: ModelCard) -> int:
    """Biases of q/k/v/o (`attention_bias`) and sink logits: kept at the model's dtype."""
    n = card.num_attention_heads if card.attention_sinks else 0
    if card.attention_bias:
        n += card.num_attention_heads * card.head_dim + card.hidden_size
        n += card.num_kv_heads * (card.head_dim + card.value_head_dim)
    return n


def _mixer_params(card: ModelCard, ex: Extras, layer: int, p: LayerParams) -> None:
    h = card.hidden_size
    la = card.linear_attention
    if layer in card.full_attention_layers or la is None:
        p.attention, p.replicated = _attention_params(card, layer)
        p.kept += _attention_extras(card)
        return
    if la.kind == "mamba2":  # GraniteMoeHybrid's mixer: Nemotron-H's Mamba-2 block
        parts = dict.fromkeys(("linear_attention", "kept"), 0)
        mamba2_params(card, parts)
        p.linear_attention, p.kept = (
            p.linear_attention + parts["linear_attention"],
            p.kept + parts["kept"],
        )
        return
    if la.kind == "short_conv":  # LFM2: in_proj to B, C, x; a depthwise conv; out_proj
        p.linear_attention = 3 * h * h + h * h
        p.kept += h * la.conv_kernel + (h if ex.conv_bias else 0)
        return
    key, value = la.num_key_heads * la.key_head_dim, la.num_value_heads * la.value_head_dim
    p.linear_attention = h * (2 * key + 2 * value) + value * h + (2 * key + value) * la.conv_kernel
    p.kept += 2 * la.num_value_heads * h + 2 * la.num_value_heads


def _mlp_params(card: ModelCard, moe: bool, p: LayerParams) -> None:
    h = card.hidden_size
    e = card.experts
    if not moe or e is None:
        p.mlp = mlp_matrices(card.architecture) * h * card.intermediate_size
        return
    p.experts = 3 * h * e.moe_intermediate_size * e.num_experts
    p.shared = 3 * h * e.shared_intermediate_size
    p.kept += h * e.num_experts  # router
    if e.dense_mlp:
        # Gemma 4: gate_up / down of the dense MLP; router.scale, moe.per_expert_scale and
        # pre_feedforward_layernorm_2, post_feedforward_layernorm_1 / _2 (vLLM gemma4.py)
        p.mlp = 3 * h * card.intermediate_size
        p.kept += h + e.num_experts + 3 * h
    if e.bias:  # gpt-oss: w13 bias (2 x intermediate), w2 bias (hidden), router bias
        p.kept += e.num_experts * (2 * e.moe_intermediate_size + h + 1)


def layer_params(card: ModelCard, ex: Extras, layer: int) -> LayerParams:
    """The parameters of decoder layer `layer` (-1: an MTP layer, full attention with the
    model's MLP kind; Nemotron-H: the blocks its layer plan names)."""
    if card.block_pattern is not None:
        blocks = ex.mtp_pattern if layer < 0 else card.block_pattern[layer]
        return LayerParams(**block_parts(card, blocks))
    p = LayerParams(kept=2 * card.hidden_size)
    _mixer_params(card, ex, layer if layer >= 0 else card.full_attention_layers[-1], p)
    moe = layer in ex.moe_layers if layer >= 0 else bool(ex.moe_layers)
    _mlp_params(card, moe, p)
    return p


def active_projection_params(card: ModelCard) -> float:
    """Parameters one token runs through in the decoder's projections: every layer's attention,
    linear attention, dense MLP and shared experts, and experts_per_token of its routed experts
    (a MoE card's `intermediate_size` is its dense layers' width, not what a MoE layer runs)."""
    e = card.experts
    share = e.experts_per_token / e.num_experts if e else 0.0
    return sum(
        p.attention + p.replicated + p.linear_attention + p.mlp + p.shared + p.experts * share
        for p in card_layers(card)
    )


def moe_layers_of(card: ModelCard) -> tuple[int, ...]:
    """The decoder layers with routed experts as the card alone says: Nemotron-H's E blocks,
    else the last `experts.moe_layers` layers (the dense ones come first:
    first_k_dense_replace)."""
    e = card.experts
    if e is None:
        return ()
    if card.block_pattern is not None:
        return tuple(i for i, c in enumerate(card.block_pattern) if c == "E")
    return tuple(range(card.num_layers - e.moe_layers, card.num_layers))


def expert_bytes(card: ModelCard, ex: Extras | None = None) -> float:
    """The routed experts of every MoE layer with their scales, at the bytes per weight the
    pack stores each layer's experts at (`ex`'s quant config: its ignore list applied; without
    it, the scheme's rule)."""
    ex = ex or Extras(moe_layers=moe_layers_of(card))
    return sum(
        p.experts * part_bytes(card, ex, "experts", i)
        for i, p in enumerate(card_layers(card, ex))
        if p.experts
    )


def card_part_bytes(card: ModelCard, part: str) -> float:
    """Bytes per parameter of `part` (experts, shared, ...) in the card's first MoE layer (else
    layer 0) with its scales, as the card's own count stores it; the pack's ignore lists are
    not at hand, so its scheme's rule (part_bytes)."""
    moe = moe_layers_of(card)
    return part_bytes(card, Extras(moe_layers=moe), part, moe[0] if moe else 0)


def card_layers(card: ModelCard, ex: Extras | None = None) -> list[LayerParams]:
    """Every decoder layer's parameters; without `ex`, from what the card alone says
    (`moe_layers_of`)."""
    if ex is None:
        ex = Extras(moe_layers=moe_layers_of(card))
    return [layer_params(card, ex, i) for i in range(card.num_layers)]


def part_bytes(card: ModelCard, ex: Extras, part: str, layer: int | None) -> float:
    """Bytes per parameter of `part` in decoder layer `layer` (None: the MTP layer)."""
    key = (part, layer)
    if key not in ex.parts:
        dtype_b = DTYPE_BYTES.get(card.dtype, 2.0)
        q, scheme = ex.quant or {}, card.quantization.scheme
        method = str(q.get("quant_method", "")).lower().replace("_", "-")
        if method == "compressed-tensors":
            ex.parts[key] = ct_bytes(q, module_names(part, layer), ex.source, dtype_b)
        elif method == "modelopt":
            ex.parts[key] = modelopt_bytes(q, module_names(part, layer), dtype_b)
        elif scheme == "mxfp4":  # gpt-oss packs quantize the routed experts only
            ex.parts[key] = (
                bytes_per_param(card.quantization, dtype_b) if part == "experts" else dtype_b
            )
        else:
            ex.parts[key] = bytes_per_param(card.quantization, dtype_b)
    return ex.parts[key]


_QUANTIZABLE = ("attention", "linear_attention", "mlp", "shared", "experts")


def _layer_bytes(
    card: ModelCard, ex: Extras, p: LayerParams, layer: int | None
) -> tuple[float, float]:
    """(sharded, replicated) bytes of one layer."""
    dtype_b = DTYPE_BYTES.get(card.dtype, 2.0)
    total = p.kept * dtype_b
    for part in _QUANTIZABLE:
        n = getattr(p, part)
        total += n * part_bytes(card, ex, part, layer) if n else 0
    return total, p.replicated * part_bytes(card, ex, "attention", layer)


def weight_bytes(card: ModelCard, ex: Extras) -> WeightBytes:
    """Bytes per component as loaded at TP 1, counted layer by layer from the card's shapes."""
    dtype_b = DTYPE_BYTES.get(card.dtype, 2.0)
    decoder = replicated = attention = 0.0
    for i, p in enumerate(card_layers(card, ex)):
        sharded, whole = _layer_bytes(card, ex, p, i)
        decoder, replicated = decoder + sharded, replicated + whole
        attention += p.attention * part_bytes(card, ex, "attention", i) if p.attention else 0
    decoder += card.hidden_size * dtype_b  # final norm
    mtp = 0.0
    if card.mtp_layers:
        sharded, whole = _layer_bytes(card, ex, layer_params(card, ex, -1), None)
        mtp = card.mtp_layers * (sharded + whole + 2 * card.hidden_size**2 * dtype_b)
    embed = card.vocab_size * card.hidden_size * dtype_b
    return WeightBytes(
        embed_tokens=int(embed),
        lm_head=0 if card.tie_word_embeddings else int(embed),
        decoder=int(decoder),
        mtp=int(mtp),
        vision=int(ex.vision_params * 2),
        vision_linear=int(ex.vision_linear_params * 2),
        replicated=int(replicated),
        attention=int(attention),
        experts=int(expert_bytes(card, ex)),
    )
