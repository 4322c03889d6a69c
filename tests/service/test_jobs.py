"""Jobs: real `autotune` processes in their own session, logged to a file, recorded with their
start time; a recorded PID that now belongs to another process is never trusted or signalled
(P9); jobs of another manager (a restarted service) are adopted; the table survives
concurrent writers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from autotune.service.errors import Conflict
from autotune.service.jobs import JobManager, JobRecord, JobTable
from autotune.service.state import StateDir
from tests.service.conftest import free_port, wait_for


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    return StateDir.open(tmp_path / "state")


def sim_args() -> list[str]:
    """`autotune sim`: a server that runs until it is stopped."""
    return [
        "sim",
        "--model-path",
        "qwen3.8-27b-awq-int4",
        "--sim-gpu",
        "rtx-4080-super-32g",
        "--port",
        str(free_port()),
        "--sim-max-startup-s",
        "0.1",
    ]


def test_job_runs_logs_and_exits(state: StateDir) -> None:
    jobs = JobManager(state)
    rec = jobs.start("cards", ["cards"])
    assert rec.runs == 1 and rec.argv[:2] == [sys.executable, "-c"]
    assert os.getpgid(rec.pid) == rec.pid  # its own process group
    done = wait_for(lambda: (r := jobs.get("cards")) and r.state == "exited" and r, 60, "exit")
    assert done.exit_code == 0
    assert "qwen3.8-27b-awq-int4" in jobs.log_tail("cards")
    again = jobs.start("cards", ["cards"])
    assert again.runs == 2 and again.pid != rec.pid
    wait_for(lambda: jobs.get("cards").state == "exited", 60, "second exit")


def test_stop_signals_the_group_and_refuses_twice(state: StateDir) -> None:
    jobs = JobManager(state)
    jobs.start_monitor()
    try:
        rec = jobs.start("sim", sim_args())
        with pytest.raises(Conflict, match="already running"):
            jobs.start("sim", sim_args())
        time.sleep(0.5)
        assert jobs.signal("sim").stop_requested == "SIGTERM"
        done = jobs.wait("sim", 30)
        assert done is not None and done.state == "exited" and done.exit_code is not None
        assert not psutil.pid_exists(rec.pid) or psutil.Process(rec.pid).status() == "zombie"
        with pytest.raises(Conflict, match="not running"):
            jobs.signal("sim")
    finally:
        jobs.stop_monitor()


def test_a_recycled_pid_is_not_ours(state: StateDir) -> None:
    """The table says pid X runs job j; X is alive but started at another time (PID reuse):
    the job counts as dead, is handed to recovery, and X is never signalled."""
    table = JobTable(state)
    with table.locked() as jobs:
        jobs["j"] = JobRecord(
            name="j",
            argv=["x"],
            pid=os.getpid(),  # alive: this test
            create_time=psutil.Process().create_time() - 1000.0,
            log_path=str(state.log_file("j")),
            started_at=datetime.now(UTC),
        )
    manager = JobManager(state)
    with pytest.raises(Conflict, match="not running"):
        manager.signal("j")  # would have been SIGTERM to pytest
    dead = manager.dead_since_last_run()
    assert [r.name for r in dead] == ["j"]
    assert manager.get("j").state == "exited" and manager.get("j").exit_code is None
    assert manager.dead_since_last_run() == []


def test_another_managers_job_is_adopted_and_stopped(state: StateDir) -> None:
    first = JobManager(state)
    rec = first.start("sim", sim_args())
    second = JobManager(state)  # a restarted service: not the parent of the job
    try:
        assert second.alive("sim") and second.dead_since_last_run() == []
        second.signal("sim")
        wait_for(
            lambda: first._children["sim"].poll() is not None,  # reap as the real parent would
            30,
            "the adopted job to stop",
        )
        assert not second.alive("sim")
        assert first._children["sim"].returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
    finally:
        if first._children["sim"].poll() is None:
            os.killpg(rec.pid, signal.SIGKILL)


def test_table_survives_concurrent_writers(state: StateDir) -> None:
    code = (
        "import sys, datetime\n"
        "from autotune.service.jobs import JobTable, JobRecord\n"
        "from autotune.service.state import StateDir\n"
        "t = JobTable(StateDir.open(sys.argv[1]))\n"
        "for i in range(30):\n"
        "    with t.locked() as jobs:\n"
        "        n = f'{sys.argv[2]}-{i}'\n"
        "        jobs[n] = JobRecord(name=n, argv=[], pid=1, create_time=0.0, log_path='',\n"
        "            started_at=datetime.datetime.now(datetime.UTC))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(state.root), tag]) for tag in "ab"]
    for p in procs:
        assert p.wait(timeout=60) == 0
    assert len(JobTable(state).snapshot()) == 60


@pytest.mark.parametrize("text", ["{not json", '["a list"]', '{"jobs": [1, 2]}'])
def test_an_unreadable_table_is_kept_aside_not_overwritten(state: StateDir, text: str) -> None:
    # it may be the only record of the PIDs of jobs still running
    state.jobs.write_text(text)
    table = JobTable(state)
    assert table.snapshot() == {}
    (aside,) = state.jobs.parent.glob("jobs.json.corrupt-*")
    assert aside.read_text() == text
