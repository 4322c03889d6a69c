"""planner.sglang_early: SGLang 0.1.17 .. 0.2.15 and the opt-in MLA of 0.2.10 .. 0.3.1.post1
(the release code itself: test_sglang_early_wheels.py)."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.hardware.gpus import GPU_CATALOG
from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.planner import rules
from autotune.planner import sglang_early as e
from autotune.planner import sglang_history as h
from autotune.planner.sglang import plan_sglang


def _card(name: str) -> ModelCard:
    card = config_card(name)
    assert card is not None, name
    return card


def test_the_early_releases_are_planned() -> None:
    assert rules.planning_version("0.1.17") == (0, 1, 17)
    assert rules.planning_version("0.2.14.post2") == (0, 2, 14)
    assert h.is_history("0.2.15") and h.is_history("0.1.17")
    assert not e.is_early((3, 0, 0)) and e.is_early((2, 15, 0))
    with pytest.raises(ConfigError, match="0.1.17"):
        rules.planning_version("0.1.16")


@pytest.mark.parametrize(
    ("version", "by_tp"),
    [
        ("0.1.17", {1: 0.90, 2: 0.85, 4: 0.82, 8: 0.80, 16: 0.80}),
        ("0.1.20", {1: 0.88, 2: 0.85, 4: 0.80, 8: 0.78}),
        ("0.1.22", {1: 0.88, 2: 0.85, 4: 0.82, 8: 0.78, 16: 0.74}),
        ("0.2.5", {1: 0.89, 2: 0.88, 4: 0.86, 8: 0.84, 16: 0.80}),
        ("0.2.13", {1: 0.88, 2: 0.87, 4: 0.85, 8: 0.83, 16: 0.79}),
    ],
)
def test_default_mem_fraction(version: str, by_tp: dict[int, float]) -> None:
    rel = h.release(version)
    assert rel is not None
    for tp, value in by_tp.items():
        assert h.default_mem_fraction(rel, 81559, tp, 8192, 160, None) == value


def test_max_running_requests_by_release() -> None:
    tokens, ctx = 100_000, 32768
    assert h.max_running_requests((1, 17, 0), tokens, ctx, None) == tokens // 2  # uncapped
    assert h.max_running_requests((1, 24, 0), tokens, ctx, None) == 2047  # pool 2048 - 1
    assert h.max_running_requests((2, 5, 0), 4_000_000, 4096, None) == 499_999
    assert h.max_running_requests((2, 7, 0), 4_000_000, 4096, None) == 5119  # pool <= 5120
    assert e.request_pool((2, 6, 0), tokens, ctx, 64) == 64  # --max-num-reqs


def test_mla_is_opt_in_before_0_3_1_post2() -> None:
    card = _card("deepseek-ai/DeepSeek-V2-Lite-Chat")
    notes: list[str] = []
    mha = e.mha_card(card, (2, 13, 0), {}, notes)
    assert mha.latent_attention is None and mha.head_dim == 256 and notes
    assert e.mha_card(card, (2, 13, 0), {"enable_mla": True}, []) is card
    assert e.mha_card(card, (3, 1, 2), {}, []) is card  # on by default
    assert e.mha_card(card, (2, 9, 0), {"enable_mla": True}, []).latent_attention is None
    qwen = _card("Qwen/Qwen2-7B-Instruct")
    assert e.mha_card(qwen, (2, 13, 0), {}, []) is qwen


def test_plans_follow_the_release() -> None:
    gpu = GPU_CATALOG["a100-80g"]
    card = _card("deepseek-ai/DeepSeek-V2-Lite-Chat")
    mha = plan_sglang(card, gpu, {}, version="0.2.13", gpu_free_gib=78.0)
    mla = plan_sglang(card, gpu, {"enable_mla": True}, version="0.2.13", gpu_free_gib=78.0)
    # 16 heads x 256 x 2 (K, V) vs 512 + 64 per layer: 14.2x the tokens
    assert mha.kv_cell_bytes == 16 * 256 * 2 * 2 * 27 and mla.kv_cell_bytes == 576 * 2 * 27
    assert mla.kv_pool_tokens > 14 * mha.kv_pool_tokens
    qwen = _card("Qwen/Qwen2-7B-Instruct")
    p = plan_sglang(qwen, gpu, {}, version="0.1.17", gpu_free_gib=78.0)
    assert p.mem_fraction_static == 0.90 and p.max_running_requests == p.kv_pool_tokens // 2
