"""Joining a Ray cluster as users run it (issue 22 item 4): `ray start --head` on a machine that
has a token (~/.ray/auth_token) starts with token authentication, and `autotune sweep
--executor ray --ray-address HOST:PORT` joins it with that token; an open head is joined without
one; a head that wants a token this machine lacks, an unreachable address or one that is no Ray
head fail in seconds with a ConfigError naming --ray-address, and leave no sweep row behind:
the same sweep then runs under its name.

The heads are real `ray start --head --block` processes (stopped by their PID) and the drivers
are subprocesses with a HOME of their own, so no test touches the user's ~/.ray."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.store.models import SweepStatus
from autotune.sweep import ray_connect
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.spec import parse_spec
from tests.sweep.conftest import make_spec, write_spec

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray

RAY = Path(sys.executable).with_name("ray")

# Joins the cluster as the executor does, then runs an actor: a driver whose authentication
# differs from the head's joins, but the actors that head starts die.
DRIVER = """
import sys, ray
from autotune.errors import ConfigError
from autotune.sweep.ray_connect import connect_ray
try:
    connect_ray(ray, sys.argv[1])
except ConfigError as exc:
    print("CONFIG_ERROR", exc, flush=True)
    sys.exit(2)

@ray.remote(num_cpus=0)
class Echo:
    def ping(self):
        return "pong"

