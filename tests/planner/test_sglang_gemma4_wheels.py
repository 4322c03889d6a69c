"""Gemma 4 in SGLang: its two SWA pools, global layers in the full pool's shape, from the
releases' wheels (tests.wheels: downloaded once, a skip without a registry)."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.hardware.gpus import get_gpu
from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.planner.sglang import plan_sglang
from autotune.planner.sglang_swa import HYBRID_SWA_ARCHITECTURES, hybrid_by_architecture, swa_pools
from tests.planner.test_sglang_swa_wheels import _rel, _release_says_hybrid
from tests.wheels import wheel_text

GEMMA4 = "Gemma4ForConditionalGeneration"
RELEASES = ("0.5.10", "0.5.11", "0.5.12", "0.5.17", "0.5.20")
# What the config parser does to a Gemma 4 text config (utils/hf_transformers/config.py).
PARSER_LINES = (
    'global_head_dim = getattr(text_config, "global_head_dim", None)',
    'global_kv_heads = getattr(text_config, "num_global_key_value_heads", None)',
    "text_config.swa_head_dim = swa_head_dim",
    "text_config.swa_v_head_dim = swa_head_dim",
    "text_config.swa_num_key_value_heads = swa_kv_heads",
    "text_config.head_dim = global_head_dim",
    "text_config.num_key_value_heads = global_kv_heads",
    "text_config.v_head_dim = text_config.head_dim",
)
# HybridSWAPoolConfigurator's per-token bytes (pool_configurator.py).
CONFIGURATOR_LINES = (
    "model_config.get_num_kv_heads(tp_size)",
    "* (model_config.head_dim + model_config.v_head_dim)",
    "model_config.get_swa_num_kv_heads(tp_size)",
    "* (model_config.swa_head_dim + model_config.swa_v_head_dim)",
)


def _card() -> ModelCard:
    card = config_card("cyankiwi/gemma-4-26B-A4B-it-qat-AWQ-INT4")
    assert card is not None
    return card


@pytest.mark.parametrize("version", RELEASES)
def test_gemma4_takes_the_two_pools_from_0_5_11(version: str) -> None:
    expected = _rel(version) >= HYBRID_SWA_ARCHITECTURES[GEMMA4]
    assert _release_says_hybrid(version, GEMMA4) is expected, version
    assert hybrid_by_architecture(_card(), _rel(version), {}, "sm_86") is expected
    if not expected:
        return
    parser = wheel_text("sglang", version, "sglang/srt/utils/hf_transformers/config.py")
    assert all(line in parser for line in PARSER_LINES), version
    pools = wheel_text("sglang", version, "sglang/srt/model_executor/pool_configurator.py")
    assert all(line in pools for line in CONFIGURATOR_LINES), version


def test_gemma4_pools_take_the_global_shape_for_the_full_layers() -> None:
    """Per-token bytes against a public 0.5.12 launch of a Gemma 4 26B-A4B AWQ pack at TP 2
    (github.com/mattbucci/2x-3090-GA102-300-A1-sglang-inference, benchmarks/sprint-2026-06-kv-
    decode/A2-gemma4-26b/probe-ratio-0.8.json): 'full_layer_tokens=117840,
    swa_layer_tokens=94272', K size 4.50 GB for the window pool, 0.56 GB for the full one."""
    pools = swa_pools(_card(), 2.0, 2, (0, 5, 12), 0.8, by_architecture=True)
    assert pools is not None
    assert (pools.n_full, pools.n_swa) == (5, 25)
    assert pools.full_per_token == 1 * 2 * 512 * 2  # 2 global KV heads / TP 2, K and V of 512
    assert pools.swa_per_token == 4 * 2 * 256 * 2  # 8 KV heads / TP 2, K and V of 256
    assert pools.swa_tokens(117840, 1) == 94272
    assert round(94272 * 25 * pools.swa_per_token / 2 / 2**30, 2) == 4.50
    assert round(117840 * 5 * pools.full_per_token / 2 / 2**30, 2) == 0.56
    assert swa_pools(_card(), 2.0, 2, (0, 5, 12), 0.8) is None  # only by architecture


def test_gemma4_plan_is_refused_where_the_release_gives_it_one_pool() -> None:
    card, gpu = _card(), get_gpu("h100-80g")
    plan = plan_sglang(card, gpu, {"mem_fraction_static": 0.85}, version="0.5.12", tp=1)
    assert plan.kv_pool_tokens > 0
    with pytest.raises(ConfigError):
        plan_sglang(card, gpu, {}, version="0.5.10", tp=1)
    with pytest.raises(ConfigError):
        plan_sglang(card, gpu, {"disable_hybrid_swa_memory": True}, version="0.5.12", tp=1)
