"""Start one engine server in its own process group, wait until it serves, stop it for good.

Convention (style-anchors §7.7, FIELD-NOTES P9): argv lists only (never a shell), a new session
per engine so one signal reaches every worker it forks, output to a per-trial log file, readiness
= health URL answers 200 *and* the engine's own "ready" line was logged, and teardown by process
group: SIGTERM, grace period, SIGKILL, then verification that no process of the group survived
and that the port (and GPU memory, where NVML is available) is free again. Each engine gets a
watchdog process (autotune.process.watchdog) that stops it if this process dies first, SIGKILL
included: engines never outlive their driver.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, BinaryIO, Self

import psutil
from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import EngineLaunchError, EngineStartupTimeout, PortInUseError
from autotune.process import gpu, tree
from autotune.process.ports import port_is_free, wait_port_free
from autotune.process.registry import TOKEN_ENV, PidRegistry

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

_TAIL_BYTES = 256 * 1024


class StopReport(BaseModel):
    """What ``EngineProcess.stop`` had to do and what it verified afterwards."""

    model_config = ConfigDict(frozen=True)

    signal: str | None = Field(
        description="strongest signal needed: SIGTERM, SIGKILL, or None if nothing was running"
    )
    seconds: float = Field(description="wall time of the whole stop, verification included")
    returncode: int | None = Field(description="the engine's exit status (negative: signal)")
    leftovers: list[int] = Field(default_factory=list, description="PIDs alive after SIGKILL")
    port_freed: bool | None = Field(description="None when no port was given")
    gpu_memory_freed: bool | None = Field(
        description="None when unknown: no GPUs given or no NVIDIA driver"
    )

    @property
    def clean(self) -> bool:
        """Nothing survived and nothing that was checked is still held."""
        return (
            not self.leftovers
            and self.port_freed is not False
            and (self.gpu_memory_freed is not False)
        )


class EngineProcess:
    """One engine server process (and everything it forks), as a context manager.

    Example:
        >>> port = free_port()
        >>> with EngineProcess(port=port, label="trial-3", gpu_indices=[0]) as eng:
        ...     eng.start(cmd.argv, cmd.env, Path("reports/s/3/server.log"))
        ...     eng.wait_ready(f"http://127.0.0.1:{port}/health", deadline_s=900,
        ...                    is_ready_line=lambda line: "fired up" in line)
        ...     ...  # benchmark
        >>> eng.stop_report.clean
        True

    ``__exit__`` always stops the engine, also on errors and KeyboardInterrupt (the engine runs
    in its own session, so Ctrl-C in the terminal does not reach it).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        label: str = "",
        gpu_indices: Sequence[int] | None = None,
        registry: PidRegistry | None = None,
        watchdog: bool = True,
        hold_fds: Sequence[int] = (),
    ):
        """``watchdog``: start a guard process that stops the engine if this process dies
        without stopping it (see autotune.process.watchdog). ``hold_fds``: descriptors the
        guard keeps open until the engine is gone (the trial's GPU locks)."""
        self.port = port
        self.host = host
        self.label = label
        self.gpu_indices = list(gpu_indices) if gpu_indices is not None else None
        self.registry = registry
        self.argv: list[str] = []
        self.log_path: Path | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._pgid: int | None = None
        self._create_time: float | None = None
        self._gpu_baseline: dict[int, int] | None = None
        self._ready_seen = False
        self._log_offset = 0
        self._partial = b""
        self._stop_report: StopReport | None = None
        self._token = ""
        self._watchdog_on = watchdog
        self._hold_fds = list(hold_fds)
        self._watchdog: subprocess.Popen[bytes] | None = None

    # -- start -------------------------------------------------------------------------------

    def start(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None,
        log_path: Path | str,
        cwd: Path | str | None = None,
        *,
        inherit_env: bool = True,
    ) -> int:
        """Spawn ``argv`` in a new session with output to ``log_path``; return its PID.

        ``env`` is added to this process's environment (or replaces it if ``inherit_env`` is
        False). Raises PortInUseError (an EngineLaunchError) if the port is taken, EngineLaunchError
        if the program cannot be spawned.
        """
        if self._popen is not None:
            raise RuntimeError(f"EngineProcess {self.label!r} was already started")
        self.argv = [str(a) for a in argv]
        if not self.argv:
            raise EngineLaunchError("empty argv: nothing to start", command=[])
        if self.port is not None and not port_is_free(self.port, self.host):
            raise PortInUseError(
                f"port {self.port} on {self.host} is already in use; pick another with "
                "free_port() (FailureClass.PORT_IN_USE)",
                port=self.port,
                host=self.host,
                command=self.argv,
            )
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ) if inherit_env else {}
        # Python engines block-buffer stdout into a file: the ready line would arrive late.
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        full_env.update(env or {})
        self._token = token = uuid.uuid4().hex
        full_env[TOKEN_ENV] = token
        if self.gpu_indices:
            self._gpu_baseline = gpu.gpu_memory_used(self.gpu_indices)
        with open(self.log_path, "wb") as log_fh:
            pid = self._spawn(log_fh, full_env, cwd)
        if self.registry is not None and self._create_time is not None:
            # An engine that already exited leaves nothing to record (or to reap later).
            with contextlib.suppress(ProcessLookupError):
                self.registry.record(
                    pid,
                    pgid=self._pgid,
                    port=self.port,
                    argv0=self.argv[0],
                    label=self.label,
                    token=token,
                )
        return pid

    def _spawn(self, log_fh: BinaryIO, full_env: dict[str, str], cwd: Path | str | None) -> int:
        """Popen ``self.argv`` in a new session, output to ``log_fh``; its watchdog too."""
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise EngineLaunchError(
                f"cannot start {self.argv[0]!r}: {exc}", command=self.argv
            ) from exc
        pid = self._popen.pid
        self._pgid = pid  # start_new_session: the child leads a new session and group
        try:
            self._create_time = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            self._create_time = None  # already exited; wait_ready reports it
        _LIVE.add(self)
        if self._watchdog_on and self._create_time is not None:
            self._start_watchdog(log_fh)
        return pid

    def _start_watchdog(self, log_fh: BinaryIO) -> None:
        """Start the guard that stops this engine if we die without stopping it (SIGKILL,
        OOM killer): engines must not outlive their driver (FIELD-NOTES P9)."""
        from autotune.process import watchdog

        assert self._popen is not None and self._create_time is not None
        me = psutil.Process()
        argv = watchdog.command(
            owner_pid=me.pid,
            owner_create_time=me.create_time(),
            pid=self._popen.pid,
            create_time=self._create_time,
            token=self._token,
        )
        try:
            # Its own session: a signal to our group must not take the guard down with us.
            # Its messages go to the engine's log (same open file: no overwriting).
            self._watchdog = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                pass_fds=self._hold_fds,
            )
        except OSError as exc:  # the engine runs; the PID registry is the fallback
            log.warning("engine %r runs without a watchdog: %s", self.label, exc)

    def _stop_watchdog(self) -> None:
        wd, self._watchdog = self._watchdog, None
        if wd is None:
            return
        if wd.poll() is None:
            wd.terminate()  # our unreaped child: its PID is still ours
            try:
                wd.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                wd.kill()
                wd.wait()

    # -- state -------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def pgid(self) -> int | None:
        return self._pgid

    @property
    def watchdog_pid(self) -> int | None:
        """The guard process's PID while it is ours (None: none started, or stopped)."""
        return self._watchdog.pid if self._watchdog is not None else None

    @property
    def returncode(self) -> int | None:
        """Exit status once exited (negative = killed by that signal), else None."""
        return self._popen.poll() if self._popen is not None else None

    def is_alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def stop_report(self) -> StopReport | None:
        return self._stop_report

    def log_tail(self, n_lines: int = 60) -> str:
        """The last ``n_lines`` lines of the engine's log ("" before start)."""
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - _TAIL_BYTES))
                data = fh.read()
        except FileNotFoundError:
            return ""
        lines = data.decode("utf-8", errors="replace").splitlines()
        return "\n".join(lines[-n_lines:])

    def _new_lines(self) -> list[str]:
        """Complete lines appended to the log since the last call."""
        if self.log_path is None:
            return []
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._log_offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self._log_offset += len(data)
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        return [c.decode("utf-8", errors="replace").rstrip("\r") for c in complete]

    # -- readiness ---------------------------------------------------------------------------

    def wait_ready(
        self,
        health_url: str,
        *,
        deadline_s: float,
        is_ready_line: Callable[[str], bool] | None = None,
        poll_s: float = 0.2,
    ) -> float:
        """Block until the engine serves; return the seconds it took from this call.

        Ready means GET ``health_url`` answered 200 and, when ``is_ready_line`` is given, some
        log line satisfied it (every new log line is passed to it, in order, so it may also
        collect startup facts). Raises EngineLaunchError (with returncode and log tail) if the
        process exits first, EngineStartupTimeout (with log tail) at the deadline; the engine
        is left running in that case, for the caller's ``stop`` (or ``__exit__``).
        """
        if self._popen is None:
            raise RuntimeError("wait_ready() before start()")
        import httpx  # lazy: keeps `autotune --help` fast

        t0 = time.monotonic()
        deadline = t0 + deadline_s
        # trust_env=False: an HTTP(S)_PROXY in the environment must not route loopback checks.
        with httpx.Client(trust_env=False, follow_redirects=False) as client:
            while True:
                self._scan_log(is_ready_line)
                rc = self._popen.poll()
                if rc is not None:
                    self._scan_log(is_ready_line)
                    raise EngineLaunchError(
                        f"engine {self.label or self.argv[0]!r} exited with code {rc} before it "
                        f"became ready (log: {self.log_path})",
                        command=self.argv,
                        returncode=rc,
                        log_tail=self.log_tail(),
                    )
                left = deadline - time.monotonic()
                if (is_ready_line is None or self._ready_seen) and self._healthy(
                    client, health_url, min(5.0, max(0.2, left))
                ):
                    return time.monotonic() - t0
                if time.monotonic() >= deadline:
                    waiting = is_ready_line is not None and not self._ready_seen
                    what = "ready line" if waiting else "health check"
                    raise EngineStartupTimeout(
                        f"engine {self.label or self.argv[0]!r} not ready after {deadline_s:g} s "
                        f"(still waiting for the {what}; {health_url}; log: {self.log_path})",
                        command=self.argv,
                        log_tail=self.log_tail(),
                    )
                time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))

    def _scan_log(self, is_ready_line: Callable[[str], bool] | None) -> None:
        lines = self._new_lines()
        if is_ready_line is None:
            return
        for line in lines:
            if is_ready_line(line):
                self._ready_seen = True

    @staticmethod
    def _healthy(client: httpx.Client, url: str, timeout_s: float) -> bool:
        import httpx

        try:
            r = client.get(url, timeout=httpx.Timeout(timeout_s, connect=min(1.0, timeout_s)))
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    # -- stop --------------------------------------------------------------------------------

    def stop(
        self,
        grace_s: float = 10.0,
        *,
        kill_wait_s: float = 5.0,
        port_wait_s: float = 5.0,
        gpu_wait_s: float = 15.0,
    ) -> StopReport:
        """SIGTERM the process group, SIGKILL it after ``grace_s``, reap, then verify.

        Idempotent: a second call returns the first report. Never raises for processes that
        are already gone.
        """
        if self._stop_report is not None:
            return self._stop_report
        t0 = time.monotonic()
        popen = self._popen
        if popen is None:
            self._stop_report = StopReport(
                signal=None, seconds=0.0, returncode=None, port_freed=None, gpu_memory_freed=None
            )
            return self._stop_report
        seen_pids, sig, leftovers = self._terminate(popen, grace_s, kill_wait_s)
        try:
            rc: int | None = popen.wait(timeout=max(0.1, kill_wait_s))
        except subprocess.TimeoutExpired:
            rc = popen.poll()
        self._stop_watchdog()  # after the engine: a guard is needed until then
        port_freed = (
            wait_port_free(self.port, self.host, timeout_s=port_wait_s)
            if self.port is not None
            else None
        )
        gpu_freed = (
            gpu.wait_gpu_memory_freed(
                seen_pids,
                self.gpu_indices,
                timeout_s=gpu_wait_s,
                baseline_used=self._gpu_baseline,
            )
            if self.gpu_indices
            else None
        )
        self._stop_report = StopReport(
            signal=sig,
            seconds=round(time.monotonic() - t0, 3),
            returncode=rc,
            leftovers=leftovers,
            port_freed=port_freed,
            gpu_memory_freed=gpu_freed,
        )
        if self.registry is not None and not leftovers:
            self.registry.remove(popen.pid)
        _LIVE.discard(self)
        return self._stop_report

    def _terminate(
        self, popen: subprocess.Popen[bytes], grace_s: float, kill_wait_s: float
    ) -> tuple[set[int], str | None, list[int]]:
        """SIGTERM, then SIGKILL, the engine's processes: (PIDs seen, strongest signal sent,
        PIDs alive after SIGKILL)."""
        # Until we reap our child (Popen.returncode still None), its PID, and so the group id,
        # cannot be reused: the group is ours. Once reaped, members must carry our token.
        token = None if popen.returncode is None else self._token
        # Snapshot the tree first: descendants that left the group (setsid) are found through
        # their parent, which must still be alive for that.
        procs = tree.descendants(popen.pid, self._create_time)
        if self._pgid is not None:
            procs += tree.group_members(self._pgid, not_before=self._create_time, token=token)
        seen_pids = {p.pid for p in procs}
        sig, leftovers = tree.terminate(
            procs,
            pgid=self._pgid,
            not_before=self._create_time,
            token=token,
            grace_s=grace_s,
            kill_wait_s=kill_wait_s,
            reap=popen.poll,
        )
        return seen_pids, sig, leftovers

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "not started" if self._popen is None else f"pid={self.pid} rc={self.returncode}"
        return f"EngineProcess(label={self.label!r}, port={self.port}, {state})"


# Engines started but not stopped when the interpreter exits normally (a forgotten stop, an
# unhandled exception outside a with-block) are stopped here rather than left holding GPUs.
# Strong references on purpose: a dropped EngineProcess must still be stopped.
_LIVE: set[EngineProcess] = set()


@atexit.register
def _stop_all_at_exit() -> None:
    for eng in list(_LIVE):
        # The interpreter is exiting: nothing better to do than try the next.
        with contextlib.suppress(Exception):
            eng.stop(grace_s=2.0, port_wait_s=0.5, gpu_wait_s=0.0)
