"""The dtype SGLang serves a float32 checkpoint in, against the releases' own
_get_and_verify_dtype (tests.wheels: downloaded once, a skip without a registry)."""

from __future__ import annotations

import ast
import logging
from types import SimpleNamespace

import pytest

from autotune.hardware.gpus import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.sglang import plan_sglang
from autotune.planner.sglang_dtype import auto_dtype
from tests.wheels import function_def, wheel_text

RELEASES = ("0.4.0", "0.4.3.post4", "0.4.4.post4", "0.4.7.post1", "0.5.9", "0.5.23")
# The torch dtypes the function compares, as the card's dtype names.
TORCH = SimpleNamespace(
    float32="float32", float16="float16", bfloat16="bfloat16", dtype=type(None)
)


def _release_dtype(version: str, torch_dtype: str, model_type: str) -> str:
    """The release's _get_and_verify_dtype(config, "auto"), run on a stand-in config."""
    source = wheel_text("sglang", version, "sglang/srt/configs/model_config.py")
    fn = function_def(source, "_get_and_verify_dtype")
    fn.returns = None
    for arg in fn.args.args:
        arg.annotation = None
    scope = {
        "torch": TORCH,
        "logger": logging.getLogger("wheel"),
        "_STR_DTYPE_TO_TORCH_DTYPE": {
            "float32": "float32",
            "float16": "float16",
            "bfloat16": "bfloat16",
        },
    }
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "model_config.py", "exec"), scope)
    config = SimpleNamespace(torch_dtype=torch_dtype, dtype=torch_dtype, model_type=model_type)
    return str(scope["_get_and_verify_dtype"](config, "auto"))


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize(
    ("model", "model_type"),
    [
        ("BAAI/bge-m3", "xlm-roberta"),
        ("google/gemma-7b", "gemma"),
        ("google/gemma-2-9b-it", "gemma2"),
        ("Qwen/Qwen3-8B", "qwen3"),
    ],
)
def test_auto_dtype_matches_the_release(version: str, model: str, model_type: str) -> None:
    card = config_card(model)
    assert card is not None
    for dtype in ("float32", card.dtype):
        c = card.model_copy(update={"dtype": dtype})
        assert auto_dtype(c, version) == _release_dtype(version, dtype, model_type)


def test_a_float32_checkpoint_is_planned_in_float16() -> None:
    card = config_card("BAAI/bge-m3")
    assert card is not None and card.dtype == "float32"
    plan = plan_sglang(
        card, get_gpu("rtx-5090-32g"), {"mem_fraction_static": 0.8}, version="0.4.7"
    )
    # 24 layers x 16 heads x 64 x (K + V) at 2 bytes, not float32's 4.
    assert plan.kv_cell_bytes == 24 * 16 * 64 * 2 * 2
    assert any("float32 checkpoint: served in float16" in a for a in plan.assumptions)
