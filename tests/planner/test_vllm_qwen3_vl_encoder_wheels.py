"""Why the planner leaves Qwen3-VL's and Qwen3.5's encoder profiling unmodelled
(planner/vllm_encoder.py, the records' planner_gap): what the 0.11.0, 0.24.0 and 0.34.0 wheels do, and the
live-tensor bound at the checkpoints' 4096 x 4096 dummy image against the T4 launch's log."""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest
import yaml

from autotune.calibration.records import load_records
from tests.wheels import function_def, wheel_text

QWEN3_VL = "vllm/model_executor/models/qwen3_vl.py"
# size.longest_edge in the Qwen3-VL / Qwen3.5 checkpoints' preprocessor_config.json
LONGEST_EDGE = 16_777_216
ROOT = Path(__file__).resolve().parents[1] / "data" / "real_launches"
CARDS = Path(__file__).resolve().parents[2] / "autotune" / "data" / "model_configs"


class ImageSize(NamedTuple):
    width: int
    height: int


def _largest_image(version: str) -> ImageSize:
    """The release's own get_image_size_with_most_features (qwen2_vl.py) on a stand-in self
    (no mm_processor_kwargs configured; 0.34.0 resolves the size through its own
    _get_vision_size, run here too)."""
    src = wheel_text("vllm", version, "vllm/model_executor/models/qwen2_vl.py")
    fn = function_def(src, "get_image_size_with_most_features")
    body = [fn]
    if "self._get_vision_size(" in ast.unparse(fn):
        body.append(function_def(src, "_get_vision_size"))
    for node in body:
        node.decorator_list = []
    scope: dict[str, Any] = {
        "math": math,
        "ImageSize": ImageSize,
        "Mapping": Mapping,
        "cast": lambda _, v: v,
    }
    exec(compile(ast.Module(body=body, type_ignores=[]), "<wheel>", "exec"), scope)
    vision = SimpleNamespace(patch_size=16, spatial_merge_size=2)
    info = SimpleNamespace(
        get_hf_config=lambda: SimpleNamespace(vision_config=vision),
        get_image_processor=lambda: SimpleNamespace(
            size={"longest_edge": LONGEST_EDGE, "shortest_edge": 65536}
        ),
        ctx=SimpleNamespace(get_merged_mm_kwargs=lambda _: {}),
        _merge_and_resolve_mm_processor_kwargs=lambda _: {},
        _get_vision_size=scope.get("_get_vision_size"),
    )
    size: ImageSize = scope["get_image_size_with_most_features"](info)
    return size


@pytest.mark.parametrize("version", ["0.24.0", "0.34.0"])
def test_dummy_image_is_the_processors_longest_edge_factored(version: str) -> None:
    assert _largest_image(version) == ImageSize(4096, 4096)
    # 0.11.0: smart_resize of a huge square to the image processor's longest_edge
    body = ast.unparse(function_def(wheel_text("vllm", "0.11.0", QWEN3_VL), "_get_vision_info"))
    assert "max_pixels=image_processor.size['longest_edge']" in body
    largest = ast.unparse(
        function_def(
            wheel_text("vllm", "0.11.0", "vllm/model_executor/models/qwen2_vl.py"),
            "get_image_size_with_most_features",
        )
    )
    assert "image_width=9999999" in largest


@pytest.mark.parametrize("version", ["0.11.0", "0.24.0", "0.34.0"])
def test_tower_block_keeps_its_input_and_both_mlp_widths(version: str) -> None:
    tree = ast.parse(wheel_text("vllm", version, QWEN3_VL))
    forwards = {
        node.name: ast.unparse(
            next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
        )
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name in ("Qwen3_VisionMLP", "Qwen3_VisionBlock")
    }
    assert "self.linear_fc2(self.act_fn(self.linear_fc1(x)))" in forwards["Qwen3_VisionMLP"]
    assert "x = x + self.mlp(self.norm2(x))" in forwards["Qwen3_VisionBlock"]


def test_t4_vit_attention_is_xformers_and_the_item_rule_is_0_12s() -> None:
    cuda = wheel_text("vllm", "0.11.0", "vllm/platforms/cuda.py")
    backend = ast.unparse(function_def(cuda, "get_vit_attn_backend"))
    assert "return _Backend.XFORMERS" in backend.rsplit("else:", 1)[1]
    items = ast.unparse(
        function_def(wheel_text("vllm", "0.11.0", "vllm/v1/worker/utils.py"), "get_max_items")
    )
    assert "min(mm_limit, self.max_model_len // max_tokens_per_item)" in items
    limit = wheel_text("vllm", "0.11.0", "vllm/config/multimodal.py")
    assert "999 if envs.VLLM_USE_V1 else 1" in limit


def test_the_4096_square_bound_exceeds_what_the_t4_launch_leaves() -> None:
    """The tensors alive in a late block's MLP (pixel values, position embeddings, the block's
    input and norm, linear_fc1's and the GELU's outputs, the three deepstack features) at
    65,536 patches are more than the log leaves beside the weights and the KV cache."""
    cfg = yaml.safe_load((CARDS / "Qwen--Qwen3-VL-Embedding-2B.yaml").read_text())["config"]
    v = cfg["vision_config"]
    side = 4096 // v["patch_size"]
    patches = side * side
    tokens = patches // v["spatial_merge_size"] ** 2
    per_patch = 3 * v["temporal_patch_size"] * v["patch_size"] ** 2  # pixel values
    per_patch += 3 * v["hidden_size"] + 2 * v["intermediate_size"]
    deepstack = len(v["deepstack_visual_indexes"]) * tokens * v["out_hidden_size"]
    bound_gib = (patches * per_patch + deepstack) * 2 / 2**30  # fp16
    assert bound_gib == pytest.approx(1.75, abs=0.005)
    rec = next(r for r in load_records(ROOT) if r.model == "Qwen/Qwen3-VL-Embedding-2B")
    # the budget (a T4's 14.56 GiB) less the logged weights and KV memory
    util = rec.args["gpu_memory_utilization"]
    assert isinstance(util, float)
    left = util * 14.56 - 4.3072 - 6.01
    assert bound_gib > left
    assert "1.75 GiB" in " ".join(rec.planner_gap)
