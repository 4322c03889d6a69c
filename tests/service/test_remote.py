"""`autotune --server URL sweep|status|report`: the same commands against a running service,
through the real CLI in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.conftest import (
    CLI,
    ROOT,
    Served,
    procs_of,
    start_service,
    stop_jobs,
    stop_service,
    tiny_yaml,
    write_config,
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    state = tmp_path_factory.mktemp("remote") / "state"
    write_config(state)
    s = start_service(state)
    try:
        yield s
    finally:
        stop_service(s)
        stop_jobs(state)
        assert procs_of(state) == []


def run(
    served: Served, *args: str, token_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(token_env or {"AUTOTUNE_TOKEN_FILE": str(served.state / "token")})
    return subprocess.run(
        [*CLI, "--server", served.url, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_sweep_status_report_through_the_service(served: Served, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(tiny_yaml("cli1", **{"budget.max_trials": 2}))
    r = run(served, "sweep", str(spec), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    final = json.loads(r.stdout)
    assert final["name"] == "cli1" and final["state"] == "finished"
    assert final["progress"]["launched"] == 2

    r = run(served, "status", "cli1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["best"]["value"] == final["best"]["value"]
    r = run(served, "status")
    assert r.returncode == 0 and "cli1" in r.stdout and "finished" in r.stdout

    out = tmp_path / "rep"
    r = run(served, "report", "cli1", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    paths = json.loads(r.stdout)
    assert (out / "report.md").read_text().startswith("# autotune report: cli1")
    assert json.loads((out / "winner.json").read_text())["sweep"] == "cli1"
    assert paths["launch_sh"] and os.access(out / "launch.sh", os.X_OK)

    # The stored sweep can be continued remotely, too (no spec file).
    r = run(served, "sweep", "--resume", "cli1", "--max-trials", "3")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sweep cli1: finished" in r.stdout and "launched 3 of 3" in r.stdout


def test_errors_keep_the_local_exit_codes(served: Served, tmp_path: Path) -> None:
    r = run(served, "status", "nosuch")
    assert r.returncode == 6 and "no sweep 'nosuch'" in r.stderr
    r = run(served, "status", "--db", str(tmp_path / "x.db"))
    assert r.returncode == 2 and "--db" in r.stderr
    spec = tmp_path / "bad.yaml"
    spec.write_text(tiny_yaml("cli2", **{"engine.launcher": ["/bin/true"]}))
    r = run(served, "sweep", str(spec))
    assert r.returncode == 2 and "engine.launcher" in r.stderr and "HTTP 403" in r.stderr
    r = run(served, "cards")
    assert r.returncode == 2 and "`cards` runs locally" in r.stderr
    r = run(served, "status", token_env={"AUTOTUNE_TOKEN": "wrong-token-of-some-length"})
    assert r.returncode == 2 and "invalid bearer token" in r.stderr
    r = run(served, "status", token_env={"AUTOTUNE_TOKEN_FILE": str(tmp_path / "none")})
    assert r.returncode == 2 and "no service token" in r.stderr
