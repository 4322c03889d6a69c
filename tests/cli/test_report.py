"""`autotune report NAME`: writes the report folder; --json for agents; clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from autotune.cli import app
from tests.report.conftest import build_sweep


def test_report_command_json(tmp_path: Path) -> None:
    built = build_sweep(tmp_path, n_complete=4, with_failures=True)
    built.store.close()
    out = tmp_path / "out dir"
    res = CliRunner().invoke(
        app, ["report", built.sweep, "--db", str(built.db_path), "--out", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert Path(doc["report_md"]) == (out / "report.md").resolve()
    assert doc["simulated"] is True
    assert Path(doc["launch_sh"]).is_file() and Path(doc["systemd_unit"]).is_file()
    assert set(doc["plots"]) == {
        "best_so_far",
        "throughput_vs_concurrency",
        "pareto",
        "importances",
    }


def test_report_command_human_and_unknown_sweep(tmp_path: Path) -> None:
    built = build_sweep(tmp_path, n_complete=3, with_failures=False, with_study=False)
    built.store.close()
    res = CliRunner().invoke(
        app,
        [
            "report",
            built.sweep,
            "--db",
            str(built.db_path),
            "--out",
            str(tmp_path / "o"),
            "--no-plots",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "report.md" in res.stdout and "SIMULATED" in res.stdout
    # Through the console entry point: an unknown sweep is a StorageError (exit 6) that names
    # the sweeps the database has.
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from autotune.cli import main; main()",
            "report",
            "nope",
            "--db",
            str(built.db_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 6
    assert "no sweep 'nope'" in proc.stderr and built.sweep in proc.stderr
