"""planner.sglang_mla against the releases: the DeepSeek weight loader of each wheel splits
kv_b_proj into new w_kc / w_vc tensors, keeps kv_b_proj from 0.4.0.post1, and from 0.4.6.post3
dequantizes a [128, 128]-block fp8 kv_b_proj to bf16 on CUDA unless SGL_USE_DEEPGEMM_BMM."""

from __future__ import annotations

import zipfile

import pytest

from autotune.models.config_cards import config_card
from autotune.planner import sglang_history as h
from autotune.planner import sglang_mla as m
from tests.wheels import engine_wheel_or_skip

LOADER = "sglang/srt/models/deepseek_common/deepseek_weight_loader.py"


def _loader(version: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        names = set(z.namelist())
        path = LOADER if LOADER in names else "sglang/srt/models/deepseek_v2.py"
        return " ".join(z.read(path).decode().split())


VERSIONS = (
    "0.4.0",
    "0.4.0.post1",
    "0.4.3",
    "0.4.6.post2",
    "0.4.6.post3",
    "0.4.7",
    "0.5.3",
    "0.5.9",
    "0.5.19",
    "0.5.23",
)


@pytest.mark.parametrize("version", VERSIONS)
def test_absorbed_copies_are_the_releases(version: str) -> None:
    src = _loader(version)
    rel = h.release(version)
    assert rel is not None
    assert "w_kc.transpose(1, 2).contiguous().transpose(1, 2)" in src
    assert "w_vc.contiguous().transpose(1, 2)" in src
    kept = "del self_attn.kv_b_proj" not in src
    assert kept is (rel >= m.KEPT_FROM), version
    bf16 = "block_quant_dequant(" in src
    assert bf16 is (rel >= m.BF16_BLOCK_FROM), version
    if bf16:  # the fp8 bmm path is opt-in
        assert '"SGL_USE_DEEPGEMM_BMM", "false"' in src or "SGLANG_USE_DEEPGEMM_BMM.get()" in src


def test_deepseek_bytes_per_rank() -> None:
    card = config_card("deepseek-ai/DeepSeek-R1")
    full = 61 * 128 * (128 + 128) * 512  # layers x heads x (nope + v) x kv_lora_rank
    assert m.absorbed_bytes(card, 1, "nvidia", (5, 3, 0)) == full * 2  # bf16, all heads
    assert m.absorbed_bytes(card, 16, "nvidia", (5, 3, 0)) == full * 2 // 16
    assert m.absorbed_bytes(card, 16, "nvidia", (4, 3, 3)) == full // 16  # fp8 before 0.4.6.post3
    assert m.absorbed_bytes(card, 8, "amd", (5, 9, 0)) == full // 8  # ROCm: fp8 tensor scale
    assert m.absorbed_bytes(card, 8, "nvidia", (4, 0, 0)) == 0  # kv_b_proj deleted
