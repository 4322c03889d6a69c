"""A guard process per engine: when the process that started the engine (the sweep driver, or
the Ray actor that ran the trial) dies without stopping it, SIGKILL included, the guard stops
the engine's process group and every descendant that left it, then exits. Identification is by
PID + creation time, process group and the token planted in the engine's environment, never by
name (FIELD-NOTES P9).

Why a process and not a parent-death signal (prctl PR_SET_PDEATHSIG): setting it needs Popen's
``preexec_fn``, documented as unsafe while other threads run (the driver starts engines from
worker threads); the signal fires when the *thread* that forked the engine exits, not the
process, so a retired pool thread would kill a healthy engine; and it reaches only the group
leader, never the workers an engine forks or the ones that call setsid.

EngineProcess.start runs this file by path (``python .../watchdog.py --owner-pid ...``), not as
``-m autotune.process.watchdog``: psutil and the standard library are all it imports, so it
starts in a fraction of the package's import time. It runs in a session of its own, so a signal
sent to the driver's group does not reach it; ``stop`` ends it, and it exits by itself once the
engine is gone, so it never outlives the engine. File descriptors it was handed (the trial's
GPU locks) stay open until then: a dead driver's GPU is not free while its engine still runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING or __name__ != "__main__":
    from autotune.process import tree
else:

    def _sibling(name: str) -> ModuleType:
        """tree.py by path: importing ``autotune.process`` would pull in pydantic and the rest
        of the package (tree.py itself needs only psutil)."""
        spec = importlib.util.spec_from_file_location(
            f"_autotune_watchdog_{name}", Path(__file__).with_name(f"{name}.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    tree = _sibling("tree")

POLL_S = 0.5
GRACE_S = 5.0  # SIGTERM -> SIGKILL; with POLL_S an orphan is gone within ~6 s of its driver
KILL_WAIT_S = 3.0


def owner_alive(pid: int, create_time: float, *, is_parent: bool) -> bool:
    """Whether the process that started the engine still runs.

    While we are its child its PID cannot be reused, and the moment it dies we are re-parented
    (to init or a subreaper): the parent PID alone answers, with one cheap system call. Otherwise
    the PID must still carry the recorded creation time and not be a zombie.
    """
    if is_parent:
        return os.getppid() == pid
    try:
        p = psutil.Process(pid)
        return tree.same_process(p, create_time) and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def token_carriers(token: str, not_before: float) -> list[psutil.Process]:
    """Living processes (any group or session) whose environment carries ``token``, created no
    earlier than the engine: the descendants that left its group are found this way."""
    me = os.getpid()
    out: list[psutil.Process] = []
    for p in psutil.process_iter(["create_time"]):
        try:
            born = p.info["create_time"]
            if p.pid == me or born is None or born < not_before - tree.CREATE_TIME_TOLERANCE_S:
                continue
            if tree.env_token(p) == token:
                out.append(p)
        except psutil.Error:
            continue
    return tree.living(out)


class Guard:
    """The engine one watchdog guards: its group leader (PID + creation time) and token."""

    def __init__(self, pid: int, create_time: float, token: str):
        self.pid, self.create_time, self.token = pid, create_time, token
        self.leader: psutil.Process | None = None
        try:
            leader = psutil.Process(pid)
            if tree.same_process(leader, create_time):
                self.leader = leader
        except psutil.Error:
            pass  # already gone: only token carriers can be left
        # Token carriers outside the group, looked for once the group is empty (None: not yet).
        self.survivors: list[psutil.Process] | None = None

    def leader_alive(self) -> bool:
        return self.leader is not None and bool(tree.living([self.leader]))

    def members(self) -> list[psutil.Process]:
        # A living verified leader pins the group id; without it the id may be reused, so only
        # processes carrying our token count.
        token = None if self.leader_alive() else self.token
        return tree.group_members(self.pid, not_before=self.create_time, token=token)

    def alive(self) -> bool:
        """Whether any process of the engine still runs (cheap while its group lives: the
        host-wide token scan runs once, when the group has emptied)."""
        if self.leader_alive() or self.members():
            return True
        if self.survivors is None:
            self.survivors = token_carriers(self.token, self.create_time)
        self.survivors = tree.living(self.survivors)
        return bool(self.survivors)

    def stop(self, grace_s: float, kill_wait_s: float) -> tuple[str | None, list[int]]:
        """SIGTERM everything of the engine, SIGKILL after ``grace_s``; (signal, leftovers)."""
        procs: list[psutil.Process] = []
        if self.leader_alive():
            procs += tree.descendants(self.pid, self.create_time)
        procs += self.members()
        procs += self.survivors or []
        procs += token_carriers(self.token, self.create_time)
        spare = {os.getpid(), os.getppid()}
        unique = {p.pid: p for p in procs if p.pid not in spare}
        # Per-process signals through psutil handles (PID + creation time), never killpg: the
        # leader's parent is gone, so nothing pins the group id against reuse while we wait.
        return tree.terminate(
            unique.values(),
            pgid=self.pid,
            not_before=self.create_time,
            token=self.token,
            grace_s=grace_s,
            kill_wait_s=kill_wait_s,
        )


def watch(
    *,
    owner_pid: int,
    owner_create_time: float,
    pid: int,
    create_time: float,
    token: str,
    poll_s: float = POLL_S,
    grace_s: float = GRACE_S,
    kill_wait_s: float = KILL_WAIT_S,
) -> int:
    """Poll until the engine is gone (exit 0) or its owner is (stop the engine; exit 0, or 1
    if something survived SIGKILL)."""
    guard = Guard(pid, create_time, token)
    is_parent = os.getppid() == owner_pid
    while True:
        if not owner_alive(owner_pid, owner_create_time, is_parent=is_parent):
            sig, left = guard.stop(grace_s, kill_wait_s)
            if sig is not None:
                print(
                    f"autotune watchdog: the process that started this engine (pid {owner_pid}) "
                    f"is gone; stopped the engine's processes with {sig}"
                    + (f"; still alive: {left}" if left else ""),
                    file=sys.stderr,
                    flush=True,
                )
            return 1 if left else 0
        if not guard.alive():
            return 0
        time.sleep(poll_s)


def command(
    *,
    owner_pid: int,
    owner_create_time: float,
    pid: int,
    create_time: float,
    token: str,
    grace_s: float = GRACE_S,
) -> list[str]:
    """argv that starts a watchdog for one engine."""
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--owner-pid",
        str(owner_pid),
        "--owner-create-time",
        repr(owner_create_time),
        "--pid",
        str(pid),
        "--create-time",
        repr(create_time),
        "--token",
        token,
        "--grace",
        f"{grace_s:g}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--owner-pid", type=int, required=True)
    ap.add_argument("--owner-create-time", type=float, required=True)
    ap.add_argument("--pid", type=int, required=True, help="the engine's group leader")
    ap.add_argument("--create-time", type=float, required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--poll", type=float, default=POLL_S)
    ap.add_argument("--grace", type=float, default=GRACE_S)
    a = ap.parse_args(argv)
    return watch(
        owner_pid=a.owner_pid,
        owner_create_time=a.owner_create_time,
        pid=a.pid,
        create_time=a.create_time,
        token=a.token,
        poll_s=a.poll,
        grace_s=a.grace,
    )


if __name__ == "__main__":
    sys.exit(main())
