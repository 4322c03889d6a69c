"""Whether SGLang splits a model's vision tower across the TP ranks. Qwen3-VL's tower
(models/qwen3_vl.py, from its first release 0.5.3) builds every block's attention (VisionAttention:
QKVParallelLinear and RowParallelLinear, layers/attention/vision.py) and MLP (ColumnParallelLinear
linear_fc1, RowParallelLinear linear_fc2) over the attention-TP group (get_attention_tp_size to
0.5.13, get_parallel().attn_tp_size from 0.5.14); 0.5.3 .. 0.5.8 build the MLP over the whole TP
group (get_tensor_model_parallel_world_size), the same size without DP attention (with it, a
rank holds less of that MLP than the split here over the attention-TP ranks; not modelled); the
Qwen3-VL MoE and the Qwen3.5 multimodal classes (qwen3_vl_moe.py; qwen3_5.py from 0.5.9)
subclass it. `--mm-enable-dp-encoder` (0.5.6 on, off by default) replicates the tower instead
(use_data_parallel: tp_size 1). Read in the 0.5.3, 0.5.9, 0.5.15 and 0.5.23 wheels
(tests/planner/test_sglang_vision_wheels.py). Other multimodal architectures stay whole on every
rank here (not read)."""

from __future__ import annotations

from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.common import vision_per_rank
from autotune.planner.sglang_release import Release

# Architecture -> the first release whose tower for it is split over the attention-TP ranks.
TP_SHARDED_VISION: dict[str, Release] = {
    "Qwen3VLForConditionalGeneration": (5, 3, 0),
    "Qwen3VLMoeForConditionalGeneration": (5, 3, 0),
    "Qwen3_5ForConditionalGeneration": (5, 9, 0),
    "Qwen3_5MoeForConditionalGeneration": (5, 9, 0),
}


def shards_vision(card: ModelCard, cfg: dict[str, Any], rel: Release | None) -> bool:
    """Whether the release (None: the newest) splits the card's tower over the TP ranks."""
    first = TP_SHARDED_VISION.get(card.architecture)
    if first is None or cfg.get("mm_enable_dp_encoder"):
        return False
    return rel is None or rel >= first


def vision_split_saving(
    card: ModelCard, cfg: dict[str, Any], rel: Release | None, attn_tp: int
) -> int:
    """What a rank holds less than the whole tower where the release splits it over `attn_tp`
    ranks (its linear layers / attn_tp, the rest whole); 0 where it is replicated."""
    if attn_tp <= 1 or not shards_vision(card, cfg, rel):
        return 0
    w = card.weights
    return w.vision - vision_per_rank(w, attn_tp, True)
