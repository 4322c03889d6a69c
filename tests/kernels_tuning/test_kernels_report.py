"""reports/kernels/: the dataset describes the shipped configs, and both pages are what their
generators render from it (benchmarks/kernels_report.py, benchmarks/engine_kernels_report.py)."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
DATA = ROOT / "reports" / "kernels" / "data" / "measurements.csv"


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kernels_report", BENCH / "kernels_report.py")
    assert spec is not None and spec.loader is not None
    m = importlib.util.module_from_spec(spec)
    sys.modules["kernels_report"] = m
    spec.loader.exec_module(m)
    return m


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("script", ["kernels_report.py", "engine_kernels_report.py"])
def test_pages_are_up_to_date(script: str) -> None:
    res = run(script, "--check")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    ("script", "page"),
    [("kernels_report.py", "README.md"), ("engine_kernels_report.py", "engine-kernels.md")],
)
def test_check_fails_on_a_stale_page(script: str, page: str, tmp_path: Path) -> None:
    stale = tmp_path / page
    stale.write_text((ROOT / "reports" / "kernels" / page).read_text() + "\nedited by hand\n")
    res = run(script, "--check", "--out", str(stale))
    assert res.returncode == 1 and "out of date" in res.stderr


def test_dataset_is_one_compact_table_of_the_shipped_entries(mod: ModuleType) -> None:
    assert DATA.stat().st_size < 400_000
    with DATA.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames or ()) == mod.COLUMNS
    folders = {r["folder"] for r in rows}
    assert folders == {"autotune", "sglang/0.5.17", "sglang/0.5.23"}
    assert len(rows) == len(mod.shipped(mod.CONFIGS)) == 800
    assert mod.mismatches(rows, mod.CONFIGS) == []
    assert all(r["gate"] == "pass" and float(r["us"]) > 0 for r in rows)
    # Our own files: every entry timed against the default and its baselines.
    own = [r for r in rows if r["folder"] == "autotune"]
    assert all(r["default_us"] and r["bf16_us"] for r in own)
    assert all(r["cublas_fp8_us"] for r in own if r["kind"] == "fp8")
    assert all(r["vllm_awq_us"] for r in own if r["kind"] == "int4")


def test_a_row_with_another_config_than_the_file_is_reported(mod: ModuleType) -> None:
    rows = mod.load(DATA)
    rows[0] = {**rows[0], "config": "16/32/128 g1 w4 s2"}
    (problem,) = mod.mismatches(rows, mod.CONFIGS)
    assert "'16/32/128 g1 w4 s2'" in problem and "shipped" in problem
    assert len(mod.mismatches(rows[1:], mod.CONFIGS)) == 1  # a shipped entry without a row


def test_config_short_form_round_trips(mod: ModuleType) -> None:
    for config, _ in mod.shipped(mod.CONFIGS).values():
        assert mod.cfg_short(mod.parse_cfg(config)) == config
    with pytest.raises(ValueError, match="unknown part"):
        mod.parse_cfg("16/64/128 g1 w4 s3 zz2")
