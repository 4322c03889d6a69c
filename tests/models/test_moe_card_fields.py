"""The MoE facts a card holds beyond the expert shape (gpt-oss expert and router biases, Gemma 4's
dense MLP beside the experts, Nemotron 3 Super's latent experts): small configs counted by the
card against a hand count of the tensors the engines' model code builds (the shapes are checked
against the releases in test_moe_card_fields_wheels.py), through both the config's count and the
card-alone count the planner splits a card by (vLLM pipeline stages, SGLang's KTransformers
offload)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from autotune.errors import ModelLoadError
from autotune.models.card import Experts, ModelCard, WeightBytes
from autotune.models.config_cards import config_card, config_cards
from autotune.models.hf.config_card import card_from_config, moe_layer_ids
from autotune.models.hf.fields import ConfigFields
from autotune.models.hf.layer_params import Extras, card_layers, moe_layers_of, weight_bytes
from autotune.planner.sglang_kt import routed_expert_bytes


def _card(config: dict[str, Any]) -> ModelCard:
    return card_from_config(config, name="test", source=str(Path("test/config.json")))


def _layer_sum(card: ModelCard) -> int:
    """Every decoder layer's parameters as the card alone says (no config extras)."""
    return sum(p.projections + p.kept for p in card_layers(card))


def _alone(card: ModelCard) -> WeightBytes:
    return weight_bytes(card, Extras(moe_layers=moe_layers_of(card)))


# gpt-oss (vLLM gpt_oss.py OAIAttention / MLPBlock / TransformerBlock), bf16 throughout.
H, HEADS, KV, HD, E, INTER, VOCAB = 64, 8, 2, 16, 4, 32, 1000
GPT_OSS: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"],
    "attention_bias": True,
    "hidden_size": H,
    "intermediate_size": INTER,
    "head_dim": HD,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "num_hidden_layers": 2,
    "num_local_experts": E,
    "num_experts_per_tok": 2,
    "layer_types": ["sliding_attention", "full_attention"],
    "sliding_window": 128,
    "vocab_size": VOCAB,
    "torch_dtype": "bfloat16",
}
GPT_OSS_LAYER = {
    "input_layernorm.weight": H,
    "post_attention_layernorm.weight": H,
    "attn.qkv_proj.weight": (HEADS * HD + 2 * KV * HD) * H,
    "attn.qkv_proj.bias": HEADS * HD + 2 * KV * HD,
    "attn.o_proj.weight": H * HEADS * HD,
    "attn.o_proj.bias": H,
    "attn.sinks": HEADS,
    "mlp.router.weight": E * H,
    "mlp.router.bias": E,
    "mlp.experts.w13_weight": E * 2 * INTER * H,
    "mlp.experts.w13_bias": E * 2 * INTER,
    "mlp.experts.w2_weight": E * H * INTER,
    "mlp.experts.w2_bias": E * H,
}


def test_gpt_oss_card_holds_its_biases_and_counts_every_tensor() -> None:
    c = _card(GPT_OSS)
    assert c.attention_bias and c.attention_sinks
    assert c.experts is not None and c.experts.bias and not c.experts.dense_mlp
    per_layer = sum(GPT_OSS_LAYER.values())
    assert _layer_sum(c) == 2 * per_layer
    # embedding, lm_head, final norm
    assert c.weights.total == (2 * per_layer + 2 * VOCAB * H + H) * 2
    assert _alone(c) == c.weights


def test_gpt_oss_mxfp4_packs_the_expert_weights_not_their_biases() -> None:
    c = _card({**GPT_OSS, "quantization_config": {"quant_method": "mxfp4"}})
    experts = GPT_OSS_LAYER["mlp.experts.w13_weight"] + GPT_OSS_LAYER["mlp.experts.w2_weight"]
    rest = sum(GPT_OSS_LAYER.values()) - experts  # biases, sinks, router, attention: bf16
    assert c.weights.decoder == int(2 * (experts * (0.5 + 1 / 32) + rest * 2) + H * 2)
    assert _alone(c) == c.weights
    assert routed_expert_bytes(c) == int(2 * experts * (0.5 + 1 / 32))  # with their scales


