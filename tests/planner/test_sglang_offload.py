"""SGLang's --cpu-offload-gb: the per-parameter offload of the decoder layers against the 0.4.0,
0.5.3, 0.5.9 and 0.5.23 wheels, the planner's arithmetic, and the public 2x RTX A4500 launch it
explains (Qwen3-14B fp16 with 48 GB offloaded, 1.50 GB of weights left on each GPU)."""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest

from autotune.calibration.records import load_records
from autotune.calibration.replay import replay
from autotune.models.config_cards import config_card
from autotune.planner.common import GIB, MIB, weights_per_rank
from autotune.planner.sglang_alloc import (
    dense_tensor_bytes,
    left_on_gpu,
    load_overhead_bytes,
    rope_cache_bytes,
    segment_slack,
)
from autotune.planner.sglang_offload import OFFLOAD_SINCE, host_budget_bytes, offload_card
from tests.wheels import engine_wheel_or_skip, function_def, wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches"


def _offload_loop(src: str) -> str:
    return ast.unparse(function_def(src, "maybe_offload_to_cpu"))


@pytest.mark.parametrize(
    ("version", "offloader", "layers"),
    [
        ("0.4.0", "sglang/srt/utils.py", "sglang/srt/utils.py"),
        ("0.5.3", "sglang/srt/offloader.py", "sglang/srt/utils/common.py"),
        ("0.5.9", "sglang/srt/utils/offloader.py", "sglang/srt/utils/common.py"),
        ("0.5.23", "sglang/srt/utils/offloader.py", "sglang/srt/utils/common.py"),
    ],
)
def test_decoder_layers_go_to_the_host_parameter_by_parameter(
    version: str, offloader: str, layers: str
) -> None:
    loop = _offload_loop(wheel_text("sglang", version, offloader))
    # parameters move one at a time while the bytes moved stay below the budget
    assert "for p in module.parameters()" in loop and "break" in loop
    assert "p.data.numel() * p.data.element_size()" in loop
    assert "OFFLOAD_BYTES >= " in loop.upper()
    assert "1024 ** 3" in wheel_text("sglang", version, offloader).replace("1024**3", "1024 ** 3")
    make = ast.unparse(function_def(wheel_text("sglang", version, layers), "make_layers"))
    assert "maybe_offload_to_cpu" in make or "get_offloader().wrap_modules" in make


def test_first_release_with_the_offload() -> None:
    assert OFFLOAD_SINCE == (0, 4, 0)
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", "0.3.6")) as z:
        assert "maybe_offload_to_cpu" not in z.read("sglang/srt/utils.py").decode()


def test_budget_per_rank_caps_at_the_decoder() -> None:
    card = config_card("Qwen/Qwen3-14B")
    assert card is not None
    notes: list[str] = []
    some = offload_card(card, {"cpu_offload_gb": 4}, (0, 5, 9), 2, notes)
    assert some.weights.decoder == card.weights.decoder - 2 * 4 * GIB
    assert weights_per_rank(card, 2, False) - weights_per_rank(some, 2, False) == 4 * GIB
    all_of_it = offload_card(card, {"cpu_offload_gb": 48}, (0, 5, 9), 2, [])
    assert all_of_it.weights.decoder == 0
    assert notes and "host memory" in notes[0]


def test_without_the_flag_or_before_the_release_nothing_moves() -> None:
    card = config_card("Qwen/Qwen3-14B")
    assert card is not None
    assert offload_card(card, {}, (0, 5, 9), 2, []) is card
    assert offload_card(card, {"cpu_offload_gb": 0}, (0, 5, 9), 2, []) is card
    assert offload_card(card, {"cpu_offload_gb": 48}, (0, 3, 6), 2, []) is card


def test_public_launch_keeps_only_the_embedding_and_head_on_the_gpu() -> None:
    name = "s16n-qwen3-14b-fp16-cpu-offload-rtx-a4500-tp2"
    r = replay(next(rec for rec in load_records(RECORDS) if rec.name == name))
    assert r.plan is not None and r.observed.weights_gib is not None
    assert r.plan.weights_gib == pytest.approx(r.observed.weights_gib, abs=0.15)
    assert r.kv_ratio == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(
    ("version", "offloader", "memory"),
    [
        ("0.4.0", "sglang/srt/utils.py", "sglang/srt/utils.py"),
        ("0.5.3", "sglang/srt/offloader.py", "sglang/srt/utils/common.py"),
        ("0.5.9", "sglang/srt/utils/offloader.py", "sglang/srt/utils/common.py"),
        ("0.5.23", "sglang/srt/utils/offloader.py", "sglang/srt/utils/common.py"),
    ],
)
def test_an_offloaded_parameter_gives_its_gpu_segment_back(
    version: str, offloader: str, memory: str
) -> None:
    """Each moved parameter's data is swapped for its pinned host copy, so nothing holds the GPU
    tensor; the free-memory reading behind `Load weight end` empties the allocator's cache first,
    which returns every segment with no live block, the offloaded layers' slack with it."""
    loop = _offload_loop(wheel_text("sglang", version, offloader))
    assert "p.data = cpu_data" in loop
    reading = function_def(wheel_text("sglang", version, memory), "get_available_gpu_memory")
    text = ast.unparse(reading)
    # 0.5.23 calls it through empty_device_cache(torch.cuda), which forwards to empty_cache
    assert "torch.cuda.empty_cache()" in text or "empty_device_cache(torch.cuda)" in text
    args, values = reading.args.args[::-1], reading.args.defaults[::-1]
    defaults = {a.arg: d for a, d in zip(args, values, strict=False)}
    if "empty_cache" in defaults:  # 0.5.x: a flag, on unless a caller turns it off
        assert ast.literal_eval(defaults["empty_cache"]) is True


def test_offloaded_decoder_tensors_hold_no_slack() -> None:
    # moved in build order while the bytes moved stay below the budget (the last one overshoots)
    assert left_on_gpu([30, 30, 30, 30], 0) == [30, 30, 30, 30]
    assert left_on_gpu([30, 30, 30, 30], 31) == [30, 30]
    assert left_on_gpu([30, 30, 30, 30], 10**6) == []
    card = config_card("Qwen/Qwen3-14B")
    assert card is not None
    sizes = dense_tensor_bytes(card, 2)
    rope = rope_cache_bytes(card, "nvidia", (0, 5, 9))
    ends = segment_slack(sizes[0]) + segment_slack(sizes[-1])
    everything = load_overhead_bytes(card, 2, "nvidia", (0, 5, 9))
    all_moved = load_overhead_bytes(card, 2, "nvidia", (0, 5, 9), 48 * GIB)
    assert all_moved == ends + rope and everything - all_moved == 120 * MIB  # 3 MiB x 40 layers
    assert host_budget_bytes({"cpu_offload_gb": 48}, (0, 5, 9)) == 48 * GIB
    assert host_budget_bytes({"cpu_offload_gb": 48}, (0, 3, 6)) == 0
    assert host_budget_bytes({}, (0, 5, 9)) == 0
