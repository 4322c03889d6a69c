"""vLLM 0.34.0's extensible KV cache (planner/vllm_extensible.py): the sizing rule run against the
release's own `measure_kv_cache_bytes`, the defaults it changes read from the 0.34.0 and 0.33.0
wheels, and the planner's 0.34.0 plans against its 0.33.0 ones."""

from __future__ import annotations

import ast
import itertools
import re
from typing import Any

import pytest

from autotune.hardware import get_gpu
from autotune.models.registry import load_card
from autotune.planner.vllm import plan_vllm
from autotune.planner.vllm_extensible import (
    MARGIN_FLOOR_GIB,
    MARGIN_FRACTION,
    NON_TORCH_RESERVE_GIB,
    WITHHELD_WARNING_GIB,
    default_block_size,
    extensible_kv_cache,
    measured_kv_gib,
    withheld_gib,
)
from autotune.planner.vllm_memory import default_gpu_memory_utilization
from autotune.planner.vllm_sampler import v2_penalty_state_bytes
from tests.wheels import full_vllm_text, function_def

GIB = 1 << 30
LLAMA = "NousResearch/Meta-Llama-3-8B"
H100 = get_gpu("h100-80g")


class _Platform:
    def __init__(self, rocm: bool):
        self.rocm = rocm

    def is_rocm(self) -> bool:
        return self.rocm


def _release_sizing(rocm: bool) -> tuple[Any, dict[str, Any]]:
    """0.34.0's measure_kv_cache_bytes and the module constants it defaults to, as the release
    computes them on CUDA (rocm False) or ROCm."""
    src = full_vllm_text("0.34.0", "vllm/v1/worker/extensible_kv_cache.py")
    ns: dict[str, Any] = {"current_platform": _Platform(rocm)}
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id.startswith("KV_CACHE_") for t in node.targets
        ):
            exec(ast.unparse(node), ns)
    exec(ast.unparse(function_def(src, "measure_kv_cache_bytes")), ns)
    return ns["measure_kv_cache_bytes"], ns


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_the_sizing_is_the_releases_measure_kv_cache_bytes(vendor: str) -> None:
    fn, ns = _release_sizing(rocm=vendor == "amd")
    assert ns["KV_CACHE_MARGIN_FLOOR_BYTES"] == MARGIN_FLOOR_GIB[vendor] * GIB
    assert ns["KV_CACHE_MARGIN_FRACTION"] == MARGIN_FRACTION
    assert ns["KV_CACHE_NON_TORCH_RESERVE_BYTES"] == NON_TORCH_RESERVE_GIB[vendor] * GIB
    grid = itertools.product(
        (20.0, 70.0, 139.0),  # free at the first snapshot
        (4.0, 16.5, 60.0),  # weights, non-torch memory and graphs
        (0.5, 2.0, 7.0),  # transient peak
        (0.5, 0.9, 1.0),  # gpu_memory_utilization of a 140 GiB card
        (0.0, 0.25),  # blocks warmup left committed
    )
    checked = 0
    for init_free, resident, peak, util, committed in grid:
        requested = util * 140.0
        free = init_free - resident - committed
        if free < 0:
            continue
        want = fn(
            init_free_memory=int(init_free * GIB),
            free_memory=int(free * GIB),
            committed_bytes=int(committed * GIB),
            requested_memory=int(requested * GIB),
            transient_peak_bytes=int(peak * GIB),
        )
        got = measured_kv_gib(
            requested_gib=requested,
            init_free_gib=init_free,
            resident_gib=resident,
            transient_gib=peak,
            vendor=vendor,
        )
        assert got == pytest.approx(want / GIB, abs=1e-6), (init_free, resident, peak, util)
        checked += 1
    assert checked > 100