# Gemma 4 MoE (vLLM gemma4.py Gemma4DecoderLayer with enable_moe_block): one sliding and one
# full (k_eq_v) layer; the dense MLP 48 wide, 4 experts of 24.
G_H, G_HEADS, G_KV, G_HD, G_GKV, G_GHD, G_E, G_MOE, G_DENSE = 64, 4, 2, 16, 1, 32, 4, 24, 48
GEMMA4: dict[str, Any] = {
    "architectures": ["Gemma4ForConditionalGeneration"],
    "tie_word_embeddings": True,
    "text_config": {
        "torch_dtype": "bfloat16",
        "attention_bias": False,
        "attention_k_eq_v": True,
        "enable_moe_block": True,
        "global_head_dim": G_GHD,
        "head_dim": G_HD,
        "hidden_size": G_H,
        "intermediate_size": G_DENSE,
        "layer_types": ["sliding_attention", "full_attention"],
        "moe_intermediate_size": G_MOE,
        "num_attention_heads": G_HEADS,
        "num_experts": G_E,
        "num_global_key_value_heads": G_GKV,
        "num_hidden_layers": 2,
        "num_key_value_heads": G_KV,
        "sliding_window": 512,
        "top_k_experts": 2,
        "vocab_size": 100,
    },
}


def _gemma4_layer(head_dim: int, kv_heads: int) -> tuple[dict[str, int], dict[str, int]]:
    """(counted, left out) tensors of one layer; k_eq_v layers keep a V slot in qkv_proj."""
    h = G_H
    counted = {
        "input_layernorm.weight": h,
        "post_attention_layernorm.weight": h,
        "self_attn.qkv_proj.weight": (G_HEADS * head_dim + 2 * kv_heads * head_dim) * h,
        "self_attn.o_proj.weight": h * G_HEADS * head_dim,
        "mlp.gate_up_proj.weight": 2 * G_DENSE * h,
        "mlp.down_proj.weight": h * G_DENSE,
        "router.scale": h,
        "router.proj.weight": G_E * h,
        "moe.per_expert_scale": G_E,
        "moe.experts.w13_weight": G_E * 2 * G_MOE * h,
        "moe.experts.w2_weight": G_E * h * G_MOE,
        "pre_feedforward_layernorm_2.weight": h,
        "post_feedforward_layernorm_1.weight": h,
        "post_feedforward_layernorm_2.weight": h,
    }
    # Gemma's other norms and the layer scalar: vectors the count leaves out (under 0.01% of
    # the 26B-A4B checkpoint)
    left_out = {
        "pre_feedforward_layernorm.weight": h,
        "post_feedforward_layernorm.weight": h,
        "self_attn.q_norm.weight": head_dim,
        "self_attn.k_norm.weight": head_dim,
        "layer_scalar": 1,
    }
    return counted, left_out


def test_gemma4_card_holds_the_dense_mlp_beside_the_experts() -> None:
    c = _card(GEMMA4)
    assert c.experts is not None and c.experts.dense_mlp and not c.experts.bias
    assert c.intermediate_size == G_DENSE and c.experts.moe_intermediate_size == G_MOE
    sliding, _ = _gemma4_layer(G_HD, G_KV)
    full, _ = _gemma4_layer(G_GHD, G_GKV)
    assert _layer_sum(c) == sum(sliding.values()) + sum(full.values())
    assert c.weights.decoder == (sum(sliding.values()) + sum(full.values()) + G_H) * 2
    assert _alone(c) == c.weights.model_copy(update={"vision": 0, "vision_linear": 0})
    # vLLM reads either name for the block and for the expert width
    text = dict(GEMMA4["text_config"])
    del text["enable_moe_block"]
    text["use_second_mlp_block"] = True
    text["expert_intermediate_size"] = text.pop("moe_intermediate_size")
    assert _card({**GEMMA4, "text_config": text}).weights == c.weights


