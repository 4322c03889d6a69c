"""vLLM's loaded weights beyond the decoder: the vision tower as mllama4.py shards it (Llama 4
Scout, mm_encoder_tp_mode "weights" vs "data") and the rotary embedding's cos/sin cache, checked
against the 0.12.0, 0.19.0 and 0.34.0 wheels and the public launches that log "Model loading
took"."""

from __future__ import annotations

import zipfile

import pytest

from autotune.hardware import get_gpu
from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.planner.common import GIB
from autotune.planner.vllm import plan_vllm
from autotune.planner.vllm_memory import rope_cache_bytes, shards_vision, vllm_weights_bytes
from tests.wheels import engine_wheel_or_skip

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def _scout() -> ModelCard:
    card = config_card(SCOUT)
    assert card is not None
    return card


def test_scout_card_counts_the_tower_adapter_and_projector() -> None:
    card = _scout()
    assert card.vision is not None and card.vision.layers == 34
    # 809,467,648 in the blocks + 62,464,768 in patch embedding, embeddings, norms, adapter and
    # projector: the per-module parameter table of the Scout checkpoint.
    assert card.weights.vision == 2 * 871_932_416
    assert card.weights.vision_linear == 2 * 870_490_624
    assert card.rotary_dim == 128 and card.max_position_embeddings == 10_485_760


def test_rope_cache_is_max_positions_by_rotary_dim_in_the_model_dtype() -> None:
    assert rope_cache_bytes(_scout()) == 10_485_760 * 128 * 2  # 2.5 GiB
    llama = config_card("meta-llama/Llama-3.1-8B-Instruct")
    assert llama is not None and rope_cache_bytes(llama) == 131_072 * 128 * 2
    hybrid = config_card("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert hybrid is not None and hybrid.rotary_dim is None  # partial factor not copied
    assert rope_cache_bytes(hybrid) == 0


@pytest.mark.parametrize(("tp", "logged"), [(4, 53.12), (8, 27.8072)])
def test_scout_weights_per_rank_match_the_public_launches(tp: int, logged: float) -> None:
    # more-llama-4-scout-17b-16e-instruct-h100-tp4 (0.19.0) logs 53.12 GiB; the TP 8 chat of
    # repo-llama-4-scout-17b-16e-instruct-h200-tp8 (0.12.0) logged 27.8072 GiB for a launch of
    # the same model and TP before the recorded one.
    got = vllm_weights_bytes(_scout(), {}, tp, load_mtp=False) / GIB
    assert got == pytest.approx(logged, abs=0.1)


def test_data_parallel_encoder_keeps_the_tower_whole() -> None:
    card = _scout()
    assert shards_vision(card, {})
    assert not shards_vision(card, {"mm_encoder_tp_mode": "data"})
    assert not shards_vision(card, {"enable_multimodal_encoder_data_parallel": True})
    sharded = vllm_weights_bytes(card, {}, 4, load_mtp=False)
    whole = vllm_weights_bytes(card, {"mm_encoder_tp_mode": "data"}, 4, load_mtp=False)
    linear = card.weights.vision_linear
    assert whole - sharded == linear - linear // 4


def test_plan_uses_the_loaded_weights() -> None:
    plan = plan_vllm(
        _scout(),
        get_gpu("h100-80g"),
        {"max_model_len": 8192, "gpu_memory_utilization": 0.95},
        version="0.19.0",
        tp=4,
    )
    assert plan.weights_gib == pytest.approx(53.12, abs=0.1)


def _source(version: str, path: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        return z.read(path).decode()


@pytest.mark.parametrize("version", ["0.12.0", "0.19.0", "0.34.0"])
def test_wheels_shard_the_llama4_tower_unless_data_parallel(version: str) -> None:
    src = _source(version, "vllm/model_executor/models/mllama4.py")
    attention = src[
        src.index("class Llama4VisionAttention") : src.index("class Llama4VisionEncoderLayer")
    ]
    assert "QKVParallelLinear(" in attention and "RowParallelLinear(" in attention
    # the data-parallel branch: ReplicatedLinear layers, or (0.34.0) the parallel ones with
    # disable_tp when the multimodal config's mm_encoder_tp_mode is "data"
    if "ReplicatedLinear(" not in attention:
        assert "use_data_parallel = is_vit_use_data_parallel()" in attention
        assert attention.count("disable_tp=use_data_parallel") == 2
        vision = _source(version, "vllm/model_executor/models/vision.py")
        assert 'return mm_cfg is not None and mm_cfg.mm_encoder_tp_mode == "data"' in vision
    mlp = src[src.index("class Llama4VisionMLP") : src.index("class Llama4MultiModalProjector")]
    assert "ColumnParallelLinear(" in mlp and "RowParallelLinear(" in mlp
    projector = src[src.index("class Llama4MultiModalProjector") : src.index("def pixel_shuffle")]
    assert "ColumnParallelLinear(" in projector
    assert 'mm_encoder_tp_mode == "data"' in src


@pytest.mark.parametrize("version", ["0.12.0", "0.19.0", "0.34.0"])
def test_wheels_build_one_rope_cache_of_max_positions_in_the_model_dtype(version: str) -> None:
    base = _source(version, "vllm/model_executor/layers/rotary_embedding/base.py")
    assert "cache = cache.to(dtype)" in base
    assert 'self.register_buffer("cos_sin_cache", cache, persistent=False)' in base
    assert "torch.arange(self.max_position_embeddings" in base
    init = _source(version, "vllm/model_executor/layers/rotary_embedding/__init__.py")
    assert "if key in _ROPE_DICT:" in init  # one module per shape, shared by the layers
    llama4 = _source(version, "vllm/model_executor/models/llama4.py")
    assert "max_position_embeddings = config.max_position_embeddings" in llama4
