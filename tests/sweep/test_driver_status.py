"""`autotune status` tells a sweep whose driver was killed from one that runs (issue 19 item 7):
the driver's pid, creation time and host are recorded at start and resume; a sweep marked
running whose driver is gone shows "driver": "dead", and --resume continues it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.store.db import Store
from autotune.store.models import SweepStatus
from autotune.sweep.analytic import AnalyticExecutor
from autotune.sweep.orchestrator import _driver_identity, run_sweep
from autotune.sweep.spec import parse_spec
from autotune.sweep.status import driver_state, sweep_status, sweeps_overview
from tests.sweep.conftest import make_spec


def _run(store: Store, tmp_path: Path, **kw: Any) -> Any:
    return run_sweep(
        parse_spec(make_spec(**{"budget.max_trials": 2})),
        store=store,
        out_dir=tmp_path / "out",
        executor=AnalyticExecutor(1),
        install_signals=False,
        **kw,
    )


@pytest.fixture
def dead_driver() -> Iterator[dict[str, Any]]:
    """The identity of a process that has exited (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    ident = {
        "pid": p.pid,
        "host": socket.gethostname(),
        "create_time": psutil.Process(p.pid).create_time(),
    }
    p.kill()
    p.wait()
    yield ident


def _mark_running(store: Store, driver: dict[str, Any]) -> None:
    row = store.get_sweep("t")
    store.update_sweep(
        row.id or 0, status=SweepStatus.RUNNING, notes={**(row.notes or {}), "driver": driver}
    )


def test_the_driver_is_recorded_at_start(store: Store, tmp_path: Path) -> None:
    _run(store, tmp_path)
    d = store.get_sweep("t").notes["driver"]
    me = psutil.Process()
    assert d == {"pid": me.pid, "host": socket.gethostname(), "create_time": me.create_time()}


def test_running_sweep_with_a_live_driver(store: Store, tmp_path: Path) -> None:
    _run(store, tmp_path)
    _mark_running(store, _driver_identity())  # this process drives it
    info = sweep_status(store, "t")
    assert info["status"] == "running" and info["driver"] == "alive"
    assert info["driver_pid"] == os.getpid()
    assert sweeps_overview(store)[0]["driver"] == "alive"


def test_running_sweep_with_a_dead_driver(
    store: Store, tmp_path: Path, dead_driver: dict[str, Any]
) -> None:
    _run(store, tmp_path)
    _mark_running(store, dead_driver)
    info = sweep_status(store, "t")
    assert info["status"] == "running" and info["driver"] == "dead"
    assert info["driver_pid"] == dead_driver["pid"]
    assert sweeps_overview(store)[0]["driver"] == "dead"
    # --resume continues it (a live driver would refuse: test_orchestrator)
    out = _run(store, tmp_path, resume=True)
    assert out.status == SweepStatus.FINISHED.value
    assert sweep_status(store, "t")["driver"] is None  # finished: nothing drives it


def test_reused_pid_zombie_other_host_and_no_record() -> None:
    me = _driver_identity()
    assert driver_state({"driver": me}) == "alive"
    # the PID now belongs to another process: a different creation time
    assert driver_state({"driver": {**me, "create_time": me["create_time"] - 100}}) == "dead"
    assert driver_state({"driver": {**me, "host": me["host"] + "-elsewhere"}}) == "unknown"
    assert driver_state({}) == "unknown"
    # killed but not yet reaped by its parent: dead all the same
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ident = {"pid": p.pid, "host": me["host"]}
        ident["create_time"] = psutil.Process(p.pid).create_time()
        assert driver_state({"driver": ident}) == "alive"
        p.kill()
        deadline = time.monotonic() + 5
        while psutil.Process(p.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert driver_state({"driver": ident}) == "dead"
    finally:
        p.kill()
        p.wait()


def test_finished_sweep_has_no_driver_state(store: Store, tmp_path: Path) -> None:
    _run(store, tmp_path)
    assert sweep_status(store, "t")["driver"] is None
    assert sweeps_overview(store)[0]["driver"] is None


def test_cli_status_says_the_driver_is_dead(tmp_path: Path, dead_driver: dict[str, Any]) -> None:
    from autotune.cli import main  # noqa: F401 - the app registers its commands on import

    db = tmp_path / "s.db"
    store = Store(path=db)
    _run(store, tmp_path)
    _mark_running(store, dead_driver)
    store.close()
    runner = CliRunner()
    listing = runner.invoke(app, ["status", "--db", str(db)])
    assert listing.exit_code == 0, listing.output
    assert "running" in listing.output and "driver dead" in listing.output
    one = runner.invoke(app, ["status", "t", "--db", str(db)])
    assert f"driver: dead (pid {dead_driver['pid']}" in one.output
    assert "autotune sweep --resume t" in one.output
    data = json.loads(runner.invoke(app, ["status", "t", "--db", str(db), "--json"]).output)
    assert data["status"] == "running" and data["driver"] == "dead"
    rows = json.loads(runner.invoke(app, ["status", "--db", str(db), "--json"]).output)
    assert rows["sweeps"][0]["driver"] == "dead"
