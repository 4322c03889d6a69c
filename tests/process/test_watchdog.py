"""Engines die with their driver (issue 19 item 7): a per-engine watchdog stops the engine's
group and the descendants that left it once the process that started it is gone, SIGKILL
included; it exits by itself with the engine and is stopped by the normal stop path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from autotune.process import EngineProcess, gpulock, watchdog
from autotune.process.gpulock import GpuLocks

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("dying_driver.py")
ORPHAN_DEADLINE_S = 10.0


def _carrying(mark: str) -> list[psutil.Process]:
    """Living processes whose environment holds DYING_DRIVER_MARK=mark (zombies excluded)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("DYING_DRIVER_MARK") == mark and p.status() != "zombie":
                out.append(p)
        except psutil.Error:
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait(pred: Callable[[], bool], timeout_s: float) -> float | None:
    """Seconds until pred() held, or None at the timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


@pytest.mark.parametrize("ignores_term", [False, True], ids=["obeys-term", "needs-sigkill"])
def test_engines_die_with_a_sigkilled_driver(tmp_path: Path, ignores_term: bool) -> None:
    mark = uuid.uuid4().hex
    args = [str(tmp_path / "server.log"), mark, "--gpu-lock", "3"]
    args += ["--child-ignores-term"] if ignores_term else []
    pp = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    locks_dir = tmp_path / "locks"
    driver = subprocess.Popen(
        [sys.executable, str(DRIVER), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": pp, gpulock.LOCK_DIR_ENV: str(locks_dir)},
    )
    try:
        assert driver.stdout is not None
        info = json.loads(driver.stdout.readline())
        engine = _carrying(mark)
        # leader + child in the group + grandchild in its own session
        assert len(engine) == 3, (tmp_path / "server.log").read_text()
        assert any(os.getsid(p.pid) != info["pid"] for p in engine), "setsid grandchild"
        assert info["watchdog"] and _alive(info["watchdog"])
        assert os.getsid(info["watchdog"]) == info["watchdog"]  # own session

        os.kill(driver.pid, signal.SIGKILL)
        t_kill = time.monotonic()
        if ignores_term:  # the engine dies only at SIGKILL, ~5 s on: its GPU is busy till then
            time.sleep(0.5)
            with GpuLocks([3], folder=locks_dir) as early:
                assert _carrying(mark) and not early.acquire(timeout_s=0)
        # not reaped on purpose: a zombie driver is as dead as a reaped one
        gone = _wait(lambda: not _carrying(mark), ORPHAN_DEADLINE_S - (time.monotonic() - t_kill))
        assert gone is not None, f"survivors: {[p.pid for p in _carrying(mark)]}"
        took = time.monotonic() - t_kill
        print(f"\nall engine processes gone {took:.2f} s after the driver's SIGKILL")
        assert took < ORPHAN_DEADLINE_S
        assert _wait(lambda: not _alive(info["watchdog"]), 2.0) is not None, "guard lingers"
        assert "is gone; stopped the engine" in (tmp_path / "server.log").read_text()
        with GpuLocks([3], folder=locks_dir) as after:  # freed with the last engine process
            assert after.acquire(timeout_s=1.0)
    finally:
        driver.kill()
        driver.wait()
        for p in _carrying(mark):
            p.kill()


def test_stop_stops_the_watchdog(tmp_path: Path) -> None:
    eng = EngineProcess(label="w")
    eng.start([sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / "s.log")
    wd = eng.watchdog_pid
    assert wd is not None and _alive(wd)
    assert psutil.Process(wd).ppid() == os.getpid()
    report = eng.stop(grace_s=2)
    assert report.clean and eng.watchdog_pid is None
    assert not _alive(wd)


def test_watchdog_exits_by_itself_when_the_engine_is_gone(tmp_path: Path) -> None:
    eng = EngineProcess(label="w")
    eng.start([sys.executable, "-c", "import time; time.sleep(0.5)"], {}, tmp_path / "s.log")
    wd = eng.watchdog_pid
    assert wd is not None
    # the engine exits; its parent (us) has not reaped it yet, and the guard still goes
    assert _wait(lambda: not _alive(wd), 5.0) is not None
    eng.stop(grace_s=1)


def test_no_watchdog_when_disabled(tmp_path: Path) -> None:
    with EngineProcess(label="w", watchdog=False) as eng:
        eng.start([sys.executable, "-c", "import time; time.sleep(60)"], {}, tmp_path / "s.log")
        assert eng.watchdog_pid is None


def test_watchdog_spares_an_engine_whose_owner_lives(tmp_path: Path) -> None:
    """Run in-process against a live owner (ourselves, not its parent): nothing is signalled,
    and it returns once the engine is gone."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    try:
        me = psutil.Process()
        t0 = time.monotonic()
        rc = watchdog.watch(
            owner_pid=me.pid,
            owner_create_time=me.create_time(),
            pid=p.pid,
            create_time=psutil.Process(p.pid).create_time(),
            token="-",
            poll_s=0.05,
        )
        assert rc == 0 and p.wait(timeout=1) == 0  # exited normally, not signalled
        assert time.monotonic() - t0 >= 0.5
    finally:
        p.kill()
        p.wait()


def test_watchdog_owner_pid_reuse_counts_as_dead() -> None:
    me = psutil.Process()
    assert watchdog.owner_alive(me.pid, me.create_time(), is_parent=False)
    assert not watchdog.owner_alive(me.pid, me.create_time() - 100, is_parent=False)
    assert not watchdog.owner_alive(2**22 + 1, 0.0, is_parent=False)


def test_watchdog_starts_without_importing_the_package() -> None:
    """psutil and the standard library only: it must be cheap to start beside every engine."""
    code = (
        "import runpy, sys; sys.argv = ['w', '--help']\n"
        "try:\n    runpy.run_path(sys.argv_path, run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('autotune', 'pydantic'))))"
    ).replace("sys.argv_path", repr(str(Path(watchdog.__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
