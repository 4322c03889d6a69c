"""planner.rocm_backend: which models SGLang gives aiter on ROCm when --attention-backend is unset,
and so whether mem_fraction_static is scaled (golden cases per release; the wheels' own code is
checked in test_sglang_rocm_wheels.py)."""

from __future__ import annotations

import pytest

from autotune.hardware.gpus import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner import rules
from autotune.planner.rocm_backend import fill_not_aiter, mla_default_is_aiter
from autotune.planner.sglang import plan_sglang


@pytest.mark.parametrize(
    ("kv_heads", "tp", "aiter"),
    [
        (128, 1, True),  # DeepSeek-V3/R1 on one GPU: 128 heads per rank
        (128, 2, False),  # 64
        (128, 4, False),  # 32
        (128, 8, True),  # 16
        (128, 16, False),  # 8
        (64, 4, True),  # Kimi K2 / GLM-5 at TP4: 16
        (64, 8, False),  # at TP8: 8
        (16, 1, True),  # DeepSeek-V2-Lite
        (16, 2, False),
        (16, 32, False),  # fewer heads than ranks: one per rank
    ],
)
def test_mla_default_depends_on_heads_per_rank(kv_heads: int, tp: int, aiter: bool) -> None:
    for rel in ((4, 7, 0), (5, 3, 0), (5, 23, 0)):
        assert mla_default_is_aiter(kv_heads, tp, None, rel) is aiter, rel


@pytest.mark.parametrize(
    ("rel", "aiter"),
    [
        ((4, 7, 0), False),
        ((4, 7, 1), False),
        ((5, 2, 0), False),
        ((5, 3, -1), False),  # 0.5.3rc0 still asks for no speculative algorithm
        ((5, 3, 0), True),
        ((5, 3, 1), True),
        ((5, 9, 0), True),
        ((5, 23, 0), True),
    ],
)
def test_mla_default_with_speculative_decoding(rel: tuple[int, int, int], aiter: bool) -> None:
    assert mla_default_is_aiter(128, 8, "NEXTN", rel) is aiter
    assert mla_default_is_aiter(128, 8, None, rel) is True


def _mfs(version: str, tp: int, *, mla: bool, kv_heads: int, **cfg: object) -> float:
    config = {"mem_fraction_static": 0.8, "context_length": 32768, **cfg}
    return rules.resolve(
        config,
        gpu_mem_mib=288 * 1024,
        tp=tp,
        hybrid=False,
        version=version,
        context_default=163840,
        vision_factor=None,
        amd_instinct=True,
        architecture="DeepseekV3ForCausalLM" if mla else "Qwen3ForCausalLM",
        mla=mla,
        hip=True,
        kv_heads=kv_heads,
    ).mem_fraction_static


@pytest.mark.parametrize(
    ("version", "factor"),
    [
        ("0.4.7", 0.85),
        ("0.5.2", 0.85),
        ("0.5.3rc0", 0.85),
        ("0.5.4.post1", 0.90),
        ("0.5.17", 0.85),
    ],
)
def test_resolve_scales_only_when_the_default_is_aiter(version: str, factor: float) -> None:
    # MHA: aiter whatever the head count.
    assert _mfs(version, 8, mla=False, kv_heads=4) == pytest.approx(0.8 * factor)
    # MLA: 16 heads per rank -> aiter; 32 -> triton, no scaling; an explicit aiter scales.
    assert _mfs(version, 8, mla=True, kv_heads=128) == pytest.approx(0.8 * factor)
    assert _mfs(version, 4, mla=True, kv_heads=128) == pytest.approx(0.8)
    explicit = _mfs(version, 4, mla=True, kv_heads=128, attention_backend="aiter")
    assert explicit == pytest.approx(0.8 * factor)
    # MTP on a 16-heads-per-rank model: triton up to 0.5.3rc0, aiter after.
    spec = _mfs(version, 8, mla=True, kv_heads=128, speculative_algorithm="NEXTN")
    before_53 = version in ("0.4.7", "0.5.2", "0.5.3rc0")
    assert spec == pytest.approx(0.8 if before_53 else 0.8 * factor)


def test_before_047_nothing_is_scaled() -> None:
    assert _mfs("0.4.6.post5", 8, mla=False, kv_heads=4) == pytest.approx(0.8)
    assert _mfs("0.4.6.post5", 8, mla=True, kv_heads=128) == pytest.approx(0.8)


@pytest.mark.parametrize(("tp", "scaled"), [(4, True), (8, False)])
def test_plan_reads_the_cards_kv_heads(tp: int, scaled: bool) -> None:
    """Kimi K2.5 (64 KV heads) on MI355X: aiter at TP4 (16 per rank), triton at TP8 (8), as the
    record more-kimi-k2.5-mi355x-tp8 shows (no --attention-backend; server_args resolved triton)."""
    card = config_card("moonshotai/Kimi-K2.5")
    assert card is not None and card.num_kv_heads == 64
    cfg = {"mem_fraction_static": 0.8, "context_length": 32768}
    plan = plan_sglang(card, get_gpu("mi355x-288g"), cfg, version="0.5.8", tp=tp)
    assert plan.mem_fraction_static == pytest.approx(0.8 * 0.85 if scaled else 0.8)


@pytest.mark.parametrize(
    ("architecture", "rel", "not_aiter"),
    [
        ("GptOssForCausalLM", (5, 1, 3), True),
        ("GptOssForCausalLM", (5, 9, 0), True),
        ("GptOssForCausalLM", (5, 10, 0), False),  # 0.5.10 adds is_hip() -> aiter
        ("GptOssForCausalLM", (5, 23, 0), False),
        ("Olmo2ForCausalLM", (5, 3, 1), False),
        ("Olmo2ForCausalLM", (5, 4, 0), True),
        ("Olmo2ForCausalLM", (5, 23, 0), True),
        ("Qwen3ForCausalLM", (5, 9, 0), False),
    ],
)
def test_model_fills(architecture: str, rel: tuple[int, int, int], not_aiter: bool) -> None:
    assert fill_not_aiter(architecture, rel) is not_aiter


def test_gpt_oss_unset_backend_is_triton_until_0510() -> None:
    card = config_card("openai/gpt-oss-120b")
    assert card is not None
    cfg = {"mem_fraction_static": 0.8, "context_length": 131072}
    for version, want in (("0.5.9", 0.8), ("0.5.10", 0.8 * 0.85)):
        plan = plan_sglang(card, get_gpu("mi355x-288g"), cfg, version=version)
        assert plan.mem_fraction_static == pytest.approx(want), version