def test_gemma4_26b_a4b_card_alone_counts_its_dense_mlp() -> None:
    c = config_card("google/gemma-4-26B-A4B-it")
    assert c is not None and c.experts is not None and c.experts.dense_mlp
    dense = 30 * 3 * 2816 * 2112  # every layer's gate/up/down of the 2112-wide MLP
    assert sum(p.mlp for p in card_layers(c)) == dense
    alone = _alone(c)
    assert alone.decoder == c.weights.decoder  # the bf16 card: no pack rules to apply


# Nemotron-H with LatentMoE (vLLM nemotron_h.py): a Mamba-2, an attention and a MoE block.
N_H, N_LAT, N_E, N_MOE, N_SHARED = 64, 16, 4, 32, 48
N_HEADS, N_KV, N_HD = 4, 2, 16
M_HEADS, M_HD, M_GROUPS, M_STATE, M_CONV = 4, 8, 2, 8, 4
NEMOTRON: dict[str, Any] = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "dtype": "bfloat16",
    "hybrid_override_pattern": "M*E",
    "num_hidden_layers": 3,
    "hidden_size": N_H,
    "intermediate_size": 96,
    "num_attention_heads": N_HEADS,
    "num_key_value_heads": N_KV,
    "head_dim": N_HD,
    "mamba_num_heads": M_HEADS,
    "mamba_head_dim": M_HD,
    "n_groups": M_GROUPS,
    "ssm_state_size": M_STATE,
    "conv_kernel": M_CONV,
    "use_conv_bias": True,
    "n_routed_experts": N_E,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": N_MOE,
    "moe_latent_size": N_LAT,
    "moe_shared_expert_intermediate_size": N_SHARED,
    "vocab_size": 100,
    "tie_word_embeddings": False,
}
_INNER = M_HEADS * M_HD
_CONV_DIM = _INNER + 2 * M_GROUPS * M_STATE
NEMOTRON_BLOCKS = {
    "M": {
        "norm.weight": N_H,
        "mixer.in_proj.weight": (2 * _INNER + 2 * M_GROUPS * M_STATE + M_HEADS) * N_H,
        "mixer.conv1d.weight": _CONV_DIM * M_CONV,
        "mixer.conv1d.bias": _CONV_DIM,
        "mixer.A": M_HEADS,
        "mixer.D": M_HEADS,
        "mixer.dt_bias": M_HEADS,
        "mixer.norm.weight": _INNER,
        "mixer.out_proj.weight": N_H * _INNER,
    },
    "*": {
        "norm.weight": N_H,
        "mixer.qkv_proj.weight": (N_HEADS * N_HD + 2 * N_KV * N_HD) * N_H,
        "mixer.o_proj.weight": N_H * N_HEADS * N_HD,
    },
    "E": {
        "norm.weight": N_H,
        "mixer.gate.weight": N_E * N_H,
        "mixer.gate.e_score_correction_bias": N_E,
        "mixer.fc1_latent_proj.weight": N_LAT * N_H,
        "mixer.fc2_latent_proj.weight": N_H * N_LAT,
        # non-gated experts over the latent: w13 [E, I, latent], w2 [E, latent, I]
        "mixer.experts.w13_weight": N_E * N_MOE * N_LAT,
        "mixer.experts.w2_weight": N_E * N_LAT * N_MOE,
        "mixer.shared_experts.up_proj.weight": N_SHARED * N_H,
        "mixer.shared_experts.down_proj.weight": N_H * N_SHARED,
    },
}


