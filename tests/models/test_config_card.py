"""Config cards: a card's weights and KV cell from config.json values alone, per architecture and
per quantized pack, and the committed card files' loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError, ModelLoadError
from autotune.models.card import ModelCard, RopeScaling
from autotune.models.config_cards import config_card, config_cards, read_card
from autotune.models.hf.config_card import card_from_config
from autotune.models.hf.pack_parts import bytes_per_param
from autotune.models.hf.quantization import quantization_from_config

LLAMA3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "torch_dtype": "bfloat16",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}
MIXTRAL_8X7B: dict[str, Any] = {
    **LLAMA3_8B,
    "architectures": ["MixtralForCausalLM"],
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
}


def kv_cell(card: ModelCard, dtype_bytes: int = 2, tp: int = 1) -> int:
    """K+V bytes of one token over the attention layers on one rank."""
    heads = max(1, card.num_kv_heads // tp)
    per_layer = heads * (card.head_dim + card.value_head_dim) * dtype_bytes
    return per_layer * len(card.full_attention_layers)


def card(config: dict[str, Any]) -> ModelCard:
    return card_from_config(config, name="test", source="test/config.json")


def test_dense_llama_weights_and_kv_cell() -> None:
    c = card(LLAMA3_8B)
    h, layers = 4096, 32
    per_layer = h * (4096 + 2 * 1024) + 4096 * h + 3 * h * 14336 + 2 * h
    assert c.weights.embed_tokens == c.weights.lm_head == 128256 * h * 2
    assert c.weights.decoder == (layers * per_layer + h) * 2
    assert kv_cell(c) == 131072  # 32 layers x 8 heads x (128 + 128) x 2 bytes
    assert kv_cell(c, tp=2) == 65536


def test_mixtral_local_experts_count_46_7b_parameters() -> None:
    c = card(MIXTRAL_8X7B)
    assert c.experts is not None
    assert (c.experts.num_experts, c.experts.experts_per_token, c.experts.moe_layers) == (8, 2, 32)
    assert c.experts.moe_intermediate_size == 14336  # Mixtral's experts take intermediate_size
    assert c.weights.total // 2 == 46_702_792_704  # Mixtral-8x7B's published parameter count


GPT_OSS: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"],
    "attention_bias": True,
    "hidden_size": 64,
    "intermediate_size": 64,
    "head_dim": 16,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "sliding_window": 128,
    "vocab_size": 1000,
    "quantization_config": {"quant_method": "mxfp4"},
}


def test_gpt_oss_sliding_layers_sinks_and_mxfp4_experts_only() -> None:
    c = card(GPT_OSS)
    assert c.full_attention_layers == (0, 1, 2, 3)  # windowed layers keep a KV cache too
    assert c.local_attention is not None
    assert (c.local_attention.kind, c.local_attention.window) == ("sliding", 128)
    assert c.local_attention.layers == (0, 2)
    assert c.attention_sinks and c.quantization.scheme == "mxfp4"
    h, e, inter = 64, 4, 64
    attention = h * (8 * 16 + 2 * 2 * 16) + 8 * 16 * h
    biases = 8 * 16 + h + 2 * 2 * 16 + 8  # q/k/v/o biases + one sink per head
    kept = 2 * h + h * e + e * (2 * inter + h + 1) + biases  # norms, router, expert biases
    experts = 3 * h * inter * e * (0.5 + 1 / 32)
    assert c.weights.decoder == int(4 * (attention * 2 + kept * 2 + experts) + h * 2)
    assert kv_cell(c) == 4 * 2 * 32 * 2


def test_llama4_interleaved_moe_shared_expert_and_chunked_attention() -> None:
    text = {
        "hidden_size": 64,
        "intermediate_size": 32,  # the expert width
        "intermediate_size_mlp": 128,  # the dense MLP width
        "interleave_moe_layer_step": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "attention_chunk_size": 8192,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
    }
    c = card({"architectures": ["Llama4ForConditionalGeneration"], "text_config": text})
    assert c.experts is not None
    assert c.experts.moe_layers == 4  # layers 1, 3, 5, 7
    assert c.experts.shared_intermediate_size == 32  # one shared expert per MoE layer
    assert c.intermediate_size == 128
    assert c.local_attention is not None and c.local_attention.kind == "chunked"
    assert c.local_attention.layers == (0, 1, 2, 4, 5, 6)  # every 4th layer is global (NoPE)
    h = 64
    attention = h * (4 * 16 + 2 * 2 * 16) + 4 * 16 * h
    dense = 3 * h * 128
    moe = 3 * h * 32 * (4 + 1) + h * 4
    assert c.weights.decoder == (8 * (attention + 2 * h) + 4 * dense + 4 * moe + h) * 2


def test_mllama_cross_attention_layers_and_vision_global_layers() -> None:
    text = {**LLAMA3_8B, "num_hidden_layers": 8, "cross_attention_layers": [3, 7]}
    vision = {"hidden_size": 32, "num_hidden_layers": 4, "num_global_layers": 2}
    c = card({"architectures": ["MllamaForConditionalGeneration"], "text_config": text,
              "vision_config": vision})  # fmt: skip
    assert c.cross_attention_layers == (3, 7) and c.full_attention_layers == tuple(range(8))
    assert c.vision is not None and c.vision.layers == 6
    assert c.weights.vision == 6 * (4 * 32**2 + 2 * 32 * 128) * 2


MLA_MOE: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "torch_dtype": "bfloat16",
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "vocab_size": 1000,
}


def ct_int4(ignore: list[str]) -> dict[str, Any]:
    weights = {"num_bits": 4, "type": "int", "group_size": 32, "strategy": "group"}
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
        "ignore": ignore,
    }


def test_compressed_tensors_pack_quantizing_only_the_experts() -> None:
    # Kimi-K2-Thinking's INT4 pack: attention, shared experts and dense MLPs stay bfloat16.
    ignore = [
        "lm_head",
        "re:.*self_attn.*",
        "re:.*shared_experts.*",
        r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
    ]
    bf16 = card(MLA_MOE)
    int4 = card({**MLA_MOE, "quantization_config": ct_int4(ignore)})
    everything = card({**MLA_MOE, "quantization_config": ct_int4(["lm_head"])})
    assert int4.quantization.scheme == "awq" and int4.quantization.group_size == 32
    q = bytes_per_param(int4.quantization, 2.0)
    experts = 2 * 3 * 64 * 32 * 8  # two MoE layers
    assert bf16.weights.decoder - int4.weights.decoder == int(experts * (2 - q))
    assert int4.weights.replicated == bf16.weights.replicated  # MLA down-projections kept
    assert everything.weights.decoder < int4.weights.decoder


def test_nvfp4_pack_keeping_attention_in_fp8_and_linear_attention_in_bf16() -> None:
    fp8 = {"num_bits": 8, "type": "float", "strategy": "channel"}
    fp4 = {"num_bits": 4, "type": "float", "group_size": 16, "strategy": "tensor_group"}
    q = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "attention": {"targets": [r"re:.*self_attn\.(q|k|v|o)_proj$"], "weights": fp8},
            "mlp": {"targets": [r"re:.*mlp\.(gate|up|down)_proj$"], "weights": fp4},
        },
        "ignore": ["lm_head", "re:.*linear_attn.*"],
    }
    hybrid = {
        **LLAMA3_8B,
        "num_hidden_layers": 4,
        "full_attention_interval": 4,
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 8,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 32,
        "linear_conv_kernel_dim": 4,
    }
    c = card({**hybrid, "quantization_config": q})
    plain = card(hybrid)
    assert c.full_attention_layers == (3,) and c.quantization.scheme == "fp8"
    h = 4096
    attention = h * (2 * 32 * 128 + 2 * 8 * 128) + 32 * 128 * h  # gated q
    mlp = 4 * 3 * h * 14336
    saved = attention * (2 - 1) + mlp * (2 - (0.5 + 1 / 16))
    assert plain.weights.decoder - c.weights.decoder == int(saved)


def test_modelopt_exclude_modules_keep_listed_layers_unquantized() -> None:
    excluded = [f"model.layers.{i}.self_attn*" for i in range(32)] + ["lm_head"]
    q = {"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": excluded}
    c = card({**LLAMA3_8B, "quantization_config": q})
    assert c.quantization.scheme == "nvfp4"
    h = 4096
    attention = 32 * (h * (4096 + 2 * 1024) + 4096 * h)
    mlp = 32 * 3 * h * 14336
    expected = attention * 2 + mlp * (0.5 + 1 / 16) + (32 * 2 * h + h) * 2
    assert c.weights.decoder == int(expected)
    assert bytes_per_param(quantization_from_config(q, Path("x")), 2.0) == 0.5 + 1 / 16


def test_committed_cards_load_with_their_provenance() -> None:
    cards = config_cards()
    assert "Qwen/Qwen2-7B-Instruct" in cards
    c = config_card("openai/gpt-oss-120b")
    assert c is not None and c.local_attention is not None
    assert "values read from https://github.com/" in c.notes


def test_card_files_reject_unknown_keys_and_bad_fields() -> None:
    base = "model: a/b\nsource: https://huggingface.co/a/b/blob/main/config.json\n"
    cfg = "config: {num_hidden_layers: 2, hidden_size: 8, num_attention_heads: 2, vocab_size: 9}\n"
    c = read_card("x.yaml", base + "read_from: https://github.com/o/r/blob/c/p\nnote: hi\n" + cfg)
    assert "values read from https://github.com/o/r/blob/c/p" in c.notes and "hi" in c.notes
    with pytest.raises(ConfigError, match=r"x\.yaml: readfrom"):
        read_card("x.yaml", base + "readfrom: https://github.com/o/r\n" + cfg)
    with pytest.raises(ConfigError, match="read_from"):
        read_card("x.yaml", base + "read_from: 3\n" + cfg)
    with pytest.raises(ConfigError, match="loaded_bytes"):
        read_card("x.yaml", base + "loaded_bytes: {experts: 5}\n" + cfg)


def test_dsa_indexer_projections_are_replicated_and_its_key_width_recorded() -> None:
    plain = card(MLA_MOE)
    dsa = card({**MLA_MOE, "index_head_dim": 16, "index_n_heads": 2})
    la = dsa.latent_attention
    assert la is not None and (la.index_head_dim, la.index_n_heads) == (16, 2)
    per_layer = 32 * 2 * 16 + 64 * 16 + 64 * 2  # wq_b from the q latent, wk, weights_proj
    assert dsa.weights.replicated - plain.weights.replicated == 3 * per_layer * 2
    assert kv_cell_mla(dsa) == kv_cell_mla(plain) == 3 * (16 + 8) * 2


def kv_cell_mla(c: ModelCard) -> int:
    la = c.latent_attention
    assert la is not None
    return (la.kv_lora_rank + la.qk_rope_head_dim) * len(c.full_attention_layers) * 2


def test_modelopt_mixed_precision_pack_reads_each_module_algorithm() -> None:
    per = {f"model.layers.{i}.self_attn.q_proj": {"quant_algo": "FP8"} for i in range(32)}
    per |= {f"model.layers.{i}.mlp": {"quant_algo": "NVFP4"} for i in range(16)}
    q = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": per}
    c = card({**LLAMA3_8B, "quantization_config": q})
    h = 4096
    attention = 32 * (h * (4096 + 2 * 1024) + 4096 * h) * 1.0
    mlp = 3 * h * 14336 * (16 * (0.5 + 1 / 16) + 16 * 2)
    assert c.weights.decoder == int(attention + mlp + (32 * 2 * h + h) * 2)


GEMMA4: dict[str, Any] = {
    "architectures": ["Gemma4ForConditionalGeneration"],
    "tie_word_embeddings": True,
    "text_config": {
        "torch_dtype": "bfloat16",
        "hidden_size": 64,
        "intermediate_size": 32,
        "num_hidden_layers": 6,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "global_head_dim": 32,
        "num_global_key_value_heads": 1,
        "attention_k_eq_v": True,
        "enable_moe_block": True,
        "num_experts": 4,
        "top_k_experts": 2,
        "moe_intermediate_size": 8,
        "sliding_window": 8,
        "use_bidirectional_attention": "vision",
        "vocab_size": 100,
    },
    "vision_config": {
        "model_type": "gemma4_vision",
        "hidden_size": 8,
        "intermediate_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "head_dim": 4,
        "patch_size": 2,
        "position_embedding_size": 10,
    },
}


def test_gemma4_global_layers_dense_mlp_beside_experts_and_vision() -> None:
    c = card(GEMMA4)
    assert c.local_attention is not None and c.local_attention.layers == (0, 1, 2, 3, 4)
    assert c.global_layers == (5,)
    assert c.global_attention is not None
    assert (c.global_attention.head_dim, c.global_attention.num_kv_heads) == (32, 1)
    assert c.global_attention.k_eq_v and c.mm_prefix_lm
    assert c.experts is not None and c.experts.experts_per_token == 2
    h = 64
    sliding = h * (4 * 16 + 2 * 2 * 16) + 4 * 16 * h
    # vLLM's qkv_proj keeps a V slot on k_eq_v layers (K is loaded into both)
    full = h * (4 * 32 + 2 * 1 * 32) + 4 * 32 * h
    mlp = 3 * h * 32 + 3 * h * 8 * 4  # the dense MLP beside the experts
    # norms, router; the MoE block's router.scale, per_expert_scale and its three norms
    kept = 2 * h + h * 4 + h + 4 + 3 * h
    assert c.weights.decoder == int((5 * sliding + full + 6 * (mlp + kept)) * 2 + h * 2)
    assert c.weights.lm_head == 0  # tied
    vision = 2 * (4 * 8 * 8 + 3 * 8 * 16) + 3 * 2**2 * 8 + 2 * 10 * 8 + 8 * h
    assert c.weights.vision == vision * 2


def test_gemma4_without_k_eq_v_keeps_the_sliding_kv_heads() -> None:
    text = {**GEMMA4["text_config"], "attention_k_eq_v": False}
    c = card({**GEMMA4, "text_config": text})
    assert c.global_attention is not None
    assert (c.global_attention.num_kv_heads, c.global_attention.k_eq_v) == (2, False)
    same = {**text, "global_head_dim": 16}
    assert card({**GEMMA4, "text_config": same}).global_attention is None


def test_gemma4_26b_a4b_packs() -> None:
    """The committed cards: the NVFP4 pack counted as llm-compressor's Gemma 4 recipe quantizes
    it comes to the 15.30 GiB checkpoint vLLM 0.25.1 logs for it (gemma4-nvfp4.log)."""
    nvfp4 = config_card("RedHatAI/gemma-4-26B-A4B-it-NVFP4")
    awq = config_card("cyankiwi/gemma-4-26B-A4B-it-qat-AWQ-INT4")
    assert nvfp4 is not None and awq is not None
    assert nvfp4.weights.total / 2**30 == pytest.approx(15.30, abs=0.02)
    assert (awq.dtype, awq.quantization.scheme, awq.quantization.group_size) == (
        "float16",
        "awq",
        32,
    )
    for c in (nvfp4, awq):
        assert len(c.full_attention_layers) == 30 and c.global_layers == (5, 11, 17, 23, 29)
        assert c.global_attention == nvfp4.global_attention
        assert c.vision is not None and c.vision.layers == 27


# Nemotron-H (NemotronHForCausalLM): the blocks of its layer plan.
NANO_4B = "nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16"
SUPER_NVFP4 = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"


def test_nemotron_h_plan_reads_its_blocks() -> None:
    card = config_card(NANO_4B)
    assert card is not None and card.block_pattern is not None
    assert card.full_attention_layers == (12, 17, 24, 32)
    assert len(card.linear_layers) == 21  # the M blocks; the 17 MLP blocks hold no state
    la = card.linear_attention
    assert la is not None and la.kind == "mamba2" and la.ssm_dtype == "float32"
    # Mamba-2 onto the shared shape: groups x state are the keys, heads x head dim the values
    assert (la.num_key_heads, la.key_head_dim) == (8, 128)
    assert (la.num_value_heads, la.value_head_dim) == (96, 80)
    assert not card.attn_output_gate and card.experts is None
    assert kv_cell(card, 1) == 4 * 2 * 8 * 128  # fp8 KV: only the 4 attention blocks


def test_nemotron_3_nano_4b_weights_are_its_published_parameter_count() -> None:
    # 3,973,556,832 parameters (the count public notes give for the checkpoint) in bf16; its
    # model.safetensors is 7,947,142,640 bytes with the header.
    card = config_card(NANO_4B)
    assert card is not None
    assert card.weights.total == 2 * 3_973_556_832


def test_nemotron_h_layer_plan_list_spelling_and_errors() -> None:
    cfg: dict[str, Any] = {
        "architectures": ["NemotronHForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "mamba_num_heads": 4,
        "mamba_head_dim": 16,
        "n_groups": 2,
        "ssm_state_size": 8,
        "conv_kernel": 4,
        "vocab_size": 100,
        "layers_block_type": ["mamba", "mlp", "attention", "mlp"],
    }
    card = card_from_config(cfg, name="tiny", source="tiny/config.json")
    assert card.block_pattern == "M-*-" and card.num_layers == 4
    # no mamba_ssm_cache_dtype: vLLM's NemotronH config falls back to float16
    assert card.linear_attention is not None and card.linear_attention.ssm_dtype == "float16"
    with pytest.raises(ModelLoadError, match="num_hidden_layers"):
        card_from_config({**cfg, "num_hidden_layers": 5}, name="t", source="t/config.json")
    bad = {**cfg, "layers_block_type": None, "hybrid_override_pattern": "MX"}
    with pytest.raises(ModelLoadError, match="hybrid_override_pattern"):
        card_from_config(bad, name="t", source="t/config.json")


def test_nemotron_3_super_latent_moe_and_mtp() -> None:
    card = config_card(SUPER_NVFP4)
    assert card is not None and card.experts is not None
    assert (card.experts.moe_layers, card.experts.num_experts) == (40, 512)
    assert card.experts.shared_intermediate_size == 5376
    assert len(card.linear_layers) == 40 and len(card.full_attention_layers) == 8
    assert card.mtp_layers == 1 and card.quantization.scheme == "nvfp4"
    w = card.weights
    fp4 = 0.5 + 1 / 16
    # routed experts over the 1024-wide latent, non-gated: 2 x 1024 x 2688 per expert
    experts = 40 * 512 * 2 * 1024 * 2688 * fp4
    assert w.replicated == 40 * 2 * 4096 * 1024 * 2  # fc1/fc2_latent_proj, bf16, every rank
    assert experts < w.decoder < experts + 13 * 2**30
    # the MTP layer: an attention block and a MoE block, plus eh_proj
    assert 512 * 2 * 1024 * 2688 * fp4 < w.mtp < 2 * 2**30


def test_nemotron_h_projections_are_its_blocks() -> None:
    from autotune.models.layout import projections

    card = config_card(NANO_4B)
    assert card is not None
    shapes = {p.name: (p.n, p.k, p.layers) for p in projections(card)}
    # in_proj: z and x (2 x 7680), B and C (2 x 8 x 128), dt (96)
    assert shapes["in_proj"] == (7680 + 9728 + 96, 3136, 21)
    assert shapes["up_proj"] == (12544, 3136, 17) and "gate_up_proj" not in shapes
    assert shapes["qkv_proj"] == (40 * 128 + 2 * 8 * 128, 3136, 4)


def test_tinyllama_chat_card_is_its_bf16_checkpoint() -> None:
    # Llama 2 shapes at TinyLlama's sizes: untied 32000 x 2048 embeddings and LM head; per layer
    # q/o 2048 x 2048, k/v 256 x 2048 (4 KV heads of 64), gate/up/down 5632 x 2048, two norms.
    card = config_card("TinyLlama/TinyLlama-1.1B-Chat-v1.0")
    assert card is not None and card.architecture == "LlamaForCausalLM"
    assert (card.num_layers, card.num_kv_heads, card.head_dim) == (22, 4, 64)
    per_layer = 2 * 2048 * 2048 + 2 * 256 * 2048 + 3 * 5632 * 2048 + 2 * 2048
    params = 2 * 32000 * 2048 + 22 * per_layer + 2048
    assert card.weights.total == 2 * params
    # Its model.safetensors is 2,200,119,864 bytes at Hub revision fe8a4ea1 (header included).
    assert 0 < 2_200_119_864 - card.weights.total < 64 * 1024
    assert kv_cell(card) == 22 * 2 * 4 * 64 * 2


def test_rope_scaling_read_from_either_key_and_checked() -> None:
    linear = card({**LLAMA3_8B, "rope_scaling": {"factor": 4.0, "type": "linear"}})
    assert linear.rope_scaling == RopeScaling(kind="linear", factor=4.0)
    yarn = {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}
    assert card({**LLAMA3_8B, "rope_scaling": yarn}).rope_scaling == RopeScaling(
        kind="yarn", factor=4.0, original_max_position_embeddings=32768
    )
    assert card({**LLAMA3_8B, "rope_scaling": {"rope_type": "default"}}).rope_scaling is None
    assert card(LLAMA3_8B).rope_scaling is None
    with pytest.raises(ModelLoadError, match="rope_scaling"):
        card({**LLAMA3_8B, "rope_scaling": {"type": "linear", "factor": "4"}})
