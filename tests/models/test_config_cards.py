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
