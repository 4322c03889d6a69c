"""A file of the engine processes this machine's sweeps started, so that a restarted sweep can
stop what a crashed one left running, by recorded PID and process group, never by name (P9).

Each line is one JSON object:
``{pid, pgid, port, argv0, label, started_at, create_time, token, owner_pid, owner_create_time}``.
``create_time`` proves a live PID is still the process we started (the kernel recycles PIDs);
``token`` is an environment variable value planted in the engine, which its children inherit, so
survivors of a dead group leader can be proven ours too; ``owner_*`` identify the sweep process
that started it: entries of a sweep that is still running are never reaped.

Several workers on one machine may share the file; every read-modify-write holds an flock.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

import psutil

from autotune.process import tree
from autotune.process.filelock import locked

log = logging.getLogger(__name__)

TOKEN_ENV = tree.TOKEN_ENV


class PidEntry(TypedDict):
    """One line of the file, as `PidRegistry.record` writes it (lines read back are checked for
    a JSON object with an int pid; the other keys are read defensively)."""

    pid: int
    pgid: int | None
    port: int | None
    argv0: str
    label: str
    started_at: str
    create_time: float
    token: str | None
    owner_pid: int
    owner_create_time: float


class ReapedEntry(PidEntry):
    """An entry `reap_orphans` acted on: the signal sent, the PIDs it stopped, the survivors."""

    signal: str | None
    killed: list[int]
    leftovers: list[int]


class PidRegistry:
    """Engine processes started on this machine, kept in a JSON-lines file.

    Example:
        >>> reg = PidRegistry(Path("~/.cache/autotune/pids.jsonl").expanduser())
        >>> reg.reap_orphans()   # at sweep start: stop what a crashed sweep left behind
        []
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with locked(self._lock_path):
            yield

    def _read(self) -> list[PidEntry]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        out: list[PidEntry] = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry: PidEntry = json.loads(line)  # checked below
            except json.JSONDecodeError:
                # A crash mid-append leaves a torn last line; drop it rather than fail the sweep.
                log.warning("%s:%d: unreadable registry line dropped", self.path, n)
                continue
            if isinstance(entry, dict) and isinstance(entry.get("pid"), int):
                out.append(entry)
        return out

    def _write(self, entries: list[PidEntry]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".")
        with os.fdopen(fd, "w") as fh:
            fh.writelines(json.dumps(e, sort_keys=True) + "\n" for e in entries)
        os.replace(tmp, self.path)

    def entries(self) -> list[PidEntry]:
        """All recorded entries (a snapshot)."""
        with self._locked():
            return self._read()

    def record(
        self,
        pid: int,
        *,
        pgid: int | None = None,
        port: int | None = None,
        argv0: str = "",
        label: str = "",
        token: str | None = None,
    ) -> PidEntry:
        """Record a process we just started (call right after spawning it).

        Raises ProcessLookupError if ``pid`` does not exist (nothing would prove it ours later).
        """
        try:
            create_time = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess as exc:
            raise ProcessLookupError(f"cannot record pid {pid}: no such process") from exc
        me = psutil.Process()
        entry: PidEntry = {
            "pid": pid,
            "pgid": pgid if pgid is not None else _getpgid(pid),
            "port": port,
            "argv0": argv0,
            "label": label,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "create_time": create_time,
            "token": token,
            "owner_pid": me.pid,
            "owner_create_time": me.create_time(),
        }
        with self._locked():
            entries = [e for e in self._read() if e["pid"] != pid]
            entries.append(entry)
            self._write(entries)
        return entry

    def remove(self, pid: int) -> None:
        """Forget ``pid`` (after it was stopped and verified gone). Unknown PIDs are ignored."""
        with self._locked():
            entries = self._read()
            kept = [e for e in entries if e["pid"] != pid]
            if len(kept) != len(entries):
                self._write(kept)

    def reap_orphans(
        self, *, grace_s: float = 5.0, include_live_owners: bool = False
    ) -> list[ReapedEntry]:
        """Stop every recorded engine whose starting sweep is gone; return what was stopped.

        An entry is acted on only when its owner process has exited (unless
        ``include_live_owners``) and the recorded process is provably ours: a PID that now
        belongs to a process with another creation time is left alone and forgotten.
        Returned entries carry ``signal`` (SIGTERM/SIGKILL) and ``killed`` (PIDs) and
        ``leftovers`` (PIDs that survived SIGKILL, kept in the file for the next try).
        """
        reaped: list[ReapedEntry] = []
        with self._locked():
            kept: list[PidEntry] = []
            for entry in self._read():
                if not include_live_owners and _owner_alive(entry):
                    kept.append(entry)
                    continue
                procs = _provably_ours(entry)
                if not procs:
                    continue  # gone, or its PID was recycled: forget it, signal nothing
                pids = sorted(p.pid for p in procs)
                pgid = entry.get("pgid")
                sig, left = tree.terminate(
                    procs,
                    pgid=pgid if isinstance(pgid, int) else None,
                    not_before=entry.get("create_time"),
                    # a live verified leader pins the group id; without it, trust only the token
                    token=None if _leader_verified(entry) else str(entry.get("token") or "-"),
                    grace_s=grace_s,
                )
                log.warning(
                    "reaped orphaned engine %s (pid %s, label %r): %s",
                    entry.get("argv0"),
                    entry["pid"],
                    entry.get("label"),
                    sig,
                )
                reaped.append({**entry, "signal": sig, "killed": pids, "leftovers": left})
                if left:
                    kept.append(entry)
            self._write(kept)
        return reaped


def _getpgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _owner_alive(entry: PidEntry) -> bool:
    owner, born = entry.get("owner_pid"), entry.get("owner_create_time")
    if not isinstance(owner, int) or not isinstance(born, int | float):
        return False
    try:
        return tree.same_process(psutil.Process(owner), float(born))
    except psutil.Error:
        return False


def _leader_verified(entry: PidEntry) -> bool:
    try:
        return tree.same_process(psutil.Process(entry["pid"]), float(entry["create_time"]))
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


def _provably_ours(entry: PidEntry) -> list[psutil.Process]:
    """The recorded leader (if its creation time matches) with its group and descendants; if the
    leader is gone, the group's survivors that carry the recorded token."""
    pid, pgid, born = entry["pid"], entry.get("pgid"), entry.get("create_time")
    if not isinstance(born, int | float):
        return []
    if psutil.pid_exists(pid) and not _leader_verified(entry):
        # The PID was recycled; the kernel never recycles a PID while its group exists, so
        # nothing of ours is left under that group id either.
        return []
    procs = tree.descendants(pid, float(born))
    if isinstance(pgid, int):
        if procs:  # leader verified: its group is ours
            procs += tree.group_members(pgid, not_before=float(born))
        elif entry.get("token"):
            procs = tree.group_members(pgid, not_before=float(born), token=str(entry["token"]))
    return tree.living({p.pid: p for p in procs}.values())