def test_nemotron_h_latent_experts_are_counted_at_the_latent_width() -> None:
    c = _card(NEMOTRON)
    assert c.experts is not None and c.experts.latent_size == N_LAT
    layers = card_layers(c)
    for p, block in zip(layers, "M*E", strict=True):
        assert p.projections + p.kept == sum(NEMOTRON_BLOCKS[block].values()), block
    assert layers[2].replicated == 2 * N_H * N_LAT  # the latent projections, on every rank
    assert layers[2].experts == 2 * N_E * N_MOE * N_LAT
    assert _alone(c) == c.weights
    # the card alone, not the config, now gives the offloadable experts their latent width
    assert routed_expert_bytes(c) == 2 * N_E * N_MOE * N_LAT * 2


def test_nemotron_3_super_card_alone_counts_latent_experts() -> None:
    c = config_card("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    assert c is not None and c.experts is not None and c.experts.latent_size == 1024
    layers = card_layers(c)
    assert sum(p.experts for p in layers) == 40 * 512 * 2 * 1024 * 2688
    assert sum(p.replicated for p in layers) == 40 * 2 * 4096 * 1024
    # NVFP4: 4 bits a weight and an FP8 scale per 16
    assert routed_expert_bytes(c) == int(40 * 512 * 2 * 1024 * 2688 * (0.5 + 1 / 16))


def _with(experts: dict[str, Any], **card: Any) -> ModelCard:
    base = _card(GPT_OSS)
    assert base.experts is not None
    e = base.experts.model_copy(update=experts)
    return ModelCard.model_validate({**base.model_dump(), "experts": e.model_dump(), **card})


def test_the_fields_are_checked_with_clear_errors() -> None:
    with pytest.raises(ValidationError, match="latent_size"):
        Experts(num_experts=4, experts_per_token=2, moe_intermediate_size=8, moe_layers=1,
                latent_size=0)  # fmt: skip
    with pytest.raises(ValidationError, match="Nemotron-H layer plans only"):
        _with({"latent_size": 16, "bias": False})
    with pytest.raises(ValidationError, match="intermediate_size above 0"):
        _with({"dense_mlp": True, "bias": False}, intermediate_size=0)
    n = _card(NEMOTRON)
    assert n.experts is not None
    for flag in ("bias", "dense_mlp"):
        with pytest.raises(ValidationError, match="no expert biases and no dense MLP"):
            ModelCard.model_validate(
                {**n.model_dump(), "experts": {**n.experts.model_dump(), flag: True}}
            )
    with pytest.raises(ValidationError, match="Nemotron-H attention blocks have no biases"):
        ModelCard.model_validate({**n.model_dump(), "attention_bias": True})
    # a config's moe_latent_size that is not a positive integer names the field
    with pytest.raises(ModelLoadError, match="moe_latent_size"):
        _card({**NEMOTRON, "moe_latent_size": "1024"})
    # Nemotron-H builds its attention without biases whatever the config says
    assert not _card({**NEMOTRON, "attention_bias": True}).attention_bias


def test_every_committed_card_alone_counts_what_its_config_counts() -> None:
    """The planner's per-layer split reads the card alone; the config's count adds only the
    facts Extras keeps (MoE layer ids, LFM2's conv bias). Before the card held the fields
    above, the Gemma 4 cards lost their dense MLP here, gpt-oss its biases, and Nemotron 3
    Super counted its experts at hidden width."""
    for name, c in config_cards().items():
        alone = [p.projections + p.kept for p in card_layers(c)]
        counted = [p.projections + p.kept for p in card_layers(c, _config_extras(name, c))]
        assert alone == counted, (name, c.architecture)


def _config_extras(name: str, c: ModelCard) -> Extras:
    from autotune.models.config_cards import _committed
    from autotune.yamlio import load_yaml

    _, label, raw = _committed()[name]
    config = load_yaml(raw, source=label)["config"]
    text = config.get("text_config")  # as config_card reads it
    nested = isinstance(text, dict) and "num_hidden_layers" in text
    text, prefix = (text, "text_config.") if nested else (config, "")
    f = ConfigFields(text, Path(label), prefix)
    return Extras(
        moe_layers=moe_layer_ids(f, c.num_layers), conv_bias=f.get_bool("conv_bias", False)
    )
