"""benchmarks/vllm_awq_plugin.py without a GPU: arguments, the built-in shape list against the
model card, the table and summary, and a smoke run on CPU under Triton's interpreter in a
process where pydantic, optuna, ray and sqlmodel cannot be imported (the H200 run has none)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from autotune.models import load_card
from kernels_tuning import output as O
from kernels_tuning.shapes import gemm_shapes
from kernels_tuning.space import KernelConfig

from .test_vllm_awq import _wheel

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "vllm_awq_plugin.py"
BLOCKED = ("pydantic", "optuna", "ray", "sqlmodel", "sqlalchemy", "fastapi", "yaml", "mcp")


@pytest.fixture(scope="module")
def mod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vllm_awq_plugin_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    m = importlib.util.module_from_spec(spec)
    sys.modules["vllm_awq_plugin_bench"] = m
    spec.loader.exec_module(m)
    return m


def test_arguments(mod: ModuleType) -> None:
    a = mod.parse_args(["--awq-triton", "a.py", "--out", "r.json"])
    assert a.ms == [1, 2, 4, 8, 16] and a.rounds == 2 and a.device == "cuda"
    assert [(s.n, s.k) for s in a.shapes] == [(n, k) for n, k, _ in mod.DEFAULT_SHAPES]
    b = mod.parse_args(["--list", "--ms", "16,1,1", "--nk", "5120,6144", "--nk", "256x256"])
    assert b.ms == [1, 16] and [(s.n, s.k) for s in b.shapes] == [(5120, 6144), (256, 256)]
    for bad in (
        [],
        ["--out", "r.json"],
        ["--list", "--ms", "a"],
        ["--list", "--ms", "0"],
        ["--list", "--nk", "5120"],
        ["--list", "--nk", "5121,6144"],
        ["--awq-triton", "a.py", "--out", "r.json", "--rounds", "0"],
    ):
        with pytest.raises(SystemExit):
            mod.parse_args(bad)


def test_built_in_shapes_are_the_cards(mod: ModuleType) -> None:
    card = gemm_shapes(load_card(mod.CARD), 1, "int4")
    assert [(s.n, s.k, s.label) for s in card] == list(mod.DEFAULT_SHAPES)
    assert [(s.n, s.k, s.label) for s in mod.card_shapes()] == list(mod.DEFAULT_SHAPES)


def test_table_and_summary(mod: ModuleType) -> None:
    ok = {"ok": True, "gate": True, "rel_err": 1e-4, "detail": ""}
    row = {
        "label": "o_proj+out_proj",
        "n": 5120,
        "k": 6144,
        "m": 1,
        "config": "m16n256k128g1w4s3k12a",
        "route": "ours",
        "plugin_gate": {"ok": True, "detail": ""},
        "us": {"vllm": 40.0, "plugin": 12.5},
        "ratio": 3.2,
        "checks_ok": True,
        "eager_check": {"vllm": ok, "plugin": ok},
        "timed_check": {"vllm": ok, "plugin": ok},
    }
    other = dict(row, m=32, ratio=1.0, route="no tuned file for this GPU", config=None)
    small = dict(row, m=16, ratio=0.8)
    s = mod.summary([row, small, other])
    assert s["geomean_ratio_m_le_16"] == pytest.approx((3.2 * 0.8) ** 0.5)
    assert s["min_ratio_m_le_16"] == 0.8 and s["routed_ours"] == 2 and s["checks_ok"]
    table = mod.fmt_table([row, other])
    assert "| 40.00 | 12.50 | 3.20 | ok |" in table
    assert "no tuned file for this GPU" in table


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter smoke run")
def test_smoke_run_on_cpu_without_the_heavy_packages(tmp_path: Path) -> None:
    cfg = KernelConfig(16, 128, 64, 1, 4, 3, SPLIT_K=2, ATOMIC_REDUCE=1)
    O.merge_write(
        tmp_path / "cfg" / "autotune" / O.int4_filename(128, 128, "CPU"), {1: cfg.as_dict()}
    )
    out = tmp_path / "r.json"
    code = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {BLOCKED!r}:
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
import importlib.util
spec = importlib.util.spec_from_file_location('bench', {str(SCRIPT)!r})
bench = sys.modules['bench'] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
from autotune.plugins import vllm_awq
vllm_awq.PREGATE_MAX_M = 2  # the interpreter is slow; the GPU run gates M up to 255
assert bench.main(['--list']) == 0
sys.exit(bench.main(['--awq-triton', {str(_wheel())!r}, '--out', {str(out)!r},
                     '--nk', '128,128', '--ms', '1', '--rounds', '1', '--device', 'cpu']))
"""
    env = dict(os.environ, AUTOTUNE_KERNEL_CONFIG_DIR=str(tmp_path / "cfg"), TRITON_INTERPRET="1")
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "model card not loadable" in res.stdout  # --list fell back to the built-in list
    got = json.loads(out.read_text())
    (row,) = got["rows"]
    assert row["route"] == "ours" and row["config"] == cfg.key() and row["checks_ok"]
    assert row["plugin_gate"] == {"ok": True, "detail": ""}
    assert set(row["timed_check"]) == {"vllm", "plugin"} and row["us"]["vllm"] is None
    assert got["summary"]["checks_ok"] and got["summary"]["routed_ours"] == 1
