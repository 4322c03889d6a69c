"""`autotune calibrate` on serving-benchmark results: decode and prefill efficiency fitted
against the roofline, stored per (engine, GPU, model) with the file's provenance, and applied
by `autotune plan --calibrated`."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune.calibration.calibrate import read_launch
from autotune.calibration.speed import calibrate_bench, combine
from autotune.cli import app
from autotune.errors import ConfigError
from autotune.hardware import get_gpu
from autotune.models.registry import load_card
from autotune.planner import plan_sglang
from autotune.planner.perf import PerfModel
from autotune.store.db import Store
from tests.calibration.bench_data import c2_runs, sglang_result, write_jsonl
from tests.calibration.test_calibrate import AWQ, G4080, K1, machine_log

runner = CliRunner()
K1_SETS = [f"--set={k}={v}" for k, v in K1.items()]


def k1_perf() -> PerfModel:
    card, gpu = load_card(AWQ), get_gpu(G4080)
    return PerfModel(card, gpu, plan_sglang(card, gpu, K1, version="0.5.17"), config=dict(K1))


def test_c2_runs_sit_on_the_roofline(tmp_path: Path) -> None:
    """The roofline was fitted on C2, so C2's own runs ask for factors near 1 (a fitted row
    is not evidence: this checks the reading and the fit, not the model)."""
    path = write_jsonl(tmp_path / "c2.jsonl", c2_runs())
    sc = calibrate_bench(path, model=AWQ, gpu=G4080, engine="sglang", version="0.5.17",
                         overrides=K1)  # fmt: skip
    assert (sc.engine, sc.gpu, sc.tp, sc.config_from) == ("sglang", G4080, 1, "--set flags")
    assert sc.source_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    decode, n_decode = sc.factor("decode")
    prefill, n_prefill = sc.factor("prefill")
    assert n_decode == 3 and decode == pytest.approx(1.0, abs=0.03)
    # the 128-token TTFT of 285 ms is far slower than the roofline; the median leaves it out
    assert n_prefill == 6 and prefill == pytest.approx(1.0, abs=0.03)
    odd = [s for s in sc.samples if s.phase == "prefill" and s.input_len == 128]
    assert odd and odd[0].ratio < 0.5
    assert any("2 concurrent requests queue" in w for w in sc.skipped)


def test_a_slower_machine_gives_its_factor_exactly(tmp_path: Path) -> None:
    """Every time stretched by 1.25 over the roofline's own prediction: each run asks for
    1/1.25, decode (per-stream speed) and prefill (TTFT less the request overhead) alike."""
    perf = k1_perf()
    runs = []
    for i, o, s in ((128, 256, 1), (1024, 512, 2), (32768, 128, 1)):
        tpot = 1000 * s / perf.decode_tok_s(s, i + o // 2) * 1.25
        ttft = perf.request_overhead_s + (perf.prefill_s(i) - perf.request_overhead_s) * 1.25
        runs.append(sglang_result(input_len=i, output_len=o, tpot_ms=tpot, ttft_ms=1000 * ttft,
                                  max_concurrency=s))  # fmt: skip
    path = write_jsonl(tmp_path / "slow.jsonl", runs)
    sc = calibrate_bench(path, model=AWQ, gpu=G4080, engine="sglang", version="0.5.17",
                         overrides=K1)  # fmt: skip
    assert sc.factor("decode") == (pytest.approx(0.8, abs=2e-4), 3)
    assert sc.factor("prefill") == (pytest.approx(0.8, abs=2e-4), 2)
    # applied, the model gives back the measured figures
    cal = perf.with_efficiency(decode_eff=0.8, prefill_eff=0.8)
    assert cal.decode_tok_s(2, 1280) == pytest.approx(perf.decode_tok_s(2, 1280) * 0.8)
    assert cal.prefill_s(32768) == pytest.approx(runs[2]["mean_ttft_ms"] / 1000, rel=1e-9)
    assert (perf.decode_eff, perf.prefill_eff) == (1.0, 1.0)  # the original is untouched


def test_combine_is_the_median_of_log_ratios() -> None:
    assert combine([]) == (None, 0)
    f, n = combine([0.9, 0.8, 3.0])
    assert (f, n) == (0.9, 3)
    f, n = combine([0.5, 2.0])
    assert f == pytest.approx(math.exp((math.log(0.5) + math.log(2.0)) / 2)) and n == 2


def test_the_config_from_the_startup_log_and_the_files_server_info(tmp_path: Path) -> None:
    log, _, _ = machine_log(tmp_path)
    launch = read_launch(log)
    assert launch.engine == "sglang" and launch.config["mem_fraction_static"] == 0.92
    path = write_jsonl(tmp_path / "c2.jsonl", c2_runs())
    with pytest.raises(ConfigError, match="--engine-version"):
        calibrate_bench(path, model=AWQ, gpu=G4080, launch=launch)
    sc = calibrate_bench(path, model=AWQ, gpu=G4080, launch=launch, version="0.5.17")
    assert sc.config_from == f"startup log {log}" and sc.factor("decode")[1] == 3
    # SGLang 0.5.8+ records the server's /server_info: its ServerArgs and version
    info = {
        **K1,
        "model_path": "/models/qwen",
        "tp_size": 1,
        "version": "0.5.17",
        "max_total_num_tokens": 356237,
        "internal_states": [{"avg_spec_accept_length": 1}],
    }
    runs = [{**r, "server_info": info} for r in c2_runs()]
    sc2 = calibrate_bench(write_jsonl(tmp_path / "info.jsonl", runs), model=AWQ, gpu=G4080)
    assert (sc2.engine, sc2.engine_version, sc2.config_from) == (
        "sglang",
        "0.5.17",
        "the file's server_info",
    )
    assert sc2.factor("decode") == sc.factor("decode")


def _plan_calibrated(db: Path) -> dict[str, Any]:
    r = runner.invoke(app, ["plan", "--model", AWQ, "--gpu", G4080, "--engine-version",
                            "0.5.17", *K1_SETS, "--calibrated", "--db", str(db), "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    return dict(json.loads(r.output)["calibrated"])


def test_cli_stores_factors_and_plan_calibrated_applies_them(tmp_path: Path) -> None:
    db = tmp_path / "at.db"
    before = _plan_calibrated(db)
    assert before["speed"] is None
    log, _, _ = machine_log(tmp_path)
    slow = write_jsonl(tmp_path / "slow.jsonl", c2_runs(slow=1.25))
    args = ["calibrate", str(log), str(slow), "--model", AWQ, "--gpu", G4080,
            "--engine-version", "0.5.17", "--db", str(db)]  # fmt: skip
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "KV pool" in r.output and "decode efficiency x" in r.output
    assert "from 3 run(s) of this file" in r.output
    with Store(path=db) as store:
        rows = store.get_speed_calibrations(engine="sglang", gpu=G4080, model=AWQ)
        assert len(rows) == 9 and {r.source for r in rows} == {str(slow)}
        assert rows[0].source_sha256 == hashlib.sha256(slow.read_bytes()).hexdigest()
        assert len(store.get_calibrations(engine="sglang", gpu=G4080, model=AWQ)) == 1
    # the same file again replaces its rows
    assert runner.invoke(app, args).exit_code == 0
    with Store(path=db) as store:
        assert len(store.get_speed_calibrations(engine="sglang", gpu=G4080, model=AWQ)) == 9
    sp = _plan_calibrated(db)["speed"]
    assert sp["decode_runs"] == 3 and sp["prefill_runs"] == 6
    assert sp["decode_efficiency"] == pytest.approx(0.8, abs=0.03)
    base = k1_perf()
    assert sp["decode_tok_s"] == pytest.approx(
        base.decode_tok_s(1) * sp["decode_efficiency"], rel=1e-3
    )
    assert sp["prefill_tok_s"]["8192"] < base.prefill_tok_s(8192)
    assert sp["sources"] == [str(slow)]
    human = runner.invoke(app, ["plan", "--model", AWQ, "--gpu", G4080, "--engine-version",
                                "0.5.17", *K1_SETS, "--calibrated", "--db", str(db)])  # fmt: skip
    assert human.exit_code == 0, human.output
    line = next(x for x in human.output.splitlines() if "speed, calibrated" in x)
    assert "over 3 run(s)" in line and "over 6 run(s)" in line


def test_cli_bench_alone_with_flags_and_dry_run(tmp_path: Path) -> None:
    db = tmp_path / "at.db"
    bench = write_jsonl(tmp_path / "c2.jsonl", c2_runs())
    r = runner.invoke(app, ["calibrate", str(bench), "--model", AWQ, "--gpu", G4080,
                            "--engine", "sglang", "--engine-version", "0.5.17", *K1_SETS,
                            "--db", str(db), "--dry-run", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    (sc,) = out["speed"]
    assert sc["config_from"] == "--set flags" and sc["decode_runs"] == 3
    assert out["memory"] == [] and out["stored_speed"] == []
    assert not db.exists() or not Store(path=db).get_speed_calibrations(
        engine="sglang", gpu=G4080, model=AWQ
    )


def test_cli_refuses_two_launches_for_one_benchmark(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    log_a, _, _ = machine_log(tmp_path / "a")
    log_b, _, _ = machine_log(tmp_path / "b", seed=4)
    bench = write_jsonl(tmp_path / "c2.jsonl", c2_runs())
    r = runner.invoke(app, ["calibrate", str(log_a), str(log_b), str(bench), "--model", AWQ,
                            "--gpu", G4080, "--engine-version", "0.5.17",
                            "--db", str(tmp_path / "at.db")])  # fmt: skip
    assert isinstance(r.exception, ConfigError)  # the entry point maps it to exit 2
    assert "one calibrate call per launch" in str(r.exception)
