"""vLLM 0.19.0's rope caches for Gemma 3: a linear-scaled rope holds max_position_embeddings x
factor positions, and the sliding-window layers get an unscaled rope of their own (a second
cache); checked against the 0.19.0 wheel and the llm-d H100 launches' "Model loading took"."""

from __future__ import annotations

import pytest

from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.planner.common import GIB
from autotune.planner.vllm_memory import rope_cache_bytes, vllm_weights_bytes
from tests.wheels import engine_wheel_or_skip, wheel_text


def _card(name: str) -> ModelCard:
    card = config_card(name)
    assert card is not None
    return card


def test_the_wheel_scales_the_cache_and_gives_sliding_layers_their_own_rope() -> None:
    engine_wheel_or_skip("vllm", "0.19.0")
    linear = wheel_text(
        "vllm", "0.19.0", "vllm/model_executor/layers/rotary_embedding/linear_scaling_rope.py"
    )
    assert "max_len = self.max_position_embeddings * scaling_factor" in linear
    gemma3 = wheel_text("vllm", "0.19.0", "vllm/model_executor/models/gemma3.py")
    assert 'rope_type="default", rope_theta=config.rope_local_base_freq' in gemma3
    rope = wheel_text("vllm", "0.19.0", "vllm/model_executor/layers/rotary_embedding/__init__.py")
    assert "rope_parameters_args," in rope and "if key in _ROPE_DICT:" in rope


def test_gemma3_cache_is_the_scaled_global_rope_plus_the_local_one() -> None:
    card = _card("google/gemma-3-4b-it")
    assert card.rotary_dim == 256 and card.max_position_embeddings == 131_072
    assert card.rope_scaling is not None and card.rope_scaling.factor == 8.0
    assert rope_cache_bytes(card) == (131_072 * 8 + 131_072) * 256 * 2
    # Gemma 2: one unscaled rope for every layer
    gemma2 = _card("google/gemma-2-2b-it")
    assert rope_cache_bytes(gemma2) == 8192 * 256 * 2


@pytest.mark.parametrize(
    ("name", "logged_gib"),
    [  # "Model loading took", llm-d-planner v0.19.0 H100 logs (tests/data/real_launches/vllm/llmd-*)
        ("google/gemma-3-4b-it", 8.58),
        ("google/gemma-3-12b-it", 23.31),
        ("google/gemma-3-27b-it", 51.45),
    ],
)
def test_gemma3_loaded_bytes_match_the_launches(name: str, logged_gib: float) -> None:
    got = vllm_weights_bytes(_card(name), {}, 1, False) / GIB
    assert got == pytest.approx(logged_gib, rel=0.005)
