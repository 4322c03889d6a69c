"""A ModelCard from config.json values alone, for models whose weights are not on this machine.

The architecture comes from the config as `card_from_dir` reads it; the bytes per component are
counted from the shapes (the parameters each engine builds) times the bytes per parameter of the
checkpoint's quantization, with the layers the packs leave unquantized (embeddings, LM head,
norms, routers; attention too in MXFP4 packs) counted at the model's dtype. A checkpoint's own
size, where a card states it, replaces the count (`loaded_bytes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotune.errors import ModelLoadError
from autotune.models.card import (
    DTYPE_BYTES,
    Experts,
    LatentAttention,
    ModelCard,
    Quantization,
    VisionTower,
    WeightBytes,
)
from autotune.models.hf.fields import (
    ConfigFields,
    config_dtype,
    full_attention_layers,
    linear_attention,
)
from autotune.models.hf.quantization import quantization_from_config


def _text_config(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    text = config.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" in text:
        return text, "text_config."
    return config, ""


def _latent(f: ConfigFields) -> LatentAttention | None:
    if f.data.get("kv_lora_rank") is None:
        return None
    return LatentAttention(
        kv_lora_rank=f.get_int("kv_lora_rank"),
        qk_rope_head_dim=f.get_int("qk_rope_head_dim"),
        qk_nope_head_dim=f.get_int("qk_nope_head_dim"),
        q_lora_rank=f.opt_int("q_lora_rank"),
    )


def _experts(f: ConfigFields, num_layers: int) -> Experts | None:
    n = f.opt_int("n_routed_experts") or f.opt_int("num_local_experts") or f.opt_int("num_experts")
    if not n:
        return None
    inter = f.opt_int("moe_intermediate_size") or f.get_int("intermediate_size")
    shared = f.opt_int("shared_expert_intermediate_size", minimum=0) or 0
    shared += (f.opt_int("n_shared_experts", minimum=0) or 0) * inter
    dense = f.opt_int("first_k_dense_replace", minimum=0) or 0
    step = f.opt_int("decoder_sparse_step") or 1
    only = f.data.get("mlp_only_layers") or []
    moe_layers = [
        i
        for i in range(num_layers)
        if i >= dense and (i + 1) % step == 0 and i not in (only if isinstance(only, list) else [])
    ]
    return Experts(
        num_experts=n,
        experts_per_token=f.get_int("num_experts_per_tok", 1),
        moe_intermediate_size=inter,
        shared_intermediate_size=shared,
        moe_layers=len(moe_layers),
    )


def _vision(config: Mapping[str, Any]) -> tuple[VisionTower | None, int]:
    """The vision tower and its parameters (attention 4h^2 + MLP 2h*inter per block)."""
    vc = config.get("vision_config")
    if not isinstance(vc, dict):
        return None, 0
    layers = vc.get("depth", vc.get("num_hidden_layers"))
    hidden = vc.get("hidden_size", vc.get("embed_dim"))
    if not isinstance(layers, int) or not isinstance(hidden, int):
        return None, 0
    inter = vc.get("intermediate_size")
    inter = inter if isinstance(inter, int) else 4 * hidden
    return VisionTower(layers=layers, hidden_size=hidden), layers * (
        4 * hidden**2 + 2 * hidden * inter
    )


@dataclass
class _Params:
    """Parameter counts per kind: what a quantized pack quantizes and what it keeps."""

    attention: int = 0  # q/k/v/o and MLA projections of every full-attention layer
    linear_attention: int = 0  # GDN projections and conv of every linear-attention layer
    mlp: int = 0  # dense MLPs and shared experts
    experts: int = 0  # routed experts
    kept: int = 0  # norms, routers, GDN b/a: never quantized
    replicated: int = 0  # MLA down-projections: whole on every TP rank


def _attention_params(card: ModelCard) -> tuple[int, int]:
    """(sharded, replicated) attention parameters of one full-attention layer."""
    h, heads = card.hidden_size, card.num_attention_heads
    la = card.latent_attention
    if la is None:
        q = heads * card.head_dim * (2 if card.attn_output_gate else 1)
        kv = card.num_kv_heads * (card.head_dim + card.value_head_dim)
        return h * (q + kv) + heads * card.value_head_dim * h, 0
    qk = la.qk_nope_head_dim + la.qk_rope_head_dim
    v = card.value_head_dim
    if la.q_lora_rank:
        q_down, q_up = h * la.q_lora_rank, la.q_lora_rank * heads * qk
    else:
        q_down, q_up = 0, h * heads * qk
    kv_down = h * (la.kv_lora_rank + la.qk_rope_head_dim)
    kv_up = la.kv_lora_rank * heads * (la.qk_nope_head_dim + v)
    return q_up + kv_up + heads * v * h, q_down + kv_down


def _params(card: ModelCard) -> _Params:
    p = _Params()
    h = card.hidden_size
    sharded, replicated = _attention_params(card)
    n_full = len(card.full_attention_layers)
    p.attention = sharded * n_full
    p.replicated = replicated * n_full
    la = card.linear_attention
    if la is not None:
        key, value = la.num_key_heads * la.key_head_dim, la.num_value_heads * la.value_head_dim
        per = h * (2 * key + 2 * value) + value * h + (2 * key + value) * la.conv_kernel
        p.linear_attention = per * len(card.linear_layers)
        p.kept += (2 * la.num_value_heads * h + 2 * la.num_value_heads) * len(card.linear_layers)
    moe = card.experts
    moe_layers = moe.moe_layers if moe else 0
    p.mlp = 3 * h * card.intermediate_size * (card.num_layers - moe_layers)
    if moe is not None:
        p.experts = 3 * h * moe.moe_intermediate_size * moe.num_experts * moe_layers
        p.mlp += 3 * h * moe.shared_intermediate_size * moe_layers
        p.kept += h * moe.num_experts * moe_layers
    p.kept += 2 * h * card.num_layers + h
    return p


def _bytes_per_param(q: Quantization, dtype_bytes: float) -> float:
    """Bytes one quantized weight takes with its scales (and zero points) as the pack stores it."""
    group = q.group_size
    if q.scheme in ("awq", "gptq"):
        return q.bits / 8 + (2 + q.bits / 8) / (group or 4096)
    if q.scheme == "fp8_block":
        bn, bk = q.block_shape or (128, 128)
        return 1 + 4 / (bn * bk)
    if q.scheme in ("fp8", "int8"):
        return 1.0 + (2 / group if group else 0)
    if q.scheme == "nvfp4":
        return 0.5 + 1 / (group or 16)
    if q.scheme == "mxfp4":
        return 0.5 + 1 / 32
    return dtype_bytes


def weight_bytes(card: ModelCard, mtp_layers: int, vision_params: int) -> WeightBytes:
    """Bytes per component as loaded at TP 1, counted from the card's shapes."""
    dtype_b = DTYPE_BYTES.get(card.dtype, 2.0)
    qb = _bytes_per_param(card.quantization, dtype_b)
    p = _params(card)
    # MXFP4 packs (gpt-oss) quantize the routed experts only.
    attn_b = dtype_b if card.quantization.scheme == "mxfp4" else qb
    dense_b = dtype_b if card.quantization.scheme == "mxfp4" else qb
    decoder = (p.attention + p.linear_attention) * attn_b + p.mlp * dense_b + p.experts * qb
    layer = (decoder + p.kept * dtype_b) / card.num_layers
    embed = card.vocab_size * card.hidden_size * dtype_b
    return WeightBytes(
        embed_tokens=int(embed),
        lm_head=0 if card.tie_word_embeddings else int(embed),
        decoder=int(decoder + p.kept * dtype_b),
        mtp=int(mtp_layers * (layer + 2 * card.hidden_size**2 * dtype_b)),
        vision=int(vision_params * 2),
        replicated=int(p.replicated * qb),
    )


