"""Host-wide GPU locks (issue 19 item 4): one sweep per GPU at a time, across processes and
users; a lock dies with its holder; waiting is polled, so a stopping sweep stops waiting."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.errors import HardwareError
from autotune.process import gpulock
from autotune.process.gpulock import GpuLocks

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
from autotune.process.gpulock import GpuLocks
locks = GpuLocks([int(i) for i in sys.argv[1].split(",")], label="holder-sweep/trial-1")
assert locks.acquire(poll_s=0.05)
print("held", flush=True)
sys.stdin.readline()  # release on a line, or die by a signal first
locks.release()
print("released", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "locks"
    monkeypatch.setenv(gpulock.LOCK_DIR_ENV, str(d))
    return d


@pytest.fixture
def holder(folder: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process (another sweep) holding the lock of GPU 0."""
    pp = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, "0"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": pp},  # the lock folder comes from the environment
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    yield p
    p.kill()
    p.wait()


def test_lock_dir_comes_from_the_environment(folder: Path, holder: subprocess.Popen[str]) -> None:
    assert gpulock.lock_dir() == folder
    path = folder / "gpu0.lock"
    assert path.is_file()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o1777  # shared by every user, sticky
    assert stat.S_IMODE(path.stat().st_mode) == 0o666
    info = gpulock.holder(0)
    assert info is not None and info["pid"] == holder.pid
    assert info["label"] == "holder-sweep/trial-1"


def test_default_lock_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gpulock.LOCK_DIR_ENV, raising=False)
    assert gpulock.lock_dir() == Path("/tmp/autotune-gpu-locks")


def test_second_sweep_waits_until_the_first_releases(holder: subprocess.Popen[str]) -> None:
    said: list[str] = []
    got: dict[str, float] = {}
    locks = GpuLocks([0], label="waiter")

    def wait() -> None:
        assert locks.acquire(poll_s=0.05, notify=said.append)
        got["t"] = time.monotonic()

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.5)
    assert "t" not in got and t.is_alive(), "took a GPU another sweep holds"
    assert len(said) == 1 and f"GPU 0 is in use by pid {holder.pid}" in said[0]
    assert "holder-sweep/trial-1" in said[0]
    assert holder.stdin is not None and holder.stdout is not None
    t_release = time.monotonic()
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == "released"
    t.join(timeout=5)
    assert not t.is_alive() and got["t"] >= t_release
    assert locks.held and len(locks.fds) == 1 and locks.waited_s >= 0.5
    info = gpulock.holder(0)
    assert info is not None and info["pid"] == os.getpid() and info["label"] == "waiter"
    locks.release()
    assert not locks.held and locks.fds == []


def test_killing_the_holder_frees_the_lock_at_once(holder: subprocess.Popen[str]) -> None:
    with GpuLocks([0]) as locks:
        assert not locks.acquire(timeout_s=0.2, poll_s=0.05, notify=lambda _: None)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        t0 = time.monotonic()
        assert locks.acquire(timeout_s=5, poll_s=0.05)
        assert time.monotonic() - t0 < 0.5


def test_different_indices_do_not_block_each_other(holder: subprocess.Popen[str]) -> None:
    with GpuLocks([1, 2]) as locks:
        assert locks.acquire(timeout_s=0.1)
        assert locks.waited_s < 0.1 and len(locks.fds) == 2


def test_an_overlapping_set_waits_and_holds_nothing_when_cancelled(
    holder: subprocess.Popen[str],
) -> None:
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    locks = GpuLocks([2, 0])  # 0 is taken first (ascending order: no deadlock)
    t0 = time.monotonic()
    assert not locks.acquire(cancelled=stop.is_set, poll_s=0.05, notify=lambda _: None)
    assert 0.25 <= time.monotonic() - t0 < 2
    assert locks.fds == [] and not locks.held
    with GpuLocks([2]) as other:  # nothing was kept
        assert other.acquire(timeout_s=0)


def test_same_process_second_lock_on_a_gpu_waits(folder: Path) -> None:
    """flock belongs to the open file, so two worker threads of one sweep exclude each other
    too (they are given disjoint GPUs, but nothing relies on it)."""
    with GpuLocks([5]) as a, GpuLocks([5]) as b:
        assert a.acquire()
        assert not b.acquire(timeout_s=0.1, poll_s=0.02, notify=lambda _: None)
        a.release()
        assert b.acquire(timeout_s=1, poll_s=0.02)


def test_no_indices_take_no_lock(folder: Path) -> None:
    with GpuLocks([]) as locks:
        assert locks.acquire() and locks.fds == []
    assert not folder.exists()


def test_unusable_lock_folder_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(HardwareError, match="GPU lock folder.*AUTOTUNE_GPU_LOCK_DIR"):
        GpuLocks([0], folder=blocker / "locks").acquire()


def test_a_planted_symlink_is_not_followed(folder: Path, tmp_path: Path) -> None:
    folder.mkdir(parents=True)
    target = tmp_path / "victim"
    target.write_text("keep me")
    (folder / "gpu0.lock").symlink_to(target)
    with pytest.raises(HardwareError, match="gpu0.lock"):
        GpuLocks([0]).acquire()
    assert target.read_text() == "keep me"
