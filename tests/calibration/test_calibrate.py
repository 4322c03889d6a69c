"""`autotune calibrate`: a real launch's log planned again with the configuration it logged;
the machine's own memory kept and given to the sweeps on the same target."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune.calibration.calibrate import calibrate_log, detect_engine
from autotune.cli import app
from autotune.engines.sglang.server_args import parse_server_args
from autotune.errors import ConfigError
from autotune.hardware import get_gpu
from autotune.models.registry import load_card
from autotune.planner import plan_sglang
from autotune.sim.allocator import allocate_sglang, machine
from autotune.sim.startup import startup_lines
from autotune.store.db import Store

AWQ, G4080 = "qwen3.8-27b-awq-int4", "rtx-4080-super-32g"
K1: dict[str, Any] = dict(kv_cache_dtype="fp8_e4m3", page_size=1, context_length=131072,
                          max_running_requests=2, mem_fraction_static=0.92,
                          max_mamba_cache_size=6)  # fmt: skip


@dataclasses.dataclass
class ServerArgs:  # the shape of SGLang's dataclass; its repr is what the log prints
    model_path: str
    tp_size: int
    kv_cache_dtype: str
    page_size: int
    context_length: int
    max_running_requests: int
    mem_fraction_static: float
    max_mamba_cache_size: int
    cuda_graph_bs: list[int] | None = None
    lora_paths: dict[str, str] | None = None


def server_args_line() -> str:
    server_args = ServerArgs(model_path="/models/qwen", tp_size=1, **K1, cuda_graph_bs=[1, 2])
    return f"[2026-01-01 00:00:00] {server_args=}"  # srt/entrypoints/engine.py's f-string


def machine_log(tmp: Path, seed: int = 3) -> tuple[Path, Any, Any]:
    """A K1 launch's startup log on the simulated 4080 SUPER machine, with the planner's plan
    and what the machine allocated."""
    card, gpu = load_card(AWQ), get_gpu(G4080)
    plan = plan_sglang(card, gpu, K1, version="0.5.17")
    got = allocate_sglang(plan, machine(gpu, seed), card, gpu, K1, version="0.5.17")
    lines = [server_args_line()] + [ln for _, ln in startup_lines(got, card, K1, "0.5.17", 9.0)]
    path = tmp / "server.log"
    path.write_text("\n".join(lines) + "\n")
    return path, plan, got


def test_server_args_line_reads_back_as_sglang_fields() -> None:
    args = parse_server_args("noise\n" + server_args_line() + "\nmore noise")
    assert args is not None
    assert args["mem_fraction_static"] == 0.92 and args["cuda_graph_bs"] == [1, 2]
    assert args["lora_paths"] is None and args["model_path"] == "/models/qwen"
    assert parse_server_args("no such line") is None


def test_a_log_gives_the_machines_free_memory_and_weights(tmp_path: Path) -> None:
    path, plan, got = machine_log(tmp_path)
    assert detect_engine(path.read_text()) == "sglang"
    c = calibrate_log(path, model=AWQ, gpu=G4080, version="0.5.17")
    assert (c.engine, c.gpu, c.tp, c.predicted_kv) == ("sglang", G4080, 1, plan.kv_pool_tokens)
    assert c.logged_kv == got.kv_pool_tokens < plan.kv_pool_tokens
    # as the log rounds them (2 decimals)
    assert c.free_shift_gib == pytest.approx(
        got.pre_weights_free_gib - plan.pre_weights_free_gib, abs=0.006
    )
    assert c.weights_shift_gib == pytest.approx(got.weights_gib - plan.weights_gib, abs=0.006)
    assert c.kv_memory_shift_gib is None and len(c.source_sha256) == 64


def test_what_calibrate_cannot_do_is_said(tmp_path: Path) -> None:
    path, _, _ = machine_log(tmp_path)
    with pytest.raises(ConfigError, match="--engine-version"):
        calibrate_log(path, model=AWQ, gpu=G4080)  # SGLang logs do not name their version
    empty = tmp_path / "empty.log"
    empty.write_text("hello\n")
    with pytest.raises(ConfigError, match="--engine sglang"):
        calibrate_log(empty, model=AWQ, gpu=G4080, version="0.5.17")
    begun = tmp_path / "begun.log"
    begun.write_text("[2026-01-01 00:00:00] Load weight begin. avail mem=30.00 GB\n")
    with pytest.raises(ConfigError, match="no KV pool size"):
        calibrate_log(begun, model=AWQ, gpu=G4080, version="0.5.17")
    with pytest.raises(ConfigError, match="cannot read"):
        calibrate_log(tmp_path / "missing.log", model=AWQ, gpu=G4080, version="0.5.17")


def test_cli_stores_once_per_log_and_a_sweep_starts_from_it(tmp_path: Path) -> None:
    path, plan, got = machine_log(tmp_path)
    db = tmp_path / "cal.db"
    argv = ["calibrate", str(path), "--model", AWQ, "--gpu", G4080, "--engine-version", "0.5.17",
            "--db", str(db)]  # fmt: skip
    for _ in range(2):  # the same log twice: one row
        res = CliRunner().invoke(app, [*argv, "--json"])
        assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out[0]["logged_kv"] == got.kv_pool_tokens
    with Store(path=db) as store:
        rows = store.get_calibrations(engine="sglang", gpu=G4080, model=AWQ)
    assert len(rows) == 1

    from autotune.space import builtin_space
    from autotune.sweep.planning import TrialPlanner

    gate = TrialPlanner(card=load_card(AWQ), gpu=get_gpu(G4080), space=builtin_space("sglang"),
                        version="0.5.17", host_free_gib=64)  # fmt: skip
    assert gate.seed(rows) == 1 and gate.correction()["model"] == "memory"
    other = {**K1, "mem_fraction_static": 0.9}
    a = gate.assess(other)
    card, gpu = load_card(AWQ), get_gpu(G4080)
    box = machine(gpu, 11)  # the same machine, another launch
    real = allocate_sglang(
        plan_sglang(card, gpu, other, version="0.5.17"), box, card, gpu, other, version="0.5.17"
    )
    assert a.corrected_kv_pool_tokens is not None
    assert abs(a.corrected_kv_pool_tokens / real.kv_pool_tokens - 1) < 0.005
    assert abs(a.predicted_kv_pool_tokens / real.kv_pool_tokens - 1) > 0.01


def test_plan_calibrated_corrects_by_the_stored_launches(tmp_path: Path) -> None:
    path, plan, got = machine_log(tmp_path)
    db = tmp_path / "cal.db"
    sets = [x for k, v in K1.items() for x in ("--set", f"{k}={v}")]
    base = ["plan", "--model", AWQ, "--gpu", G4080, "--engine-version", "0.5.17", *sets,
            "--calibrated", "--db", str(db), "--json"]  # fmt: skip
    res = CliRunner().invoke(app, base)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["calibrated"] == {"kv_pool_tokens": None, "launches": 0,
                                                    "model": None, "speed": None}  # fmt: skip
    argv = ["calibrate", str(path), "--model", AWQ, "--gpu", G4080, "--engine-version", "0.5.17",
            "--db", str(db)]  # fmt: skip
    assert CliRunner().invoke(app, argv).exit_code == 0
    out = json.loads(CliRunner().invoke(app, base).stdout)
    assert out["kv_pool_tokens"] == plan.kv_pool_tokens  # the planner's own figure stays
    assert out["calibrated"]["launches"] == 1 and out["calibrated"]["model"] == "memory"
    assert abs(out["calibrated"]["kv_pool_tokens"] / got.kv_pool_tokens - 1) < 0.002


def test_a_real_sweeps_launch_is_kept_for_later(tmp_path: Path) -> None:
    """sweep/recording.keep_calibration: what a real launch's startup figures said, stored."""
    from types import SimpleNamespace

    from autotune.engines.base import LaunchReport
    from autotune.sweep.recording import keep_calibration

    _, plan, got = machine_log(tmp_path)
    with Store(path=tmp_path / "s.db") as store:
        spec = SimpleNamespace(name="night", simulated=False,
                               target=SimpleNamespace(engine="sglang", engine_version="0.5.17",
                                                      model=AWQ, tp=1))  # fmt: skip
        state = SimpleNamespace(store=store, setup=SimpleNamespace(spec=spec, gpu_name=G4080))
        item = SimpleNamespace(assessment=SimpleNamespace(plan=plan.model_dump()),
                               spec=SimpleNamespace(number=7))  # fmt: skip
        report = LaunchReport(kv_pool_tokens=got.kv_pool_tokens, weights_gib=got.weights_gib,
                              free_before_weights_gib=got.pre_weights_free_gib)  # fmt: skip
        res = SimpleNamespace(launch=report, log_path="/tmp/trial-7/server.log")
        keep_calibration(state, item, res)  # type: ignore[arg-type]
        (row,) = store.get_calibrations(engine="sglang", gpu=G4080, model=AWQ)
    assert row.source.startswith("sweep night trial #7") and row.logged_kv == got.kv_pool_tokens
    assert row.free_shift_gib == pytest.approx(
        got.pre_weights_free_gib - plan.pre_weights_free_gib, abs=1e-3
    )


def test_the_server_args_line_is_the_releases() -> None:
    """SGLang logs `f"{server_args=}"` at launch and ServerArgs is a dataclass with its own
    generated repr: the line parse_server_args reads (0.5.16 wheel)."""
    import zipfile

    from tests.wheels import engine_wheel_or_skip

    with zipfile.ZipFile(engine_wheel_or_skip("sglang", "0.5.16")) as z:
        engine = z.read("sglang/srt/entrypoints/engine.py").decode()
        server_args = z.read("sglang/srt/server_args.py").decode()
    assert 'logger.info(f"{server_args=}")' in engine
    cls = server_args[server_args.index("class ServerArgs") :].split("\nclass ", 1)[0]
    assert "@dataclasses.dataclass\nclass ServerArgs" in server_args
    assert "def __repr__" not in cls
