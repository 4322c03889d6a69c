"""The committed config cards (autotune/data/model_configs) as config_cards reads them."""

from __future__ import annotations

from autotune.models.config_cards import config_card


def test_laguna_s_cards_carry_the_stated_sizes_and_window_layout() -> None:
    """poolside's Laguna-S-2.1 quantized cards: 12 full + 36 sliding (512) layers of 8 KV heads,
    and the checkpoint sizes the public DGX Spark report states (66.96 GiB, 99.7 GB)."""
    int4 = config_card("poolside/Laguna-S-2.1-INT4")
    nvfp4 = config_card("poolside/Laguna-S-2.1-NVFP4")
    assert int4 is not None and nvfp4 is not None
    for card in (int4, nvfp4):
        local = card.local_attention
        assert local is not None and local.window == 512 and len(local.layers) == 36
        assert len(card.full_attention_layers) == 48 and card.num_kv_heads == 8
        assert card.experts is not None and card.experts.moe_layers == 47
    assert round(int4.weights.total / 2**30, 2) == 66.96
    assert nvfp4.weights.total == 99_700_000_000


def test_qwen3_vl_embedding_card_counts_the_tower_mergers() -> None:
    """Qwen3-VL-Embedding-2B: 28 layers x 8 KV heads of 128 (114,688 B per token in fp16/bf16,
    Qwen's vLLM notebook logs 65.22 GiB / 610,560 tokens) and the tower as vLLM 0.11.0's
    qwen3_vl.py builds it: 24 blocks of 1024 (FFN 4096), the patch merger and three deepstack
    mergers (4096 -> 4096 -> 2048, biased), their norms, the blocks' biases and norms, the Conv3d
    patch embedding and the 2304-row position table."""
    card = config_card("Qwen/Qwen3-VL-Embedding-2B")
    assert card is not None
    # the values restate Qwen3-VL-2B (code fixtures), not the checkpoint's config.json: said so
    assert "values read from public code fixtures" in card.notes
    assert card.num_layers * card.num_kv_heads * card.head_dim * 2 * 2 == 114_688
    blocks = 24 * (4 * 1024**2 + 2 * 1024 * 4096)
    mergers = 4 * (4096 * 4096 + 4096 * 2048)
    other = 4 * (4096 + 2048) + 2 * 1024 + 3 * 2 * 4096 + 24 * (5 * 1024 + 4096 + 4 * 1024)
    other += 3 * 2 * 16 * 16 * 1024 + 1024 + 2304 * 1024
    assert card.weights.vision_linear == 2 * (blocks + mergers)
    assert card.weights.vision == 2 * (blocks + mergers + other)