def test_defaults_are_the_releases() -> None:
    """config/cache.py: the block size 16 -> 64 and the unset utilization (1.0 with the
    extensible cache, 0.92 without) at 0.34.0."""
    new = full_vllm_text("0.34.0", "vllm/config/cache.py")
    old = full_vllm_text("0.33.0", "vllm/config/cache.py")
    block = r"DEFAULT_BLOCK_SIZE: ClassVar\[int\] = (\d+)"
    assert default_block_size("0.34.0") == int(re.search(block, new).group(1))  # type: ignore[union-attr]
    assert default_block_size("0.33.0") == int(re.search(block, old).group(1))  # type: ignore[union-attr]
    assert re.search(r"gpu_memory_utilization: float \| None = Field\(default=None", new)
    fixed = re.search(r"DEFAULT_GPU_MEMORY_UTILIZATION: ClassVar\[float\] = ([0-9.]+)", new)
    assert fixed and default_gpu_memory_utilization("0.34.0") == float(fixed.group(1))
    resolved = ast.unparse(function_def(new, "resolved_gpu_memory_utilization"))
    assert "if self.enable_extensible_kv_cache:\n        return 1.0" in resolved
    assert default_gpu_memory_utilization("0.34.0", extensible=True) == 1.0


def test_when_the_cache_is_extensible() -> None:
    """config/vllm.py _resolve_extensible_kv_cache: on unless turned off or sized by hand."""
    assert extensible_kv_cache({}, "0.34.0", H100)
    assert extensible_kv_cache({}, "0.34.0", get_gpu("mi300x-192g"))
    assert not extensible_kv_cache({}, "0.33.0", H100)
    assert not extensible_kv_cache({"enable_extensible_kv_cache": False}, "0.34.0", H100)
    assert not extensible_kv_cache({"kv_cache_memory_bytes": 8 * GIB}, "0.34.0", H100)
    assert not extensible_kv_cache({"num_gpu_blocks_override": 512}, "0.34.0", H100)
    src = full_vllm_text("0.34.0", "vllm/config/vllm.py")
    rule = ast.unparse(function_def(src, "_resolve_extensible_kv_cache"))
    for field in ("kv_cache_memory_bytes", "num_gpu_blocks_override", "enable_elastic_ep"):
        assert field in rule


def test_a_034_plan_sizes_the_pool_after_warmup() -> None:
    card = load_card(LLAMA)
    cfg = {"max_model_len": 8192}
    old = plan_vllm(card, H100, cfg, version="0.33.0")
    new = plan_vllm(card, H100, cfg, version="0.34.0")
    assert (old.gpu_memory_utilization, old.extensible_kv_cache) == (0.92, False)
    assert (new.gpu_memory_utilization, new.extensible_kv_cache) == (1.0, True)
    assert (old.block_size, new.block_size) == (16, 64)
    # the same parts; the pool is what the device has left past the margin and the peak
    state = v2_penalty_state_bytes(card.vocab_size, new.max_num_seqs, "0.34.0") / GIB
    resident = new.weights_gib + new.non_torch_gib + state + new.graph_gib
    margin = max(1.0, 0.75 * new.activation_gib)
    assert new.kv_cache_gib > old.kv_cache_gib  # 1.0 of the total against 0.92
    assert new.kv_reserve_gib == pytest.approx(
        new.requested_gib - new.weights_gib - new.activation_gib - new.non_torch_gib - state,
        abs=2e-3,
    )
    assert new.kv_cache_gib <= new.kv_reserve_gib
    free = [a for a in new.assumptions if a.startswith("free memory at startup")]
    assert free
    mib = [int(x) for x in re.findall(r"(\d+) MiB", free[0])]
    start = (mib[0] - mib[1] - mib[2]) / 1024
    want = start - resident - margin - new.activation_gib
    assert new.kv_cache_gib == pytest.approx(want, abs=2e-3)
    assert new.num_gpu_blocks * new.page_bytes * new.layers_per_group <= new.kv_cache_gib * GIB
    # what stays free at peak load is the sizing margin (not the headroom above 1.0 x total,
    # which is below zero: vLLM skips that check here)
    assert new.slack_gib == pytest.approx(margin, abs=2e-3) and new.slack_needed_gib == 0
    assert new.requested_gib > start


