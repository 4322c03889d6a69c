"""Unattended operation end to end, through the real CLI in a subprocess: `autotune status`
reads the database while the sweep runs; the driver is killed with SIGKILL mid-trial, its engine
dies with it and `autotune status` says the driver is dead; `autotune sweep --resume` keeps
every completed trial and reruns the one that was cut off."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from autotune.store.db import Store
from autotune.store.models import SweepStatus, TrialStatus
from tests.sweep.conftest import live_children, procs_matching, write_spec
from tests.sweep.test_faults import fake_spec

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from autotune.cli import main; main()"]


def _wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigkill_then_resume(tmp_path: Path) -> None:
    marker = str(tmp_path / "fake-model")
    spec = fake_spec(
        tmp_path,
        **{
            "budget.max_trials": 4,
            "search.known_good": False,
            "space.overrides.chunked_prefill_size": 8192,  # the fake engine's well-behaved mode
            "engine.env": {"FAKE_TOKEN_DELAY_S": "0.1"},
        },
    )
    path = write_spec(tmp_path, spec)
    db = tmp_path / "sweep.db"
    args = [
        "sweep",
        str(path),
        "--db",
        str(db),
        "--out",
        str(tmp_path / "out"),
        "--json",
        "--no-report",
    ]
    driver = subprocess.Popen(
        [*CLI, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    store = Store(path=db)
    try:

        def one_done_one_running() -> bool:
            try:
                sweep = store.find_sweep("t")
            except Exception:
                return False
            if sweep is None:
                return False
            rows = store.get_trials(sweep.id or 0)
            done = [r for r in rows if r.status == TrialStatus.COMPLETE.value]
            running = [r for r in rows if r.status == TrialStatus.RUNNING.value]
            return bool(done and running and procs_matching(marker))

        _wait(one_done_one_running, 90, "one complete trial and a running engine")
        status = subprocess.run(
            [*CLI, "status", "t", "--db", str(db), "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        live = json.loads(status.stdout)
        assert live["status"] == SweepStatus.RUNNING.value and live["launched"] >= 1

        _wait(one_done_one_running, 90, "an engine running again")
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
        sweep_id = store.get_sweep("t").id or 0
        before = {r.number: (r.status, r.value) for r in store.get_trials(sweep_id)}
        cut = [n for n, (st, _) in before.items() if st == TrialStatus.RUNNING.value]
        assert len(cut) == 1
        # the engine's watchdog stops it once its driver is gone (issue 19 item 7)
        _wait(lambda: not procs_matching(marker), 10, "the engine to die with its driver")
        dead = subprocess.run(
            [*CLI, "status", "t", "--db", str(db), "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        shown = json.loads(dead.stdout)
        assert shown["status"] == SweepStatus.RUNNING.value and shown["driver"] == "dead"

        resumed = subprocess.run(
            [*CLI, "sweep", "--resume", "t", "--db", str(db), "--json", "--no-report"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        out = json.loads(resumed.stdout)
        assert out["status"] == SweepStatus.FINISHED.value and out["launched"] == 4

        rows = {r.number: r for r in store.get_trials(sweep_id)}
        for n, (st, value) in before.items():  # nothing that had completed was lost
            if st == TrialStatus.COMPLETE.value:
                assert (rows[n].status, rows[n].value) == (st, value)
        assert rows[cut[0]].status == TrialStatus.INTERRUPTED.value
        reruns = [r for r in rows.values() if (r.launch or {}).get("source") == f"rerun:#{cut[0]}"]
        assert len(reruns) == 1 and reruns[0].status == TrialStatus.COMPLETE.value
        assert reruns[0].config == rows[cut[0]].config
        assert str(tmp_path / "out") in (reruns[0].log_path or "")  # same output folder
        assert procs_matching(marker) == []
        assert live_children() == []
    finally:
        if driver.poll() is None:
            driver.kill()
        store.close()


def test_sigterm_stops_running_trials_and_marks_them(tmp_path: Path) -> None:
    marker = str(tmp_path / "fake-model")
    spec = fake_spec(
        tmp_path,
        **{
            "budget.max_trials": 3,
            "search.known_good": False,
            "space.overrides.chunked_prefill_size": 8192,
            "engine.env": {"FAKE_TOKEN_DELAY_S": "0.2"},
        },
    )
    path = write_spec(tmp_path, spec)
    db = tmp_path / "sweep.db"
    driver = subprocess.Popen(
        [
            *CLI,
            "sweep",
            str(path),
            "--db",
            str(db),
            "--out",
            str(tmp_path / "out"),
            "--json",
            "--no-report",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    store = Store(path=db)
    try:
        _wait(lambda: bool(procs_matching(marker)), 90, "a running engine")
        time.sleep(0.5)
        driver.send_signal(signal.SIGTERM)
        out, err = driver.communicate(timeout=60)
        assert driver.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
        outcome = json.loads(out)
        assert outcome["status"] == SweepStatus.STOPPED.value
        rows = store.get_trials(store.get_sweep("t").id or 0)
        assert [r.status for r in rows] == [TrialStatus.INTERRUPTED.value]
        assert procs_matching(marker) == []
    finally:
        if driver.poll() is None:
            driver.kill()
        store.close()