def card_from_config(
    config: Mapping[str, Any],
    *,
    name: str,
    source: str,
    loaded_bytes: Mapping[str, int] | None = None,
) -> ModelCard:
    """Build a ModelCard from a config.json mapping. `loaded_bytes` (component -> bytes, the
    WeightBytes field names) replaces counted sizes with a checkpoint's stated ones."""
    where = Path(source)
    text, prefix = _text_config(config)
    f = ConfigFields(text, where, prefix)
    num_layers = f.get_int("num_hidden_layers")
    hidden = f.get_int("hidden_size")
    heads = f.get_int("num_attention_heads")
    latent = _latent(f)
    full = full_attention_layers(text, where, prefix)
    hybrid = len(full) < num_layers
    dtype = config_dtype(config, text)
    vision, vision_params = _vision(config)
    archs = config.get("architectures")
    q = config.get("quantization_config", text.get("quantization_config"))
    mtp = f.opt_int("num_nextn_predict_layers", minimum=0) or f.opt_int(
        "mtp_num_hidden_layers", minimum=0
    )
    try:
        card = ModelCard(
            name=name,
            source=source,
            architecture=archs[0] if isinstance(archs, list) and archs else "unknown",
            dtype=dtype,
            num_layers=num_layers,
            hidden_size=hidden,
            intermediate_size=f.get_int("intermediate_size", 0, minimum=0),
            vocab_size=f.get_int("vocab_size"),
            num_attention_heads=heads,
            num_kv_heads=f.get_int("num_key_value_heads", heads),
            head_dim=f.get_int("head_dim", hidden // heads)
            if latent is None
            else latent.qk_nope_head_dim + latent.qk_rope_head_dim,
            v_head_dim=f.opt_int("v_head_dim"),
            attn_output_gate=f.get_bool("attn_output_gate", hybrid),
            full_attention_layers=full,
            linear_attention=linear_attention(text, where, prefix, dtype) if hybrid else None,
            latent_attention=latent,
            experts=_experts(f, num_layers),
            max_position_embeddings=f.get_int("max_position_embeddings", 262144),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            mtp_layers=mtp or 0,
            vision=vision,
            quantization=_quantization(q, where),
            weights=WeightBytes(embed_tokens=0, lm_head=0, decoder=0),
            notes=f"config values from {source}; weights counted from the shapes",
        )
        counted = weight_bytes(card, card.mtp_layers, vision_params)
        if loaded_bytes:
            counted = counted.model_copy(update=dict(loaded_bytes))
        return card.model_copy(update={"weights": counted})
    except ValidationError as exc:
        raise ModelLoadError(f"{source}: inconsistent config: {exc}") from exc


def _quantization(q: object, where: Path) -> Quantization:
    if isinstance(q, dict) and str(q.get("quant_method", "")).lower() == "mxfp4":
        return Quantization(scheme="mxfp4", bits=4, group_size=32, checkpoint_format="mxfp4")
    return quantization_from_config(q if isinstance(q, dict) else None, where)
