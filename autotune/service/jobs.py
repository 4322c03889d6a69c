"""Jobs: one `autotune sweep` process per sweep, started and stopped by the service.

A job outlives the request that started it and the service itself: it runs in its own session
(process group), writes to the shared database, and logs to STATE/logs/NAME.log. The job table
(STATE/jobs.json) records each job's argv, PID and process start time; every read-modify-write
holds an flock, so `autotune serve` and `autotune mcp` can share one state folder.

A recorded PID is trusted only while the process with that PID has the recorded start time
(PIDs are recycled, FIELD-NOTES P9); stop = SIGTERM to the job's process group, which the sweep
answers by stopping its engines and marking their trials interrupted.

Queue: each job names the GPUs it uses (None: all of the host's). A job whose GPUs overlap those
of a running job or of a job queued before it is recorded as `queued` (in the table, so a
restart keeps it) and started, in submission order, once they are free; jobs on disjoint GPUs
run at once. Every table refresh (the monitor's poll, any read) starts what has become free.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel, Field, ValidationError

from autotune.process import filelock
from autotune.process.tree import same_process
from autotune.service.errors import Conflict, NotFound
from autotune.service.state import StateDir

log = logging.getLogger(__name__)

# The sweep CLI, run by the interpreter that runs the service (no shell, no PATH lookup).
CLI_PREFIX = ("-c", "from autotune.cli import main; main()")
LOG_TAIL_BYTES = 8192


JobState = Literal["queued", "running", "exited", "cancelled"]


def gpus_overlap(a: Sequence[str] | None, b: Sequence[str] | None) -> bool:
    """Whether two jobs' GPU sets can share a device. None (all GPUs) overlaps everything;
    `cpu` (a CPU target) only another `cpu`; indices and UUIDs cannot be matched, so a mix
    counts as overlapping."""
    if a is None or b is None:
        return True
    sa, sb = set(a), set(b)
    if "cpu" in sa or "cpu" in sb:
        return "cpu" in sa and "cpu" in sb
    if all(x.isdigit() for x in sa | sb) or not any(x.isdigit() for x in sa | sb):
        return bool(sa & sb)
    return bool(sa and sb)


def _renumber(jobs: dict[str, JobRecord]) -> None:
    """queue_position: 1-based place among queued jobs in submission order; None otherwise."""
    queued = sorted(
        (r for r in jobs.values() if r.state == "queued"),
        key=lambda r: (r.queued_at or datetime.min.replace(tzinfo=UTC), r.name),
    )
    places = {r.name: i for i, r in enumerate(queued, 1)}
    for name, rec in jobs.items():
        if rec.queue_position != places.get(name):
            jobs[name] = rec.model_copy(update={"queue_position": places.get(name)})


class JobRecord(BaseModel):
    """One row of the job table."""

    name: str
    kind: Literal["sweep", "kernels"] = "sweep"
    argv: list[str]
    pid: int | None = Field(None, description="None: not started (queued or cancelled)")
    create_time: float = Field(0.0, description="psutil start time: proves the PID is ours")
    log_path: str
    started_at: datetime | None = None
    state: JobState = "running"
    exit_code: int | None = Field(None, description="None: unknown (not our child) or running")
    ended_at: datetime | None = None
    stop_requested: str | None = Field(None, description="signal sent, e.g. SIGTERM")
    runs: int = Field(1, description="process starts: 1 + resumes")
    started_by: str = Field("request", description="request or recovery")
    overrides: dict[str, object] = Field(default_factory=dict)
    note: str | None = None
    gpus: list[str] | None = Field(None, description="GPUs the job uses; None: all")
    cwd: str | None = Field(None, description="the job's working folder")
    stdout_path: str | None = Field(None, description="stdout apart from the log (--json)")
    queued_at: datetime | None = None
    queue_position: int | None = Field(None, description="1-based, while queued")


class JobTable:
    """STATE/jobs.json under an flock (cross-process: serve and mcp share it)."""

    def __init__(self, state: StateDir):
        self.path = state.jobs
        self.lock_path = state.jobs_lock
        self._thread_lock = threading.RLock()

    @contextmanager
    def locked(self) -> Iterator[dict[str, JobRecord]]:
        """The table to read and change; written back when the block ends without error."""
        with self._thread_lock, filelock.locked(self.lock_path):
            jobs = self._read()
            before = {k: v.model_dump_json() for k, v in jobs.items()}
            yield jobs
            _renumber(jobs)
            if {k: v.model_dump_json() for k, v in jobs.items()} != before:
                self._write(jobs)

    def snapshot(self) -> dict[str, JobRecord]:
        with self.locked() as jobs:
            return dict(jobs)

    def _read(self) -> dict[str, JobRecord]:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            kept = self._keep_unreadable()
            log.warning(
                "job table %s unreadable (%s); kept as %s, starting empty", self.path, exc, kept
            )
            return {}
        if not isinstance(raw, dict) or not isinstance(raw.get("jobs") or {}, dict):
            kept = self._keep_unreadable()
            log.warning("job table %s is not a table; kept as %s, starting empty", self.path, kept)
            return {}
        out: dict[str, JobRecord] = {}
        for name, row in (raw.get("jobs") or {}).items():
            try:
                out[name] = JobRecord.model_validate(row)
            except ValidationError as exc:
                log.warning("job table %s: dropping entry %s (%s)", self.path, name, exc)
        return out

    def _keep_unreadable(self) -> Path | None:
        """Move an unreadable table aside (jobs.json.corrupt-TIME) before the next write
        replaces it: the PIDs of running jobs may still be read from it by hand."""
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        try:
            os.replace(self.path, aside)
        except OSError:
            return None
        return aside

    def _write(self, jobs: Mapping[str, JobRecord]) -> None:
        doc = {
            "schema": "autotune.jobs/1",
            "jobs": {k: v.model_dump(mode="json") for k, v in jobs.items()},
        }
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".jobs.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(doc, fh, indent=1)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class JobManager:
    """Start, watch and stop job processes; adopt the ones an earlier service started.

    `env` is added to each job's environment (the service passes AUTOTUNE_DB so the database
    URL, which may hold a password, never appears on a command line).
    """

    def __init__(
        self,
        state: StateDir,
        *,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        poll_s: float = 0.5,
    ):
        self.state = state
        self.table = JobTable(state)
        self.env = dict(env or {})
        self.python = python
        self.poll_s = poll_s
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- starting ----------------------------------------------------------------------------

    def start(
        self,
        name: str,
        cli_args: Sequence[str],
        *,
        kind: Literal["sweep", "kernels"] = "sweep",
        started_by: str = "request",
        overrides: Mapping[str, object] | None = None,
        stdout_path: Path | None = None,
        gpus: Sequence[str] | None = None,
        cwd: Path | None = None,
    ) -> JobRecord:
        """Run `autotune CLI_ARGS...` as job `name` in `cwd` (default: its working folder under
        STATE/work), or queue it while a running or earlier-queued job holds one of `gpus`
        (None: all GPUs). Conflict if that job is running or queued. Output goes to the job's
        log; `stdout_path` takes stdout apart (a --json result)."""
        with self.table.locked() as jobs:
            self._reap(jobs)
            old = jobs.get(name)
            if old is not None and old.state == "queued":
                raise Conflict(
                    f"job {name!r} is queued (position {old.queue_position}); cancel it first"
                )
            if old is not None and self._alive(old):
                raise Conflict(
                    f"job {name!r} is already running (pid {old.pid}); stop it first",
                )
            rec = JobRecord(
                name=name,
                kind=kind,
                argv=[self.python, *CLI_PREFIX, *cli_args],
                log_path=str(self.state.log_file(name)),
                state="queued",
                runs=old.runs if old is not None else 0,
                started_by=started_by,
                overrides=dict(overrides or {}),
                gpus=list(gpus) if gpus is not None else None,
                cwd=str(cwd if cwd is not None else self.state.work_dir(kind, name)),
                stdout_path=str(stdout_path) if stdout_path is not None else None,
                queued_at=datetime.now(UTC),
            )
            holders = self._holders(rec, jobs)
            if holders:
                jobs[name] = rec
                _renumber(jobs)
                self._log_line(rec, f"queued behind {', '.join(holders)} (same GPUs)")
                return jobs[name]
            jobs[name] = self._launch(rec)
            return jobs[name]

    def _holders(self, rec: JobRecord, jobs: Mapping[str, JobRecord]) -> list[str]:
        """Running jobs and jobs queued before `rec` whose GPUs overlap its own."""
        key = (rec.queued_at or datetime.now(UTC), rec.name)
        return [
            other.name
            for other in jobs.values()
            if other.name != rec.name
            and (
                other.state == "running"
                or (
                    other.state == "queued"
                    and (other.queued_at or datetime.min.replace(tzinfo=UTC), other.name) < key
                )
            )
            and gpus_overlap(rec.gpus, other.gpus)
        ]

    def _dispatch(self, jobs: dict[str, JobRecord]) -> None:
        """Start queued jobs whose GPUs are free, in submission order (call under the lock,
        after _reap)."""
        queued = sorted(
            (r for r in jobs.values() if r.state == "queued"),
            key=lambda r: (r.queued_at or datetime.min.replace(tzinfo=UTC), r.name),
        )
        for rec in queued:
            if self._holders(rec, jobs):
                continue
            try:
                jobs[rec.name] = self._launch(rec)
            except OSError as exc:  # a vanished interpreter or folder: not worth a stuck queue
                log.warning("queued job %s could not start: %s", rec.name, exc)
                jobs[rec.name] = rec.model_copy(
                    update={
                        "state": "exited",
                        "ended_at": datetime.now(UTC),
                        "note": f"could not start: {exc.strerror or exc}",
                    }
                )

    def _log_line(self, rec: JobRecord, text: str) -> None:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        with contextlib.suppress(OSError), open(rec.log_path, "ab") as fh:
            fh.write(f"\n=== {stamp} {text}\n".encode())

    def _launch(self, rec: JobRecord) -> JobRecord:
        """Start a queued record's process; returns the running record."""
        cli_args = rec.argv[1 + len(CLI_PREFIX) :]
        cwd = Path(rec.cwd) if rec.cwd else self.state.work_dir(rec.kind, rec.name)
        cwd.mkdir(parents=True, exist_ok=True, mode=0o700)
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        stdout_path = rec.stdout_path
        with open(rec.log_path, "ab") as fh, open(stdout_path or os.devnull, "wb") as out:
            stamp = datetime.now(UTC).isoformat(timespec="seconds")
            fh.write(f"\n=== {stamp} autotune {' '.join(cli_args)}\n".encode())
            fh.flush()
            proc = subprocess.Popen(
                rec.argv,
                stdin=subprocess.DEVNULL,
                stdout=out if stdout_path is not None else fh,
                stderr=fh if stdout_path is not None else subprocess.STDOUT,
                env=env,
                # Its own folder, never the state root: a relative path a spec slips past the
                # policy must not open the token, the configuration or the database.
                cwd=cwd,
                start_new_session=True,  # own group: stop reaches it, Ctrl-C does not
                close_fds=True,
            )
        try:
            create_time = psutil.Process(proc.pid).create_time()
        except psutil.NoSuchProcess:
            create_time = 0.0  # already gone: the monitor records its exit
        self._children[rec.name] = proc
        return rec.model_copy(
            update={
                "state": "running",
                "pid": proc.pid,
                "create_time": create_time,
                "started_at": datetime.now(UTC),
                "runs": rec.runs + 1,
                "queue_position": None,
                "cwd": str(cwd),
            }
        )

    # -- state -------------------------------------------------------------------------------

    def _alive(self, rec: JobRecord) -> bool:
        if rec.state != "running" or rec.pid is None:
            return False
        child = self._children.get(rec.name)
        if child is not None and child.pid == rec.pid:
            return child.poll() is None
        try:
            p = psutil.Process(rec.pid)
            return same_process(p, rec.create_time) and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _reap(self, jobs: dict[str, JobRecord]) -> None:
        """Record the exit of running jobs whose process is gone (call under the lock)."""
        for name, rec in jobs.items():
            if rec.state == "running" and not self._alive(rec):
                child = self._children.pop(name, None)
                code = child.poll() if child is not None and child.pid == rec.pid else None
                jobs[name] = rec.model_copy(
                    update={
                        "state": "exited",
                        "exit_code": code,
                        "ended_at": datetime.now(UTC),
                    }
                )

    def refresh(self) -> dict[str, JobRecord]:
        """Record the exit of jobs whose process is gone and start the queued jobs whose GPUs
        that freed; returns the table."""
        with self.table.locked() as jobs:
            self._reap(jobs)
            self._dispatch(jobs)
            _renumber(jobs)
            return dict(jobs)

    def get(self, name: str) -> JobRecord | None:
        return self.refresh().get(name)

    def alive(self, name: str) -> bool:
        rec = self.get(name)
        return rec is not None and rec.state == "running"

    def busy(self, name: str) -> bool:
        """Running or queued: the name is taken."""
        rec = self.get(name)
        return rec is not None and rec.state in ("running", "queued")

    def log_tail(self, name: str, max_bytes: int = LOG_TAIL_BYTES) -> str:
        path = self.state.log_file(name)
        try:
            with open(path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - max_bytes))
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    # -- stopping ----------------------------------------------------------------------------

    def signal(self, name: str, *, force: bool = False) -> JobRecord:
        """SIGTERM (graceful: the sweep stops its engines) or SIGKILL the job's process group;
        a queued job is taken out of the queue (state cancelled) instead."""
        sig = signal.SIGKILL if force else signal.SIGTERM
        with self.table.locked() as jobs:
            rec = jobs.get(name)
            if rec is None:
                raise NotFound(f"no job {name!r} was started by this service")
            if rec.state == "queued":
                rec = rec.model_copy(
                    update={
                        "state": "cancelled",
                        "ended_at": datetime.now(UTC),
                        "queue_position": None,
                        "note": "cancelled while queued; it never started",
                    }
                )
                jobs[name] = rec
                self._log_line(rec, "cancelled while queued")
                self._reap(jobs)
                self._dispatch(jobs)  # it may have held back a later job on other GPUs
                return rec
            if not self._alive(rec) or rec.pid is None:
                raise Conflict(f"job {name!r} is not running (state {rec.state})")
            # It may exit between the check and the signal: then there is nothing to stop.
            with contextlib.suppress(ProcessLookupError):
                # pgid == pid (start_new_session); the identity check above guards PID reuse.
                if os.getpgid(rec.pid) == rec.pid:
                    os.killpg(rec.pid, sig)
                else:
                    os.kill(rec.pid, sig)
            rec = rec.model_copy(update={"stop_requested": sig.name})
            jobs[name] = rec
            return rec

    def wait(self, name: str, timeout_s: float) -> JobRecord | None:
        """Wait until the job has ended (or the timeout); returns its record."""
        deadline = time.monotonic() + timeout_s
        while True:
            rec = self.get(name)
            ended = rec is None or rec.state not in ("running", "queued")
            if ended or time.monotonic() >= deadline:
                return rec
            time.sleep(0.1)

    # -- recovery ----------------------------------------------------------------------------

    def dead_since_last_run(self) -> list[JobRecord]:
        """Jobs the table says are running whose process is gone (the machine restarted, or
        the job was killed): marked exited and returned, for the caller to resume."""
        dead: list[JobRecord] = []
        with self.table.locked() as jobs:
            for name, rec in jobs.items():
                if rec.state == "running" and not self._alive(rec):
                    jobs[name] = rec.model_copy(
                        update={"state": "exited", "ended_at": datetime.now(UTC)}
                    )
                    dead.append(rec)
        return dead

    def annotate(self, name: str, note: str) -> None:
        with self.table.locked() as jobs:
            if name in jobs:
                jobs[name] = jobs[name].model_copy(update={"note": note})

    # -- the monitor -------------------------------------------------------------------------

    def start_monitor(self) -> None:
        """A thread that reaps our children (no zombies), records exits and starts queued jobs
        when their GPUs free up (also those of jobs another service started)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="autotune-jobs", daemon=True)
        self._thread.start()

    def stop_monitor(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.refresh()
            except Exception:  # the monitor must outlive a bad read; the next poll retries
                log.exception("job monitor")
