"""PidRegistry: a restarted sweep stops what a crashed one left, by recorded PID/group only."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil

from autotune.process import PidRegistry
from tests.process.conftest import FAKE_ENGINE

ROOT = Path(__file__).resolve().parents[2]
OWNER = Path(__file__).with_name("crashing_owner.py")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_dead(pid: int, timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _pp() -> str:
    return os.environ.get("PYTHONPATH", "")


def _crash_after_start(tmp_path: Path, *engine_flags: str) -> tuple[int, int]:
    """Run crashing_owner.py; return (engine pid, its child's pid), both orphaned now."""
    reg, log = tmp_path / "pids.jsonl", tmp_path / "engine.log"
    engine = [sys.executable, str(FAKE_ENGINE), "--port", "0", "--spawn-child", *engine_flags]
    out = subprocess.run(
        [sys.executable, str(OWNER), str(reg), str(log), "--", *engine],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), _pp()]))},
        check=True,
    )
    pid = int(out.stdout.split()[0])
    m = re.search(r"child pid (\d+)", log.read_text())
    assert m, log.read_text()
    return pid, int(m.group(1))


def test_reap_orphans_kills_group_left_by_crashed_owner(tmp_path: Path) -> None:
    pid, child = _crash_after_start(tmp_path, "--child-ignores-term")
    reg = PidRegistry(tmp_path / "pids.jsonl")
    [entry] = reg.entries()
    assert entry["pid"] == pid and entry["label"] == "crashed-trial"
    assert entry["create_time"] == psutil.Process(pid).create_time()
    assert _alive(pid) and _alive(child)

    reaped = reg.reap_orphans(grace_s=0.3)

    assert [r["pid"] for r in reaped] == [pid]
    assert set(reaped[0]["killed"]) == {pid, child}
    assert reaped[0]["signal"] == "SIGKILL"  # the child ignored SIGTERM
    assert _wait_dead(pid) and _wait_dead(child)
    assert reg.entries() == []


def test_reap_survivors_of_dead_leader_by_token(tmp_path: Path) -> None:
    """Leader exited, its child stays in the group: found by group id + planted token."""
    pid, child = _crash_after_start(tmp_path, "--leader-exits")
    assert _wait_dead(pid)
    assert _alive(child) and os.getpgid(child) == pid
    reg = PidRegistry(tmp_path / "pids.jsonl")
    reaped = reg.reap_orphans(grace_s=1.0)
    assert reaped and reaped[0]["killed"] == [child] and reaped[0]["signal"] == "SIGTERM"
    assert _wait_dead(child)


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )


def test_recycled_pid_is_never_killed(tmp_path: Path) -> None:
    reg = PidRegistry(tmp_path / "pids.jsonl")
    p = _sleeper()
    try:
        reg.record(p.pid, port=1234, argv0="python", label="x")
        # Pretend the recorded process was another one: different creation time, dead owner.
        entries = reg.entries()
        entries[0]["create_time"] -= 100.0
        entries[0]["owner_pid"] = 2**22 + 1  # no such process
        (tmp_path / "pids.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))

        assert reg.reap_orphans(grace_s=0.2) == []
        assert p.poll() is None and _alive(p.pid)
        assert reg.entries() == []  # forgotten, not killed
    finally:
        p.kill()
        p.wait()


def test_live_owner_entries_are_kept(tmp_path: Path) -> None:
    reg = PidRegistry(tmp_path / "pids.jsonl")
    p = _sleeper()
    try:
        entry = reg.record(p.pid, label="mine")
        assert entry["owner_pid"] == os.getpid()
        assert reg.reap_orphans(grace_s=0.2) == []  # our own sweep is alive
        assert p.poll() is None and [e["pid"] for e in reg.entries()] == [p.pid]
        reaped = reg.reap_orphans(grace_s=1.0, include_live_owners=True)
        assert [r["pid"] for r in reaped] == [p.pid]
        assert p.wait(timeout=3) == -15
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_record_remove_and_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "pids.jsonl"
    reg = PidRegistry(path)
    reg.record(os.getpid(), label="self")
    with open(path, "a") as fh:
        fh.write('{"pid": 12')  # a crash mid-append
    assert [e["label"] for e in reg.entries()] == ["self"]
    reg.remove(os.getpid())
    reg.remove(424242)  # unknown: ignored
    assert reg.entries() == []


def test_stale_entry_of_exited_process_is_dropped(tmp_path: Path) -> None:
    reg = PidRegistry(tmp_path / "pids.jsonl")
    p = _sleeper()
    reg.record(p.pid)
    p.kill()
    p.wait()
    assert reg.reap_orphans(include_live_owners=True) == []
    assert reg.entries() == []
