"""`autotune sim ...` passes SGLang's flags and --sim-* through to the simulator's entry."""

from __future__ import annotations

from typer.testing import CliRunner

from autotune.cli import app


def test_help_lists_sglang_and_sim_flags() -> None:
    r = CliRunner().invoke(app, ["sim", "--help"])
    assert r.exit_code == 0
    assert "--mem-fraction-static" in r.output and "--sim-time-scale" in r.output


def test_bad_flag_exits_2_and_rejected_config_exits_1() -> None:
    r = CliRunner().invoke(
        app, ["sim", "--model-path", "tiny-dense", "--sim-gpu", "h200-141g", "--bogus"]
    )
    assert r.exit_code == 2
    r = CliRunner().invoke(
        app,
        [
            "sim",
            "--model-path",
            "qwen3.8-27b-awq-int4",
            "--sim-gpu",
            "rtx-4080-super-32g",
            "--mem-fraction-static",
            "0.3",
        ],
    )
    assert r.exit_code == 1