def test_an_explicit_utilization_or_the_old_sizing() -> None:
    card = load_card(LLAMA)
    old = plan_vllm(card, H100, {"max_model_len": 8192}, version="0.33.0")
    off = plan_vllm(
        card,
        H100,
        {"max_model_len": 8192, "enable_extensible_kv_cache": False},
        version="0.34.0",
    )
    assert off.gpu_memory_utilization == 0.92 and not off.extensible_kv_cache
    # less the V2 Sampler's penalty state (tests/planner/test_vllm_sampler.py)
    state = v2_penalty_state_bytes(card.vocab_size, off.max_num_seqs, "0.34.0") / GIB
    # and the V2 warm-up pass's own profiling peak (vllm_sampler.V2_SAMPLER_SINCE)
    peak = off.activation_gib - old.activation_gib
    assert off.kv_cache_gib == pytest.approx(old.kv_cache_gib - state - peak, abs=1e-3)
    # 0.9 of the total: the budget binds, the graphs come out of it as 0.33.0 takes them
    given = {"max_model_len": 8192, "gpu_memory_utilization": 0.9}
    at_033 = plan_vllm(card, H100, given, version="0.33.0")
    at_034 = plan_vllm(card, H100, given, version="0.34.0")
    assert at_034.extensible_kv_cache
    assert at_034.kv_cache_gib == pytest.approx(at_033.kv_cache_gib - state - peak, abs=1e-3)


def test_a_desktop_card_starts_at_the_full_budget() -> None:
    """request_memory skips the free-memory check with the extensible cache: 1.0 of a card
    whose desktop holds memory still starts (0.33.0 at 1.0 does not)."""
    card = load_card("Qwen/Qwen2.5-7B-Instruct")
    gpu = get_gpu("rtx-4090-24g")
    cfg = {"max_model_len": 8192}
    assert plan_vllm(card, gpu, cfg, version="0.34.0").fits
    full = plan_vllm(card, gpu, {**cfg, "gpu_memory_utilization": 1.0}, version="0.33.0")
    assert not full.fits
    assert any("Free memory on device" in r for r in full.reasons)


def test_the_utilisation_warning_is_the_releases() -> None:
    """measure_kv_cache_blocks warns when an explicit 0.7 < utilisation < 1.0 keeps 1 GiB or
    more of the free memory out of the cache: the budget of all free memory less the capped."""
    fn, _ = _release_sizing(rocm=False)
    src = full_vllm_text("0.34.0", "vllm/v1/worker/extensible_kv_cache.py")
    rule = " ".join(ast.unparse(function_def(src, "measure_kv_cache_blocks")).split())
    assert "if utilization is not None and 0.7 < utilization < 1.0:" in rule
    assert "measure_kv_cache_bytes(requested_memory=init_free_memory, **measured) - available" in (
        rule
    )
    assert "if withheld >= 1 << 30:" in rule and WITHHELD_WARNING_GIB == 1.0
    figures = dict(init_free_gib=70.0, resident_gib=20.0, transient_gib=2.0, vendor="nvidia")
    for util, requested in ((0.9, 63.0), (0.6, 42.0), (0.99, 69.3), (0.9, 69.5)):
        want = fn(
            init_free_memory=70 * GIB,
            free_memory=50 * GIB,
            committed_bytes=0,
            requested_memory=int(70 * GIB),
            transient_peak_bytes=2 * GIB,
        ) - fn(
            init_free_memory=70 * GIB,
            free_memory=50 * GIB,
            committed_bytes=0,
            requested_memory=int(requested * GIB),
            transient_peak_bytes=2 * GIB,
        )
        got = withheld_gib(util, requested_gib=requested, **figures)  # type: ignore[arg-type]
        warns = 0.7 < util < 1.0 and want >= GIB
        assert (got is not None) is warns, util
        if got is not None:
            assert got == pytest.approx(want / GIB, abs=1e-6)
