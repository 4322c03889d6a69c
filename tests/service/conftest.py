"""Helpers for the service tests: a tiny simulated sweep spec, a real `autotune serve` process
on a free port (own process group, always stopped), and cleanup of the jobs it started.

Jobs and the engines they start run in their own sessions (they outlive the service), so
cleanup finds them by the database URL planted in their environment (AUTOTUNE_DB), never by
name, and stops them by PID after checking that identity."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml

from tests.sweep.conftest import make_spec

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from autotune.cli import main; main()"]

# A sweep of a few ~1 s trials on the simulated engine: the sweep tests' spec, a little longer.
TINY: dict[str, Any] = make_spec(
    **{
        "name": "tiny",
        "budget.max_trials": 3,
        "search.n_startup_trials": 2,
        "search.known_good": False,
        "engine.startup_timeout_s": 30,
    }
)
TINY["workload"]["scenarios"][1].update(output_len=32, concurrency=2, num_requests=6)


def tiny_spec(name: str, **changes: Any) -> dict[str, Any]:
    """TINY named `name`, with dotted-key changes: tiny_spec("a", **{"budget.max_trials": 2})."""
    return make_spec(TINY, name=name, **changes)


def tiny_yaml(name: str, **changes: Any) -> str:
    return yaml.safe_dump(tiny_spec(name, **changes), sort_keys=False)


def write_config(state: Path, **fields: Any) -> None:
    """STATE/config.yaml with these fields (the rest default)."""
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = state / "config.yaml"
    path.write_text(yaml.safe_dump(fields))
    path.chmod(0o600)


def free_port() -> int:
    from autotune.process import free_port as _free

    return _free()


@dataclass
class Served:
    url: str
    state: Path
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def token(self) -> str:
        return (self.state / "token").read_text().strip()

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.auth, timeout=timeout)


def start_service(state: Path, *, extra: list[str] | None = None) -> Served:
    """`autotune serve` on a free port in its own process group; returns once /healthz is up."""
    port = free_port()
    log = state.parent / f"serve-{port}.log"
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                *CLI,
                "serve",
                "--port",
                str(port),
                "--state-dir",
                str(state),
                "--db",
                str(state / "autotune.db"),
                "--log-level",
                "warning",
                *(extra or []),
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    served = Served(url=f"http://127.0.0.1:{port}", state=state, proc=proc, log=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"autotune serve exited {proc.returncode}: {log.read_text()}")
        try:
            if httpx.get(f"{served.url}/healthz", timeout=2).status_code == 200:
                return served
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_service(served)
    raise AssertionError(f"autotune serve did not come up: {log.read_text()}")


def stop_service(served: Served, *, sig: signal.Signals = signal.SIGTERM) -> None:
    """Stop the service's process group (not its jobs: they run in their own sessions)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(served.proc.pid, sig)
    try:
        served.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(served.proc.pid, signal.SIGKILL)
        served.proc.wait(timeout=10)


def db_url(state: Path) -> str:
    return f"sqlite:///{(state / 'autotune.db').resolve()}"


def procs_of(state: Path) -> list[psutil.Process]:
    """Living jobs and engines of this state folder: AUTOTUNE_DB in their environment."""
    url = db_url(state)
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get("AUTOTUNE_DB") == url:
                found.append(p)
        except psutil.Error:
            continue
    return found


def stop_jobs(state: Path, grace_s: float = 20.0) -> None:
    """SIGTERM every job of the state folder (the sweep stops its engines), then SIGKILL what
    is left of its jobs and engines."""
    from autotune.service.jobs import JobTable
    from autotune.service.state import StateDir

    if not (state / "jobs.json").exists():
        return
    table = JobTable(StateDir(state.resolve()))
    with table.locked() as jobs:  # first: a live service would start them as others stop
        for name, rec in jobs.items():
            if rec.state == "queued":
                jobs[name] = rec.model_copy(update={"state": "cancelled"})
    for rec in table.snapshot().values():
        if rec.pid is None:
            continue
        try:
            p = psutil.Process(rec.pid)
            if abs(p.create_time() - rec.create_time) < 0.05:
                os.killpg(rec.pid, signal.SIGTERM)
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue
    deadline = time.monotonic() + grace_s
    while procs_of(state) and time.monotonic() < deadline:
        time.sleep(0.2)
    for p in procs_of(state):
        with contextlib.suppress(psutil.Error):
            p.kill()


def wait_for(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """A state folder whose jobs and engines are all gone after the test."""
    path = tmp_path / "state"
    write_config(path, allowed_paths=[str(tmp_path / "models")])
    (tmp_path / "models").mkdir()
    yield path
    stop_jobs(path)
    assert procs_of(path) == [], "jobs or engines of the test outlived it"


def fake_python(folder: Path) -> str:
    """An executable that stands in for the interpreter a JobManager runs jobs with: it takes
    the CLI arguments, starts in milliseconds and sleeps until it is signalled, so queue and
    working-folder tests need no real sweep."""
    path = folder / "fake-python"
    path.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(600)\n")
    path.chmod(0o755)
    return str(path)
