"""The space of an engine release's own kernel, and a tuning run on it (synthetic timings)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autotune.engines.kernel_facts import facts_for
from kernels_tuning import output as O
from kernels_tuning import runner
from kernels_tuning.engine_space import (
    SWAP_MAX_M,
    EngineTarget,
    engine_compile_set,
    m_class,
    specialization,
)
from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.resources import H200_LIMITS, DeviceLimits
from kernels_tuning.shapes import GemmShape
from kernels_tuning.space import cdiv

A100 = DeviceLimits(164 * 1024, 108, "NVIDIA A100-SXM4-80GB", "sm_80")
T23 = EngineTarget("sglang", "0.5.23")
T17 = EngineTarget("sglang", "0.5.17")


def test_sm90_keys_only_where_the_release_honours_them() -> None:
    s23 = T23.space(1, 5120, 6144, H200_LIMITS)
    assert any(c.SWAP_AB for c in s23) and any(c.SPLIT_K > 1 for c in s23)
    splits = {c.SPLIT_K for c in s23}
    assert splits <= set(facts_for("sglang", "0.5.23").split_k_values)
    assert all(s & (s - 1) == 0 for s in splits)  # powers of two (the launcher asserts it)
    for space in (T23.space(1, 5120, 6144, A100), T17.space(1, 5120, 6144, H200_LIMITS)):
        assert space and not any(c.SWAP_AB or c.SPLIT_K > 1 for c in space)
    for space in (s23, T17.space(256, 5120, 6144, H200_LIMITS)):
        assert all(c.BLOCK_SIZE_K == 128 and not (c.FOLD_SCALES or c.TMA) for c in space)
    assert not any(c.SWAP_AB for c in T23.space(SWAP_MAX_M * 2, 5120, 6144, H200_LIMITS))


def test_target_legality_names_what_the_release_lacks() -> None:
    swapped = KernelConfig(16, 128, 128, 1, 4, 3, SPLIT_K=4, SWAP_AB=1)
    assert T23.legality(swapped, H200_LIMITS, 5120, 6144) is None
    assert "SWAP_AB" in (T17.legality(swapped, H200_LIMITS) or "")
    assert "sm_80" in (T23.legality(swapped, A100) or "")
    assert "SPLIT_K=3" in (T23.legality(swapped.with_(SPLIT_K=3), H200_LIMITS) or "")
    assert "FOLD_SCALES" in (T23.legality(swapped.with_(FOLD_SCALES=1), H200_LIMITS) or "")
    assert "tl.dot" in (T23.legality(swapped.with_(BLOCK_SIZE_M=8), H200_LIMITS) or "")
    with pytest.raises(Exception, match="ENGINE==VERSION"):
        EngineTarget.parse("sglang-0.5.23")


def test_compile_set_by_triton_specialization() -> None:
    assert [m_class(m) for m in (1, 2, 3, 16, 48, 24)] == [1, 2, 2, 16, 16, 2]
    # the scale strides K / 128: 48 (a multiple of 16) at K = 6144, 40 at K = 5120
    assert specialization(16, 5120, 6144) != specialization(16, 5120, 5120)
    assert specialization(16, 14336, 5120) == specialization(32, 16384, 5120)
    sets = engine_compile_set(
        [1, 2, 3, 16, 4096], [(5120, 6144), (14336, 5120), (16384, 5120)], H200_LIMITS
    )
    assert set(sets) == {(m, n, k) for m in (1, 2, 16) for n, k in ((5120, 6144), (14336, 5120))}
    assert len(sets[(16, 5120, 6144)]) > len(sets[(1, 5120, 6144)])  # larger M tiles


SHAPES = [GemmShape(5120, 6144, ("o_proj",)), GemmShape(14336, 5120, ("qkv_proj",))]
PROV = {"gpu_name": "NVIDIA H200", "sm_count": 132, "triton": "3.6.0", "arch": "sm_90"}


class Res:
    def __init__(self, cost: float) -> None:
        self.cost = cost
        self.error = None


def _cost(item: runner.WorkItem, c: KernelConfig) -> float:
    """A plausible synthetic time: waves of tiles, a swap bonus at small M."""
    tiles = cdiv(item.m, c.BLOCK_SIZE_M) * cdiv(item.n, c.BLOCK_SIZE_N) * c.SPLIT_K
    work = math.ceil(tiles / 132) * c.BLOCK_SIZE_M * c.BLOCK_SIZE_N * item.k / c.SPLIT_K
    swap = 0.6 if c.SWAP_AB and item.m <= 16 else 1.0
    return work * swap * (1 + 0.2 * abs(c.num_stages - 4)) * 1e-6 + 2 + 0.3 * c.SPLIT_K


def _run(tmp: Path, target: EngineTarget, cost=_cost) -> runner.TuneSummary:  # type: ignore[no-untyped-def]
    items = runner.make_items("fp8", SHAPES, [1, 16, 256], engine=target.tag)
    return runner.tune_and_polish(
        items,
        cache_path=tmp / "cache.jsonl",
        limits=H200_LIMITS,
        out_dir=tmp / "out",
        objective_factory=lambda item: lambda c: Res(cost(item, c)),
        params=runner.TuneParams(max_evals=12),
        device_name="NVIDIA_H200",
        provenance=PROV,
    )


def test_engine_run_writes_the_file_the_release_reads(tmp_path: Path) -> None:
    s = _run(tmp_path, T23)
    facts = facts_for("sglang", "0.5.23")
    path = tmp_path / "out/sglang/0.5.23" / facts.file_name_for(5120, 6144, "NVIDIA_H200")
    assert path in s.files and path.is_file()
    assert not (tmp_path / "out/autotune").exists()  # no own-kernel files from an engine run
    raw = json.loads(path.read_text())
    assert list(raw) == ["1", "16", "256"]
    allowed = set(facts.honoured_keys("sm_90"))
    assert all(set(v) <= allowed for v in raw.values())
    assert raw["1"].get("SWAP_AB") is True  # the synthetic landscape rewards the swap at M=1
    prov = O.read_provenance(path)
    assert prov is not None and prov.engine == "sglang" and prov.engine_version == "0.5.23"
    assert prov.engine_kernel_fingerprint == facts.kernel_fingerprint and prov.arch == "sm_90"


def test_default_is_shipped_when_nothing_beats_it(tmp_path: Path) -> None:
    """Where the release's default is (within 1%) the fastest, the file holds the default."""
    default = T17.default_config()

    def flat(item: runner.WorkItem, c: KernelConfig) -> float:
        return 10.0 if c == default else 10.05

    s = _run(tmp_path, T17, flat)
    assert all(r.engine_best == default for r in s.results.values())
    facts = facts_for("sglang", "0.5.17")
    raw = json.loads(
        (
            tmp_path / "out/sglang/0.5.17" / facts.file_name_for(5120, 6144, "NVIDIA_H200")
        ).read_text()
    )
    assert all(v == dict(facts.default_config) for v in raw.values())
