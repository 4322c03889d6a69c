"""SGLang's Qwen3-VL vision tower split over the TP ranks (planner.sglang_vision) against the
releases: each case reads the release's wheel (tests.wheels; a skip without a registry) and finds
the tower's block linears built as tensor-parallel layers on the attention-TP group, replicated
only under --mm-enable-dp-encoder, and the Qwen3.5 multimodal classes built on Qwen3-VL's."""

from __future__ import annotations

import ast
import re

import pytest

from autotune.hardware.gpus import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.common import GIB
from autotune.planner.sglang import plan_sglang
from autotune.planner.sglang_vision import TP_SHARDED_VISION
from tests.wheels import wheel_text

VERSIONS = ("0.5.3", "0.5.6", "0.5.9", "0.5.15", "0.5.23")
_PARALLEL = ("ColumnParallelLinear", "RowParallelLinear", "QKVParallelLinear")


def _class(source: str, name: str) -> ast.ClassDef:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"no class {name}: the release changed")


def _built(cls: ast.ClassDef) -> dict[str, str]:
    """self.<attr> -> the class its __init__ builds it from (every branch)."""
    out: dict[str, str] = {}
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.targets[0], ast.Attribute)
        ):
            out.setdefault(node.targets[0].attr, ast.unparse(node.value.func))
    return out


def _tp_sizes(cls: ast.ClassDef) -> list[str]:
    """The right-hand sides of `self.tp_size = ...` in the class."""
    return [
        ast.unparse(n.value)
        for n in ast.walk(cls)
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "self.tp_size"
    ]


# Where each release declares --mm-enable-dp-encoder (absent before 0.5.6).
DP_ENCODER_FIELD = {
    "0.5.6": "sglang/srt/server_args.py",
    "0.5.9": "sglang/srt/server_args.py",
    "0.5.15": "sglang/srt/server_args.py",
    "0.5.23": "sglang/srt/arg_groups/fields/mm.py",
}


def _field_default(source: str, name: str) -> object:
    """The default of the annotated class field `name` (`name: T = default`)."""
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.AnnAssign)
            and ast.unparse(node.target) == name
            and node.value is not None
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no field {name}: the release changed")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_tower_is_split_over_the_attention_tp_ranks(version: str) -> None:
    vl = wheel_text("sglang", version, "sglang/srt/models/qwen3_vl.py")
    mlp_cls = _class(vl, "Qwen3_VisionMLP")
    mlp = _built(mlp_cls)
    assert mlp["linear_fc1"] == "ColumnParallelLinear", mlp
    assert mlp["linear_fc2"] == "RowParallelLinear", mlp
    # Replicated (tp_size 1) only for the data-parallel encoder; 0.5.23 resolves the group, and
    # 0.5.3 passes no tp_size (the linear layers' default: the TP group).
    sizes = _tp_sizes(mlp_cls)
    text = ast.unparse(mlp_cls)
    assert sizes or "resolve_linear_parallel_group" in text or "tp_size" not in text, version
    for rhs in sizes:
        assert rhs.startswith("1 if use_data_parallel else "), rhs
    vision = wheel_text("sglang", version, "sglang/srt/layers/attention/vision.py")
    attn_cls = _class(vision, "VisionAttention")
    attn = _built(attn_cls)
    assert attn["qkv_proj"] in _PARALLEL and attn["proj"] == "RowParallelLinear", attn
    for rhs in _tp_sizes(attn_cls):
        assert "attn_tp_size" in rhs or "get_attention_tp_size" in rhs, rhs
    if version in DP_ENCODER_FIELD:
        assert re.search(r"use_data_parallel = get_\w+\(\)\.mm_enable_dp_encoder", vl), version
        field = wheel_text("sglang", version, DP_ENCODER_FIELD[version])
        assert _field_default(field, "mm_enable_dp_encoder") in (False, None), version
    else:
        assert "mm_enable_dp_encoder" not in vl and "use_data_parallel" not in ast.unparse(mlp_cls)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_split_architectures_are_the_releases(version: str) -> None:
    """The Qwen3-VL MoE tower is Qwen3-VL's; Qwen3.5's multimodal classes (0.5.9 on) subclass it."""
    moe = wheel_text("sglang", version, "sglang/srt/models/qwen3_vl_moe.py")
    bases = [ast.unparse(b) for b in _class(moe, "Qwen3VLMoeForConditionalGeneration").bases]
    assert bases == ["Qwen3VLForConditionalGeneration"], bases
    if version not in ("0.5.3", "0.5.6"):
        q35 = wheel_text("sglang", version, "sglang/srt/models/qwen3_5.py")
        for name in ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"):
            assert [ast.unparse(b) for b in _class(q35, name).bases] == [
                "Qwen3VLForConditionalGeneration"
            ]
            assert TP_SHARDED_VISION[name] <= (5, 9, 0)


def test_the_planner_splits_the_tower_at_tp2() -> None:
    card = config_card("Qwen/Qwen3.5-397B-A17B-FP8")
    assert card is not None and card.architecture in TP_SHARDED_VISION
    gpu = get_gpu("h200-141g")
    base = {"mem_fraction_static": 0.85, "context_length": 8192}
    split = plan_sglang(card, gpu, base, version="0.5.9", tp=8)
    whole = plan_sglang(card, gpu, {**base, "mm_enable_dp_encoder": True}, version="0.5.9", tp=8)
    w = card.weights
    saved = (w.vision_linear - w.vision_linear // 8) / GIB
    assert whole.weights_gib - split.weights_gib == pytest.approx(saved, abs=0.002)
