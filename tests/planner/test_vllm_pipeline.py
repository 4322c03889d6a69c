"""Pipeline parallelism on vLLM's current engine: the stages' layer split run from the 0.19.0 and
0.34.0 wheels' get_pp_indices, the rules of the stage cards against the wheels' source (0.34.0:
Model Runner V2's profile_run, kv_cache_planning.py), and the public launches they explain
(llm-d-planner's Llama-3.1-8B on H100s at PP 2 and PP 4)."""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.calibration.records import load_records
from autotune.calibration.replay import replay
from autotune.hardware import get_gpu
from autotune.models.config_cards import config_card
from autotune.models.hf.layer_params import card_layers
from autotune.planner.vllm import plan_vllm
from autotune.planner.vllm_pipeline import layer_weights, pipeline_stages, pp_partition
from tests.wheels import full_vllm_text, function_def, wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches"


def _release_get_pp_indices(version: str) -> Any:
    """get_pp_indices of the release's wheel, run with VLLM_PP_LAYER_PARTITION unset."""
    src = wheel_text("vllm", version, "vllm/distributed/utils.py")
    module = ast.Module(body=[function_def(src, "get_pp_indices")], type_ignores=[])
    scope: dict[str, Any] = {
        "envs": SimpleNamespace(VLLM_PP_LAYER_PARTITION=None),
        "logger": logging.getLogger("vllm-wheel"),
    }
    exec(compile(module, "get_pp_indices", "exec"), scope)
    return scope["get_pp_indices"]


@pytest.mark.parametrize("version", ["0.19.0", "0.34.0"])
def test_partition_is_the_releases(version: str) -> None:
    get_pp_indices = _release_get_pp_indices(version)
    for layers in (5, 24, 32, 36, 61, 62, 80, 94, 126):
        for pp in range(2, 9):
            if pp > layers:
                continue
            bounds = [get_pp_indices(layers, rank, pp) for rank in range(pp)]
            assert pp_partition(layers, pp) == [b - a for a, b in bounds], (layers, pp)


def test_env_partition_is_checked() -> None:
    assert pp_partition(32, 2, "10,22") == [10, 22]
    with pytest.raises(ValueError, match="VLLM_PP_LAYER_PARTITION"):
        pp_partition(32, 2, "10,21")


def test_stage_cards_split_layers_and_hold_embedding_and_head_at_the_ends() -> None:
    card = config_card("meta-llama/Llama-3.1-8B-Instruct")
    assert card is not None
    stages = pipeline_stages(card, 4)
    assert [s.card.num_layers for s in stages] == [8, 8, 8, 8]
    assert [s.last for s in stages] == [False, False, False, True]
    w = [s.card.weights for s in stages]
    assert w[0].embed_tokens == card.weights.embed_tokens and w[0].lm_head == 0
    assert w[3].lm_head == card.weights.lm_head and w[3].embed_tokens == 0
    assert w[1].embed_tokens == w[1].lm_head == 0
    assert sum(x.decoder for x in w) == pytest.approx(card.weights.decoder, abs=4)
    assert [len(s.card.full_attention_layers) for s in stages] == [8, 8, 8, 8]
    assert pipeline_stages(card, 1)[0].card is card


def test_expert_layers_follow_the_dense_ones() -> None:
    card = config_card("deepseek-ai/DeepSeek-V3")
    assert card is not None and card.experts is not None
    first, last = pipeline_stages(card, 2)
    # 61 layers: 31 + 30 (get_pp_indices gives the remainder to the first stage); the three
    # dense layers are in the first stage
    assert (first.card.num_layers, last.card.num_layers) == (31, 30)
    assert first.card.experts is not None and last.card.experts is not None
    assert (first.card.experts.moe_layers, last.card.experts.moe_layers) == (28, 30)
    weights = layer_weights(card)
    assert weights[0] < weights[-1]


@pytest.mark.parametrize("version", ["0.19.0", "0.34.0"])
def test_sampler_runs_on_the_last_stage_and_blocks_are_the_smallest_stages(version: str) -> None:
    if version == "0.34.0":  # Model Runner V2 alone; get_kv_cache_configs moved in 0.33
        with pytest.raises(KeyError):
            wheel_text("vllm", version, "vllm/v1/worker/gpu_model_runner.py")
        runner = wheel_text("vllm", version, "vllm/v1/worker/gpu/model_runner.py")
        assert "self.is_last_pp_rank = get_pp_group().is_last_rank" in runner
        last = "if self.is_last_pp_rank:"
        planning = "vllm/v1/core/kv_cache_planning.py"
    else:
        runner = wheel_text("vllm", version, "vllm/v1/worker/gpu_model_runner.py")
        last = "if get_pp_group().is_last_rank:"
        planning = "vllm/v1/core/kv_cache_utils.py"
    profile = ast.unparse(function_def(runner, "profile_run"))
    gate = profile.index(last)
    assert gate < profile.index("self._dummy_sampler_run(")
    utils = wheel_text("vllm", version, planning)
    configs = ast.unparse(function_def(utils, "get_kv_cache_configs"))
    assert "min_num_blocks = min(" in configs
    llama = wheel_text("vllm", version, "vllm/model_executor/models/llama.py")
    assert "if get_pp_group().is_last_rank:\n            self.lm_head = ParallelLMHead(" in llama


