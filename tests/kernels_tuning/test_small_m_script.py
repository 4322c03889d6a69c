"""benchmarks/kernels_small_m.py without a GPU: arguments, the config sets, the table and the
summary (the timing itself runs on the GPU only)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.resources import H200_LIMITS
from kernels_tuning.space import legality, waste

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels_small_m.py"


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kernels_small_m", SCRIPT)
    assert spec is not None and spec.loader is not None
    m = importlib.util.module_from_spec(spec)
    sys.modules["kernels_small_m"] = m
    spec.loader.exec_module(m)
    return m


def test_arguments(mod: ModuleType) -> None:
    a = mod.parse_args(["--out", "x.json"])
    assert a.kinds == ["fp8", "int4"] and a.tps == [1, 2] and a.ms == [1, 2, 4, 8, 16]
    assert mod.parse_args(["--list", "--ms", "1,3"]).ms == [1, 3]
    for bad in (["--kinds", "fp9", "--out", "x"], ["--ms", "a", "--out", "x"], []):
        with pytest.raises(SystemExit):
            mod.parse_args(bad)


def test_plan_covers_ten_shapes_with_legal_sets(mod: ModuleType) -> None:
    rows = mod.plan(["fp8", "int4"], [1, 2], mod.MS, H200_LIMITS, "NO_SUCH_GPU")
    assert len(rows) == 2 * 10 * 5
    for sh, m, sets in rows:
        assert set(sets) == {"plain", "swap", "shipped"}
        assert 1 <= len(sets["plain"]) <= 16 and 1 <= len(sets["swap"]) <= 16
        assert all(not c.SWAP_AB for c in sets["plain"])
        bm = 8 if sh.kind == "int4" and m <= 8 else 16
        assert all(c.SWAP_AB and c.BLOCK_SIZE_M == bm for c in sets["swap"])
        for c in sets["plain"] + sets["swap"]:
            assert legality(c, sh.kind, 128, H200_LIMITS, sh.n, sh.k) is None, c
            assert waste(c, m, sh.n, H200_LIMITS) is None, c
        assert len(sets["shipped"]) == 1  # the default without files for this GPU name


def test_table_and_summary(mod: ModuleType) -> None:
    cfg = KernelConfig(8, 64, 128, 1, 4, 4, SWAP_AB=1)
    row = {
        "kind": "fp8",
        "n": 5120,
        "k": 6144,
        "tp": 1,
        "label": "o_proj",
        "m": 1,
        "bytes": 31_500_000,
        "variants": {"swap": {"best": cfg.as_dict()}, "plain": {"best": None}},
        "us": {"plain": 15.0, "swap": 12.0, "cublas_fp8": 11.0, "bf16": 18.0},
        "tbs": {"cublas_fp8": 2.86},
    }
    table = mod.fmt_table([row], "fp8")
    assert cfg.key() in table and "| 1.09 |" in table  # swap / cuBLAS
    s = mod.summary([row])
    assert s["fp8"]["either"]["worst"] == pytest.approx(12.0 / 11.0)
    assert s["fp8"]["plain"]["geomean"] == pytest.approx(15.0 / 11.0)
    int4 = dict(row, kind="int4", us={"plain": 20.0, "swap": 9.0, "bf16": 18.0})
    assert mod.summary([int4])["int4"]["swap"]["worst"] == pytest.approx(2.0)
    assert "| 2.00 |" in mod.fmt_table([int4], "int4")
