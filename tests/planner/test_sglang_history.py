"""SGLang before 0.5.9, release by release (planner.sglang_history): the defaults the release
wheels compute, and old public launch logs' own figures."""

from __future__ import annotations

import pytest

from autotune.hardware import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner import sglang_history as h
from autotune.planner.sglang import plan_sglang
from autotune.planner.sglang_release import Release

GPUS = {"4090": 24564, "a100-40": 40960, "l40s": 46068, "h100": 81559, "h20": 97871,
        "h200": 143771, "b200": 183359}  # fmt: skip


@pytest.mark.parametrize(
    ("version", "parsed"),
    [
        ("0.4.3.post3", (4, 3, 3)),
        ("0.5.3rc0", (5, 3, -1)),
        ("0.3.3", (3, 3, 0)),
        ("v0.5.4.post1", (5, 4, 1)),
        ("0.5.6.dev12+g1234abc", (5, 6, 0)),
        ("1.0", None),
    ],
)
def test_release_strings(version: str, parsed: Release | None) -> None:
    assert h.release(version) == parsed


# Default mem_fraction_static, text model, tp 1 and tp 4, as the wheels compute it for these
# GPUs (nvidia-smi MiB): 0.4.5.post3 special-cases > 80 GiB, 0.4.7 pins B200 at 0.79, the
# 0.4.7.post1 .. 0.5.2 reserve table gives A100-40G only 0.75 at tp 1.
@pytest.mark.parametrize(
    ("version", "tp", "expected"),
    [
        ("0.3.3", 1, {"h100": 0.88, "h200": 0.88}),
        ("0.3.3", 8, {"h100": 0.83}),
        ("0.3.6", 8, {"h100": 0.82}),
        ("0.4.3.post2", 8, {"h100": 0.81}),
        ("0.4.5.post3", 1, {"4090": 0.88, "h20": 0.864, "h200": 0.907, "b200": 0.927}),
        ("0.4.6.post2", 1, {"h100": 0.88, "h20": 0.88, "h200": 0.872, "b200": 0.899}),
        ("0.4.7", 1, {"h200": 0.872, "b200": 0.79}),
        (
            "0.4.7.post1",
            1,
            {
                "4090": 0.879,
                "a100-40": 0.75,
                "l40s": 0.778,
                "h100": 0.874,
                "h20": 0.869,
                "h200": 0.911,
                "b200": 0.821,
            },
        ),  # fmt: skip
        ("0.4.9.post3", 4, {"4090": 0.867, "a100-40": 0.713, "h100": 0.856, "h200": 0.9}),
        ("0.5.3", 1, {"4090": 0.848, "a100-40": 0.833, "h100": 0.835, "h200": 0.907}),
        ("0.5.4.post1", 1, {"4090": 0.847, "b200": 0.857}),
        ("0.5.8", 4, {"4090": 0.827, "l40s": 0.837, "h100": 0.824, "h20": 0.854}),
    ],
)
def test_default_mem_fraction(version: str, tp: int, expected: dict[str, float]) -> None:
    rel = h.release(version)
    assert rel is not None
    for gpu, mfs in expected.items():
        cps, bs = h.gpu_size_defaults(rel, GPUS[gpu], tp)
        got = h.default_mem_fraction(rel, GPUS[gpu], tp, cps, bs, None)
        assert got == pytest.approx(mfs, abs=5e-4), (version, tp, gpu)


def test_gpu_size_defaults() -> None:
    assert h.gpu_size_defaults((3, 3, 0), 24564, 1) == (8192, 160)
    assert h.gpu_size_defaults((4, 0, 1), 24564, 4) == (2048, 80)
    assert h.gpu_size_defaults((4, 7, 0), 183359, 1) == (16384, 512)
    assert h.gpu_size_defaults((5, 2, 0), 81559, 1) == (8192, 160)
    assert h.gpu_size_defaults((5, 3, 0), 32607, 1) == (2048, 16)
    assert h.gpu_size_defaults((5, 4, 1), 32607, 1) == (2048, 24)


def test_max_running_requests_quirks() -> None:
    # 0.3.1.post2 .. 0.4.6.post5 kept one extra request slot: the DeepSeek-R1 TP16 launch of
    # sglang#4161 (0.4.3.x) logs max_running_requests=2049 for 201,681 tokens at 163,840.
    assert h.max_running_requests((4, 3, 2), 201_681, 163_840, None) == 2049
    assert h.max_running_requests((4, 7, 0), 201_681, 163_840, None) == 2048
    assert h.max_running_requests((3, 0, 0), 201_681, 163_840, None) == 2047
    assert h.max_running_requests((4, 3, 2), 3000, 4096, None) == 1500  # tokens // 2
    assert h.max_running_requests((4, 9, 0), 10**7, 4096, 64) == 64


def test_speculative_extra_tokens_by_release() -> None:
    assert h.speculative_extra_tokens((5, 0, 0), "EAGLE", 48, 3, 1, 4) == 48 * 7 + 100
    assert h.speculative_extra_tokens((5, 7, 0), "EAGLE", 48, 3, 1, 4) == 0
    assert h.speculative_extra_tokens((5, 3, 0), "NGRAM", 48, 3, 1, 4) == 0
    assert h.speculative_extra_tokens((4, 3, 2), "EAGLE", 48, 3, 1, 4) == 0


def test_old_releases_plan_and_launching_ranges_stay() -> None:
    card = config_card("Qwen/Qwen3-8B")
    assert card is not None
    plan = plan_sglang(card, get_gpu("h100-80g"), {}, version="0.4.3.post2")
    assert plan.mem_fraction_static == 0.88 and plan.max_running_requests == 4097
    # 0.4.3's MHA cell: 36 layers x 8 heads x (128 + 128) x 2 bytes.
    assert plan.kv_cell_bytes == 36 * 8 * 256 * 2


def test_aiter_scales_mem_fraction_on_instinct() -> None:
    card = config_card("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert card is not None
    mi300 = get_gpu("mi300x-192g")
    base = plan_sglang(card, mi300, {"mem_fraction_static": 0.8}, version="0.5.9", tp=4)
    short = plan_sglang(
        card, mi300, {"mem_fraction_static": 0.8, "context_length": 8192}, version="0.5.9", tp=4
    )
    assert base.mem_fraction_static == pytest.approx(0.8 * 0.85)
    assert short.mem_fraction_static == 0.8  # context <= 8192: no scaling
    old = plan_sglang(card, mi300, {"mem_fraction_static": 0.8}, version="0.5.4.post1", tp=4)
    assert old.mem_fraction_static == pytest.approx(0.8 * 0.9)


def test_release_is_defined_once() -> None:
    """The planner's SGLang release type lives in planner.sglang_release alone."""
    import re
    from pathlib import Path

    import autotune.planner as planner

    owners = [
        path.name
        for path in sorted(Path(planner.__file__).parent.glob("*.py"))
        if re.search(r"^Release\b.*=", path.read_text(), re.MULTILINE)
    ]
    assert owners == ["sglang_release.py"]
