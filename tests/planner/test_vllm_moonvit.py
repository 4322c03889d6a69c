"""Kimi-VL on vLLM: the MoonViT tower and projector as the card counts them, the releases that
split the tower's linears across TP ranks (0.14.0 on) or keep it whole (0.10.0 to 0.13.0), and
the MLA KV cell, checked against the wheels and the public launch
more-kimi-vl-a3b-instruct-h100-tp2 (vLLM 0.19.0, H100 TP 2)."""

from __future__ import annotations

import pytest

from autotune.hardware import get_gpu
from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.planner.common import GIB
from autotune.planner.vllm import plan_vllm
from autotune.planner.vllm_memory import shards_vision, vllm_weights_bytes
from tests.wheels import wheel_text

KIMI_VL = "moonshotai/Kimi-VL-A3B-Instruct"


def _kimi_vl() -> ModelCard:
    card = config_card(KIMI_VL)
    assert card is not None
    return card


def test_card_counts_the_moonvit_blocks_and_the_replicated_parts() -> None:
    card = _kimi_vl()
    assert card.vision is not None and card.vision.layers == 27
    # 27 blocks of wqkv 3456x1152, wo 1152x1152, fc0 4304x1152, fc1 1152x4304
    assert card.weights.vision_linear == 2 * 27 * (4 * 1152**2 + 2 * 1152 * 4304)
    # The rank-0 shapes the launch's DEBUG log prints (the whole ones: the projector's
    # pre_norm 1152 x 2, linear_1 4608x4608 + 4608, linear_2 2048x4608 + 2048; patch_embed
    # proj 1152x3x14x14 + 1152 and pos_emb 64x64x1152; per block the norm0 / norm1 weights and
    # biases and the wqkv 3456 / wo 1152 / fc0 4304 / fc1 1152 biases; the final LayerNorm).
    projector = 2 * 1152 + 4608 * 4608 + 4608 + 2048 * 4608 + 2048
    patch = 1152 * 3 * 14 * 14 + 1152 + 64 * 64 * 1152
    blocks = 27 * (4 * 1152 + 3456 + 1152 + 4304 + 1152) + 2 * 1152
    assert card.weights.vision - card.weights.vision_linear == 2 * (projector + patch + blocks)


def test_mla_kv_cell_is_the_latent_and_rope_key_per_layer() -> None:
    card = _kimi_vl()
    la = card.latent_attention
    assert la is not None and la.kv_lora_rank + la.qk_rope_head_dim == 576  # the log's head_size
    plan = plan_vllm(
        card,
        get_gpu("h100-80g"),
        {"max_model_len": 8192, "gpu_memory_utilization": 0.95, "enable_prefix_caching": False},
        version="0.19.0",
        tp=2,
    )
    assert plan.kv_cell_bytes == 27 * 576 * 2  # whole on every TP rank
    # The launch logs 1,890,896 tokens from 54.78 GiB; the profiling run's multimodal encoder
    # pass is not counted, so the prediction stays above it.
    assert plan.kv_pool_tokens == pytest.approx(1_890_896, rel=0.03)


@pytest.mark.parametrize(
    ("version", "split"), [("0.13.0", False), ("0.14.0", True), ("0.19.0", True), ("0.34.0", True)]
)
def test_releases_split_the_moonvit_blocks_from_0_14(version: str, split: bool) -> None:
    src = wheel_text("vllm", version, "vllm/model_executor/models/moonvit.py")
    block = src[src.index("class MLP2") : src.index("class MoonVitEncoder(")]
    assert ("QKVParallelLinear(" in block and "ColumnParallelLinear(" in block) == split
    assert ("ReplicatedLinear(" in block) != split
    assert shards_vision(_kimi_vl(), {}, version) == split
    kimi_vl = wheel_text("vllm", version, "vllm/model_executor/models/kimi_vl.py")
    projector = kimi_vl[kimi_vl.index("class KimiVLMultiModalProjector") :]
    assert "ReplicatedLinear(" in projector[: projector.index("def forward")]


def test_data_parallel_encoder_keeps_the_tower_whole() -> None:
    card = _kimi_vl()
    assert not shards_vision(card, {"mm_encoder_tp_mode": "data"}, "0.19.0")
    sharded = vllm_weights_bytes(card, {}, 2, load_mtp=False, version="0.19.0")
    whole = vllm_weights_bytes(card, {}, 2, load_mtp=False, version="0.13.0")
    linear = card.weights.vision_linear
    assert whole - sharded == linear - linear // 2


def test_weights_per_rank_near_the_public_launch() -> None:
    # more-kimi-vl-a3b-instruct-h100-tp2 logs "Model loading took 15.53 GiB"; counted from the
    # config: 15.36 (the checkpoint's own size is not published beside its shards).
    got = vllm_weights_bytes(_kimi_vl(), {}, 2, load_mtp=False, version="0.19.0") / GIB
    assert got == pytest.approx(15.53, rel=0.02)
