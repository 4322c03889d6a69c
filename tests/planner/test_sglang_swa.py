"""SGLang's two KV pools for window layers with their own shape (planner.sglang_swa), checked
against the public MiMo-V2-Flash launches' logged pool sizes."""

from __future__ import annotations

from autotune.hardware.gpus import GPU_CATALOG
from autotune.models.config_cards import config_card
from autotune.planner.sglang import plan_sglang
from autotune.planner.sglang_swa import swa_pools

GIB = 2**30


def _mimo():  # type: ignore[no-untyped-def]
    card = config_card("XiaomiMiMo/MiMo-V2-Flash")
    assert card is not None
    return card


def test_mimo_card_reads_the_hybrid_pattern_and_window_shape() -> None:
    card = _mimo()
    local = card.local_attention
    assert local is not None and local.own_shape
    assert len(local.layers) == 39 and len(card.full_attention_layers) == 48
    assert (local.num_kv_heads, local.head_dim, local.v_head_dim) == (8, 192, 128)
    assert card.experts is not None and card.experts.moe_layers == 47


def test_pool_bytes_match_the_logged_swakvpool_at_tp4() -> None:
    # sglang PR #15464 (4x B200, TP 4): "SWAKVPool mem usage: 77.63 GB, swa size: 1496958,
    # full size: 1496958"; K 4.82 / V 3.21 GB (full) and K 41.76 / V 27.84 GB (window).
    pools = swa_pools(_mimo(), 2.0, 4, (0, 5, 6), None)
    assert pools is not None
    assert (pools.full_per_token, pools.swa_per_token) == (640, 1280)
    full = pools.full_tokens(1496958, 1)
    assert full == pools.swa_tokens(full, 1) == 1496958
    assert round(pools.pool_bytes(full, 1) / GIB, 2) == 77.63


def test_the_ratio_split_per_release() -> None:
    card = _mimo()
    p57 = swa_pools(card, 2.0, 4, (0, 5, 7), None)
    p58 = swa_pools(card, 2.0, 4, (0, 5, 8), None)
    p59 = swa_pools(card, 2.0, 4, (0, 5, 9), None)
    assert p57 and p58 and p59
    assert p57.cell == p59.cell == 9 * 640 + 39 * 1280
    assert p58.cell == 48 * 640 + 39 * 1280  # 0.5.8 counts F over every layer (sglang #18039)
    assert p57.full_tokens(402000, 1) == int(402000 * 48 / (0.8 * 39 + 9))
    # sglang #18039's main-branch log (page 64): full_layer_tokens=375360, swa=300288
    assert p58.swa_tokens(375360, 64) == 300288
    full = p59.full_tokens(1_000_000, 1)
    assert abs(p59.pool_bytes(full, 1) - 1_000_000 * p59.cell) <= p59.cell + 1280


def test_plan_sizes_the_full_pool() -> None:
    gpu = next(g for g in GPU_CATALOG.values() if "B200" in g.device_names)
    old = plan_sglang(_mimo(), gpu, {}, version="0.5.6.post2", tp=4)
    new = plan_sglang(
        _mimo(), gpu, {"mem_fraction_static": old.mem_fraction_static}, version="0.5.9", tp=4
    )
    # the same budget; 0.5.9 gives the full pool more tokens than the window pool's 0.8 share
    assert new.kv_pool_tokens > old.kv_pool_tokens


def test_dsa_models_take_fp8_kv_on_blackwell() -> None:
    card = config_card("deepseek-ai/DeepSeek-V3.2-Exp")
    assert card is not None and card.latent_attention is not None
    b200 = next(g for g in GPU_CATALOG.values() if "B200" in g.device_names)
    plan = plan_sglang(
        card, b200, {"enable_dp_attention": True, "dp_size": 8}, version="0.5.4.post1", tp=8
    )
    assert plan.kv_dtype == "fp8_e4m3"
