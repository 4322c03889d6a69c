"""SGLang's shared-experts fusion for DeepSeek V3/R1 (0.4.4.post4 .. 0.4.6.post5): the rule
against the release wheels' deepseek_v2.py / server_args.py, the planner's arithmetic, and the
public MI308 launch it explains (sglang #6001, 0.4.6.post2: 81.66 GB of weights logged)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autotune.calibration.records import load_records
from autotune.calibration.replay import replay
from autotune.hardware import get_gpu
from autotune.hardware.gpu_spec import device_capability
from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.planner.sglang_fusion import fused_copies, fusion_extra_bytes
from autotune.planner.sglang_history import release
from tests.wheels import function_def, wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches"
MODEL = "sglang/srt/models/deepseek_v2.py"
ARGS = "sglang/srt/server_args.py"


def _r1() -> ModelCard:
    card = config_card("deepseek-ai/DeepSeek-R1")
    assert card is not None and card.experts is not None
    return card


@pytest.mark.parametrize("version", ["0.4.5.post2", "0.4.6.post2", "0.4.6.post3"])
def test_default_on_from_capability_9(version: str) -> None:
    src = wheel_text("sglang", version, MODEL)
    assert "config.n_routed_experts + self.n_share_experts_fusion" in src
    # the separate shared-expert MLP is built only without the fusion
    assert "n_shared_experts is not None and self.n_share_experts_fusion == 0" in src
    default = src[src.index("elif self.n_share_experts_fusion == 0:") :][:600]
    assert 'get_device_capability("cuda") >= (9, 0)' in default
    assert "enable_deepep_moe" in default and "_is_cuda" not in default
    assert "self.n_share_experts_fusion = self.tp_size" in default


@pytest.mark.parametrize("version", ["0.4.6.post4", "0.4.6.post5"])
def test_nvidia_only_from_0_4_6_post4(version: str) -> None:
    src = wheel_text("sglang", version, MODEL)
    fn = ast.unparse(function_def(src, "determine_n_share_experts_fusion"))
    assert "not _is_cuda" in fn and "_is_cuda and torch.cuda.get_device_capability" in fn


@pytest.mark.parametrize("version", ["0.4.4.post4", "0.4.5.post1"])
def test_flag_only_before_0_4_5_post2(version: str) -> None:
    # the default 0 never reaches the `is None` branch that picks the TP size
    assert "n_share_experts_fusion: int = 0" in wheel_text("sglang", version, ARGS)
    src = wheel_text("sglang", version, MODEL)
    assert "elif self.n_share_experts_fusion is None:" in src
    assert "get_device_capability" not in src[src.index("n_share_experts_fusion is None") :][:400]


def test_one_copy_from_0_4_7() -> None:
    src = wheel_text("sglang", "0.4.7", MODEL)
    assert "n_share_experts_fusion" not in src
    assert "else config.n_shared_experts" in src  # num_fused_shared_experts: one copy


def test_capability() -> None:
    assert device_capability("sm_90") == (9, 0) and device_capability("sm_120") == (12, 0)
    assert device_capability("gfx942") == (9, 4) and device_capability("gfx1100") == (11, 0)
    assert device_capability("gfx90a") == (9, 0)


def test_copies_by_release_device_and_flags() -> None:
    r1, h100, a100, mi300 = _r1(), get_gpu("h100-80g"), get_gpu("a100-80g"), get_gpu("mi300x-192g")
    assert fused_copies(r1, h100, {}, 8, release("0.4.6.post2")) == 8
    assert fused_copies(r1, mi300, {}, 8, release("0.4.6.post2")) == 8
    assert fused_copies(r1, mi300, {}, 8, release("0.4.6.post4")) == 0
    assert fused_copies(r1, a100, {}, 8, release("0.4.6.post2")) == 0
    assert fused_copies(r1, h100, {"enable_deepep_moe": True}, 8, release("0.4.6.post2")) == 0
    assert fused_copies(r1, h100, {}, 8, release("0.4.5.post1")) == 0
    assert fused_copies(r1, h100, {"n_share_experts_fusion": 8}, 8, release("0.4.5.post1")) == 8
    assert fused_copies(r1, h100, {}, 8, release("0.4.7")) == 0
    assert fused_copies(r1, h100, {}, 8, None) == 0


def test_extra_is_the_rest_of_the_shared_expert() -> None:
    notes: list[str] = []
    extra = fusion_extra_bytes(_r1(), get_gpu("h100-80g"), {}, 8, release("0.4.6.post2"), notes)
    # 58 MoE layers x 7/8 of one FP8 shared expert (gate, up, down: 3 x 7168 x 2048 bytes and
    # a float32 scale per 128 x 128 block)
    assert extra == int(58 * 7 * 3 * 7168 * 2048 * (1 + 4 / 128**2) / 8)
    assert any("shared-experts fusion" in n for n in notes)


def test_public_launch() -> None:
    name = "s17b-deepseek-r1-mi308x-tp8"
    r = replay(next(rec for rec in load_records(RECORDS) if rec.name == name))
    assert r.plan is not None and r.observed.weights_gib is not None
    assert r.plan.weights_gib == pytest.approx(r.observed.weights_gib, abs=0.5)
    assert r.kv_ratio == pytest.approx(1.0, abs=0.05)
