"""EngineProcess against real processes (tests/process/fake_engine.py), on CPU."""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import psutil
import pytest

from autotune.errors import EngineLaunchError, EngineStartupTimeout, PortInUseError
from autotune.process import EngineProcess, StopReport, port_is_free, tree
from tests.process.conftest import is_ready_line


def _health(port: int) -> str:
    return f"http://127.0.0.1:{port}/health"


def _child_pid(eng: EngineProcess, timeout_s: float = 5.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = re.search(r"child pid (\d+)", eng.log_tail())
        if m and "child up" in eng.log_tail():
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError(f"no child in log:\n{eng.log_tail()}")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_start_ready_stop(engine_argv, tmp_path: Path) -> None:
    argv, port = engine_argv("--ready-delay", "0.3", "--spawn-child")
    log = tmp_path / "trial" / "server.log"
    with EngineProcess(port=port, label="t0") as eng:
        t0 = time.monotonic()
        pid = eng.start(argv, {"FAKE_FLAG": "1"}, log)
        assert eng.pgid == pid  # own session => own group
        took = eng.wait_ready(_health(port), deadline_s=10, is_ready_line=is_ready_line)
        # the ready delay runs from the engine's start, not from wait_ready's (start also
        # spawns the watchdog, which a loaded machine may make slow)
        assert took < 10 and time.monotonic() - t0 >= 0.3
        assert eng.is_alive() and eng.returncode is None
        child = _child_pid(eng)
        assert tree.group_members(pid) and psutil.pid_exists(child)
        assert not port_is_free(port)
    report = eng.stop_report
    assert isinstance(report, StopReport)
    assert report.signal == "SIGTERM"
    assert report.leftovers == [] and report.port_freed is True
    assert report.gpu_memory_freed is None  # no GPUs given
    assert report.returncode == -15 and report.clean
    assert _gone(pid) and _gone(child)
    assert tree.group_members(pid) == []
    assert "fired up" in log.read_text()
    assert eng.stop() is report  # idempotent


def test_sigkill_escalation_reaches_grandchild(engine_argv, tmp_path: Path) -> None:
    argv, port = engine_argv("--spawn-child", "--child-ignores-term")
    with EngineProcess(port=port) as eng:
        pid = eng.start(argv, {}, tmp_path / "s.log")
        eng.wait_ready(_health(port), deadline_s=10, is_ready_line=is_ready_line)
        child = _child_pid(eng)
        t0 = time.monotonic()
        report = eng.stop(grace_s=0.5)
    assert report.signal == "SIGKILL"
    assert 0.5 <= time.monotonic() - t0 < 3
    assert report.leftovers == [] and report.port_freed
    assert _gone(pid) and _gone(child)


def test_leader_ignoring_term_is_killed(engine_argv, tmp_path: Path) -> None:
    argv, port = engine_argv("--ignore-term")
    eng = EngineProcess(port=port)
    eng.start(argv, {}, tmp_path / "s.log")
    eng.wait_ready(_health(port), deadline_s=10, is_ready_line=is_ready_line)
    report = eng.stop(grace_s=0.3)
    assert report.signal == "SIGKILL" and report.returncode == -9
    assert report.port_freed is True


def test_descendant_that_left_the_group_is_stopped(engine_argv, tmp_path: Path) -> None:
    argv, port = engine_argv("--spawn-child", "--child-setsid")
    with EngineProcess(port=port) as eng:
        pid = eng.start(argv, {}, tmp_path / "s.log")
        eng.wait_ready(_health(port), deadline_s=10, is_ready_line=is_ready_line)
        child = _child_pid(eng)
        assert psutil.Process(child).pid not in {p.pid for p in tree.group_members(pid)}
    assert eng.stop_report is not None and eng.stop_report.leftovers == []
    assert _gone(child)


def test_exit_at_start_raises_launch_error(engine_argv, tmp_path: Path) -> None:
    argv, port = engine_argv("--exit-code", "3")
    with EngineProcess(port=port, label="bad") as eng:
        eng.start(argv, {}, tmp_path / "s.log")
        with pytest.raises(EngineLaunchError) as ei:
            eng.wait_ready(_health(port), deadline_s=10, is_ready_line=is_ready_line)
    err = ei.value
    assert err.returncode == 3 and "code 3" in str(err)
    assert "fake engine told to fail at start" in err.log_tail
    assert err.command == argv
    assert eng.stop_report is not None and eng.stop_report.signal is None
    assert eng.stop_report.returncode == 3


def test_never_ready_times_out_quickly(engine_argv, tmp_path: Path) -> None:
    argv, port = engine_argv("--never-ready")
    with EngineProcess(port=port) as eng:
        eng.start(argv, {}, tmp_path / "s.log")
        t0 = time.monotonic()
        with pytest.raises(EngineStartupTimeout) as ei:
            eng.wait_ready(_health(port), deadline_s=0.8, is_ready_line=is_ready_line)
        assert time.monotonic() - t0 < 2.0
        assert eng.is_alive()  # left for stop()/__exit__
    assert "ready line" in str(ei.value)
    assert "listening on" in ei.value.log_tail
    assert eng.stop_report is not None and eng.stop_report.port_freed


def test_health_without_ready_line_is_not_ready(engine_argv, tmp_path: Path) -> None:
    """Readiness needs both: a ready line nobody prints keeps waiting although /health is 200."""
    argv, port = engine_argv()
    with EngineProcess(port=port) as eng:
        eng.start(argv, {}, tmp_path / "s.log")
        with pytest.raises(EngineStartupTimeout, match="ready line"):
            eng.wait_ready(_health(port), deadline_s=0.8, is_ready_line=lambda s: "nope" in s)
        # The health check alone is enough when no ready line is asked for.
        eng.wait_ready(_health(port), deadline_s=5)


def test_port_in_use_is_refused_before_spawn(engine_argv, tmp_path: Path) -> None:
    argv, port = engine_argv()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        eng = EngineProcess(port=port)
        with pytest.raises(EngineLaunchError, match=f"port {port} .* already in use") as info:
            eng.start(argv, {}, tmp_path / "s.log")
        assert eng.pid is None
        # typed, so callers classify it without reading the message
        assert isinstance(info.value, PortInUseError)
        assert (info.value.port, info.value.host) == (port, "127.0.0.1")


def test_missing_program_is_launch_error(tmp_path: Path) -> None:
    with pytest.raises(EngineLaunchError, match="cannot start"):
        EngineProcess().start([str(tmp_path / "no-such-engine")], {}, tmp_path / "s.log")


def test_exception_inside_with_still_stops(engine_argv, tmp_path: Path) -> None:
    argv, port = engine_argv("--spawn-child")
    with pytest.raises(RuntimeError, match="boom"):
        with EngineProcess(port=port) as eng:
            pid = eng.start(argv, {}, tmp_path / "s.log")
            eng.wait_ready(_health(port), deadline_s=10, is_ready_line=is_ready_line)
            child = _child_pid(eng)
            raise RuntimeError("boom")
    assert _gone(pid) and _gone(child) and port_is_free(port)


def test_env_and_log_tail(engine_argv, tmp_path: Path) -> None:
    argv, port = engine_argv()
    with EngineProcess(port=port) as eng:
        pid = eng.start(argv, {"AUTOTUNE_TEST_VAR": "xyz"}, tmp_path / "s.log")
        eng.wait_ready(_health(port), deadline_s=10, is_ready_line=is_ready_line)
        environ = psutil.Process(pid).environ()
        assert environ["AUTOTUNE_TEST_VAR"] == "xyz"
        assert environ["PYTHONUNBUFFERED"] == "1"
        assert eng.log_tail(1).endswith("ready to roll!")
        assert eng.log_tail().startswith("starting fake engine")


def test_survivor_of_reaped_leader_found_by_token(engine_argv, tmp_path: Path) -> None:
    """The leader exited and was reaped (its group id is no longer pinned): the child that
    stayed behind is still found, through the token planted in its environment."""
    argv, port = engine_argv("--spawn-child", "--leader-exits")
    with EngineProcess(port=port) as eng:
        pid = eng.start(argv, {}, tmp_path / "s.log")
        child = _child_pid(eng)
        deadline = time.monotonic() + 5
        while eng.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert eng.returncode == 0 and not _gone(child)
        assert os.getpgid(child) == pid
    assert eng.stop_report is not None and eng.stop_report.signal == "SIGTERM"
    assert _gone(child)