def test_first_stage_has_no_sampler_peak() -> None:
    card = config_card("meta-llama/Llama-3.1-8B-Instruct")
    assert card is not None
    h100 = get_gpu("h100-80g")
    cfg = {"max_model_len": 8192, "gpu_memory_utilization": 0.95}
    one = plan_vllm(card, h100, cfg, version="0.19.0")
    two = plan_vllm(card, h100, {**cfg, "pipeline_parallel_size": 2}, version="0.19.0")
    assert two.kv_pool_tokens > 2 * one.kv_pool_tokens
    assert any("pipeline parallel 2" in a for a in two.assumptions)


@pytest.mark.parametrize(
    "name", ["llmd-llama-3.1-8b-instruct-h100-tp1-pp2", "llmd-llama-3.1-8b-instruct-h100-tp1-pp4"]
)
def test_public_launches(name: str) -> None:
    r = replay(next(rec for rec in load_records(RECORDS) if rec.name == name))
    assert r.plan is not None and r.observed.weights_gib is not None
    assert r.plan.weights_gib == pytest.approx(r.observed.weights_gib, abs=0.01)
    assert r.kv_ratio == pytest.approx(1.0, abs=0.01)


def test_ungated_mlp_layers_weigh_two_matrices() -> None:
    phi = config_card("microsoft/phi-2")
    assert phi is not None
    # without the card's attention bytes the split weighs each layer by its parameters
    card = phi.model_copy(update={"weights": phi.weights.model_copy(update={"attention": 0})})
    h = card.hidden_size
    attention = 4 * h * card.num_attention_heads * card.head_dim
    assert layer_weights(card)[0] == attention + 2 * h * card.intermediate_size


@pytest.mark.parametrize(("version", "spread"), [("0.7.3", False), ("0.8.0", True)])
def test_remainder_moved_off_the_last_stage_in_0_8(version: str, spread: bool) -> None:
    """0.7.3's get_pp_indices gives the last stage the remainder; 0.8.0's spreads it over the
    stages before the last (SPREAD_REMAINDER_SINCE)."""
    src = ast.unparse(
        function_def(full_vllm_text(version, "vllm/distributed/utils.py"), "get_pp_indices")
    )
    assert ("partitions[-i] += 1" in src) is spread
    assert ("end_layer = num_hidden_layers" in src) is not spread
    assert pp_partition(61, 2, version=version) == ([31, 30] if spread else [30, 31])
    assert pp_partition(62, 4, version=version) == (
        [15, 16, 16, 15] if spread else [15, 15, 15, 17]
    )


def test_layer_weights_follow_each_layers_own_parameters() -> None:
    """The split weighs the layers the card's bytes were counted from (layer_params): on a
    bf16 hybrid the attention bytes sit on the full-attention layers and the GDN layers carry
    their own projections, each layer within the norms' share of twice its parameters."""
    card = config_card("Qwen/Qwen3.5-4B")
    assert card is not None and card.dtype == "bfloat16"
    layers = card_layers(card)
    weights = layer_weights(card)
    for i, (w, p) in enumerate(zip(weights, layers, strict=True)):
        assert w == pytest.approx(2 * p.projections, rel=0.01), i
    assert weights[3] != weights[0]  # a full-attention layer and a GDN layer


def test_nemotron_h_stages_hold_their_own_expert_blocks() -> None:
    """Nemotron-H's MoE layers are its E blocks, spread through the plan: each stage holds the
    E blocks of its layers (not the last ones), and the stages weigh about the same."""
    card = config_card("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    assert card is not None and card.block_pattern is not None
    stages = pipeline_stages(card, 2)
    for s in stages:
        assert s.card.experts is not None
        assert s.card.experts.moe_layers == card.block_pattern[s.start : s.stop].count("E")
    first, last = (s.card.weights.decoder for s in stages)
    assert first == pytest.approx(last, rel=0.05)
