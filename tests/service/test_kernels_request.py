"""The kernel-tuning request's command line: what the service and the MCP tool run."""

from __future__ import annotations

from typer.testing import CliRunner

from autotune.service.schemas import KernelsRequest


def test_deterministic_reaches_the_command_line_and_the_cli_takes_it() -> None:
    base = KernelsRequest(name="k", nk=["5120,3072"], kind="int4")
    assert "--deterministic" not in base.cli_args("out")
    args = base.model_copy(update={"deterministic": True}).cli_args("out")
    assert args[:2] == ["kernels", "tune"] and "--deterministic" in args

    from autotune.cli import app

    res = CliRunner().invoke(app, ["kernels", "tune", "--help"], terminal_width=200)
    assert res.exit_code == 0 and "--deterministic" in res.output
