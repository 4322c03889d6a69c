"""Find and stop the processes one engine launch created: its process group plus any descendant
that left the group, identified by PID and checked by creation time, never by name (P9).

psutil.Process objects remember their creation time, so signalling one whose PID the kernel
has since given to an unrelated process is refused (``is_running()`` is False for it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable

import psutil

# Planted in every engine's environment (children inherit it): proves a process ours when its
# group leader is gone and the group id alone no longer does.
TOKEN_ENV = "AUTOTUNE_PROCESS_TOKEN"

# psutil derives create_time from boot time and clock ticks: the same process reads back within
# a jiffy; a recycled PID differs by far more.
CREATE_TIME_TOLERANCE_S = 0.05


def group_members(
    pgid: int, *, not_before: float | None = None, token: str | None = None
) -> list[psutil.Process]:
    """Living processes whose process group is ``pgid`` (zombies excluded).

    ``not_before``: skip processes created before this time (the group leader's start), which
    cannot belong to the group we created. ``token``: keep only processes whose environment
    carries it (``TOKEN_ENV``); used once the leader has been reaped, since from then on the
    kernel may hand the group id to an unrelated process.
    """
    out: list[psutil.Process] = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) != pgid:
                continue
            p = psutil.Process(pid)
            if not_before is not None and p.create_time() < not_before - CREATE_TIME_TOLERANCE_S:
                continue
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if token is not None and env_token(p) != token:
                continue
            out.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def env_token(p: psutil.Process) -> str | None:
    try:
        return p.environ().get(TOKEN_ENV)
    except psutil.Error:
        return None


def descendants(pid: int, create_time: float | None = None) -> list[psutil.Process]:
    """The process ``pid`` (if it is still the one created at ``create_time``) and its
    descendants, including ones that started their own session and so left the group."""
    try:
        root = psutil.Process(pid)
        if create_time is not None and not same_process(root, create_time):
            return []
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def same_process(p: psutil.Process, create_time: float) -> bool:
    try:
        return abs(p.create_time() - create_time) <= CREATE_TIME_TOLERANCE_S
    except psutil.Error:
        return False


def living(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The ones still running (a zombie has exited: only its parent's wait is missing)."""
    out: list[psutil.Process] = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        except psutil.AccessDenied:
            out.append(p)  # cannot look, so not proven gone
    return out


def _signal_all(procs: list[psutil.Process], pgid: int | None, sig: signal.Signals) -> None:
    # killpg only while a living member pins the group id (the kernel frees it, for reuse,
    # once the group is empty).
    if pgid is not None and any(_pgid(p) == pgid for p in procs):
        with contextlib.suppress(ProcessLookupError, PermissionError):  # gone, or not ours
            os.killpg(pgid, sig)
    for p in procs:
        try:
            p.send_signal(sig)  # psutil refuses if the PID now belongs to another process
        except psutil.Error:
            continue


def terminate(
    procs: Iterable[psutil.Process],
    *,
    pgid: int | None,
    not_before: float | None = None,
    token: str | None = None,
    grace_s: float = 10.0,
    kill_wait_s: float = 5.0,
    reap: Callable[[], object] | None = None,
    poll_s: float = 0.05,
) -> tuple[str | None, list[int]]:
    """SIGTERM ``procs`` (and the group ``pgid``), wait ``grace_s``, then SIGKILL what is left.

    Without ``token`` the caller vouches that ``pgid`` is still the group it created (its
    leader is alive or an unreaped zombie of ours, which holds the id) and the whole group is
    signalled with killpg. With ``token`` only members carrying it are signalled, one by one.
    The group is re-scanned on every poll because an engine may fork while shutting down.
    ``reap`` is called while waiting so our own child does not linger as a zombie.
    Returns (the strongest signal that was needed or None if nothing was running,
    PIDs still alive after SIGKILL).
    """
    # Everything identified once stays tracked by its psutil handle (PID + creation time): an
    # exiting process can no longer show its environment, so a token re-scan would lose it
    # while it is still tearing down.
    tracked: dict[int, psutil.Process] = {p.pid: p for p in procs}

    def current() -> list[psutil.Process]:
        if reap is not None:
            reap()
        if pgid is not None:
            for p in group_members(pgid, not_before=not_before, token=token):
                tracked.setdefault(p.pid, p)
        return living(tracked.values())

    killpg_id = pgid if token is None else None
    todo = current()
    if not todo:
        return None, []
    _signal_all(todo, killpg_id, signal.SIGTERM)
    if not _wait_gone(current, grace_s, poll_s):
        return "SIGTERM", []
    _signal_all(current(), killpg_id, signal.SIGKILL)
    left = _wait_gone(current, kill_wait_s, poll_s)
    return "SIGKILL", sorted(p.pid for p in left)


def _wait_gone(
    current: Callable[[], list[psutil.Process]], timeout_s: float, poll_s: float
) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = current()
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(poll_s)


def _pgid(p: psutil.Process) -> int | None:
    try:
        return os.getpgid(p.pid)
    except (ProcessLookupError, PermissionError):
        return None