print(ray.get(Echo.remote().ping.remote(), timeout=90), flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def home_with_token(folder: Path, token: str | None) -> Path:
    """A HOME folder, with ~/.ray/auth_token where `token` is given."""
    folder.mkdir(parents=True, exist_ok=True)
    if token is not None:
        (folder / ".ray").mkdir(exist_ok=True)
        (folder / ".ray" / "auth_token").write_text(token)
    return folder


def env_for(home: Path, **extra: str) -> dict[str, str]:
    """This environment without Ray's settings (RAY_AUTH_MODE a local ray.init() of this test
    process may have set, RAY_ADDRESS), HOME replaced."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "HOME": str(home), **extra}


@contextmanager
def ray_head(home: Path, log: Path, **extra: str) -> Iterator[str]:
    """`ray start --head` with HOME=`home` (and `extra` in its environment), as a user starts
    it; its address while it runs."""
    port = free_port()
    argv = [str(RAY), "start", "--head", f"--port={port}", "--num-cpus=1", "--block"]
    argv += ["--disable-usage-stats", "--include-dashboard=false"]
    with log.open("w") as out:
        head = subprocess.Popen(argv, env=env_for(home, **extra), stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 90
        while "Ray runtime started" not in log.read_text():
            assert head.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "ray start --head did not start"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        head.terminate()  # `--block`: it stops the head's processes on SIGTERM
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        forget_head(port)


def forget_head(port: int) -> None:
    """`ray start` leaves its address in /tmp/ray/ray_current_cluster, and a later plain
    ray.init() on this machine (another test's local cluster) would try to join that dead
    head: the file goes with the head this test started."""
    current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    with contextlib.suppress(OSError):
        if current.read_text().strip().endswith(f":{port}"):
            current.unlink()


def drive(address: str, home: Path, **extra: str) -> tuple[int, str, float]:
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-c", DRIVER, address],
        env=env_for(home, **extra),
        capture_output=True,
        text=True,
        timeout=240,
    )
    return res.returncode, res.stdout + res.stderr, time.monotonic() - t0


@pytest.fixture(scope="module")
def token_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A plain `ray start --head` on a machine whose ~/.ray/auth_token exists (a local
    ray.init() writes one): Ray turns token authentication on. Its address and that HOME."""
    base = tmp_path_factory.mktemp("token-head")
    home = home_with_token(base / "home", uuid.uuid4().hex + uuid.uuid4().hex)
    with ray_head(home, base / "head.log") as address:
        yield address, home


@pytest.fixture
def no_local_ray() -> Iterator[None]:
    """This process has not joined a cluster (the executor joins only when it has not)."""
    if ray.is_initialized():
        ray.shutdown()
    yield
    if ray.is_initialized():
        ray.shutdown()


def test_a_plain_head_with_a_token_on_this_machine_runs_a_sweep(
    token_head: tuple[str, Path], tmp_path: Path
) -> None:
    address, home = token_head
    changes: dict[str, Any] = {"budget.max_trials": 2}
    spec = write_spec(tmp_path, make_spec(**changes))
    db = tmp_path / "a.db"
    cli = "from autotune.cli import main; main()"
    args = ["sweep", str(spec), "--db", str(db), "--out", str(tmp_path / "out"), "--json"]
    args += ["--executor", "ray", "--ray-address", address, "--no-report", "--progress", "none"]
    res = subprocess.run(
        [sys.executable, "-c", cli, *args],
        env=env_for(home),  # no RAY_AUTH_MODE: the user set nothing
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    out = json.loads(res.stdout[res.stdout.index("{") :])
    assert out["status"] == SweepStatus.FINISHED.value and out["launched"] == 2
    assert out["counts"].get("complete", 0) >= 1 and "worker_lost" not in out["failures_by_class"]


def test_a_token_head_without_our_token_fails_fast_and_says_what_to_do(
    token_head: tuple[str, Path], tmp_path: Path
) -> None:
    address, _ = token_head
    rc, out, took = drive(address, home_with_token(tmp_path / "empty", None))
    assert rc == 2 and took < 30, out
    assert "--ray-address (execution.ray_address)" in out
    assert "requires token authentication and this machine has no token" in out
    assert "RAY_AUTH_TOKEN" in out and "~/.ray/auth_token" in out
    # a token of the user's own is used, but a wrong one is refused
    rc, out, took = drive(address, tmp_path / "empty", RAY_AUTH_TOKEN="0" * 32)
    assert rc == 2 and took < 30 and "refused this machine's token" in out, out


def test_the_users_token_is_honoured(token_head: tuple[str, Path], tmp_path: Path) -> None:
    address, home = token_head
    token = (home / ".ray" / "auth_token").read_text()
    rc, out, _ = drive(address, home_with_token(tmp_path / "empty", None), RAY_AUTH_TOKEN=token)
    assert rc == 0 and "pong" in out, out


def test_an_open_head_is_joined_without_a_token_even_where_one_exists(tmp_path: Path) -> None:
    home = home_with_token(tmp_path / "home", uuid.uuid4().hex + uuid.uuid4().hex)
    with ray_head(home, tmp_path / "head.log", RAY_AUTH_MODE="disabled") as address:
        rc, out, _ = drive(address, home)  # a token here: not sent to a head that has none
    assert rc == 0 and "pong" in out, out


def test_an_unreachable_address_fails_fast_and_leaves_no_sweep_row(
    store: Any, tmp_path: Path, no_local_ray: None
) -> None:
    changes: dict[str, Any] = {
        "budget.max_trials": 2,
        "execution.executor": "ray",
        "execution.ray_address": "127.0.0.1:1",
    }
    spec = parse_spec(make_spec(**changes))
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as err:
        run_sweep(spec, store=store, out_dir=tmp_path / "out", install_signals=False)
    assert time.monotonic() - t0 < 15
    msg = str(err.value)
    assert "--ray-address (execution.ray_address)" in msg and "127.0.0.1:1" in msg
    assert "cannot reach" in msg and "ray start --head --port=1" in msg
    assert err.value.exit_code == 2
    assert store.find_sweep(spec.name) is None  # nothing blocks a rerun under the name
    out = run_sweep(
        spec,
        store=store,
        out_dir=tmp_path / "out",
        executor_kind="inprocess",
        install_signals=False,
    )
    assert out.status == SweepStatus.FINISHED.value and out.launched == 2


def test_an_address_that_is_no_ray_head_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_local_ray: None
) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)  # else the probe is skipped
    monkeypatch.setattr(ray_connect, "RAY_PROBE_TIMEOUT_S", 1.0)
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match="does not answer as a Ray head"):
            ray_connect.connect_ray(ray, address)
        assert time.monotonic() - t0 < 10
    assert not ray.is_initialized()


def test_auto_without_a_cluster_and_a_malformed_address_are_clear_errors(
    monkeypatch: pytest.MonkeyPatch, no_local_ray: None
) -> None:
    import ray._private.services as services

    def nothing_running(addr: str, temp_dir: str | None = None) -> str:
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(services, "canonicalize_bootstrap_address", nothing_running)
    with pytest.raises(ConfigError, match="auto found no running Ray cluster"):
        ray_connect.connect_ray(ray, "auto")
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        ray_connect.connect_ray(ray, "10.0.0.1:notaport")
    assert not ray.is_initialized()
