"""Fault campaign: run autotune as a careless user and as an attacker would, and check that it
degrades well. Every case runs the real CLI (or service) in child processes on the simulated
engine, on CPU, and prints one table row: case, expected, observed, pass. The summary gives the
figures the hardening issue asks for:

- unstoppable runs: a signal not answered (process gone) within 10 s;
- tracebacks printed by the CLI on any case;
- secrets found by a byte grep of the database, the report folder and every JSON output;
- orphan engine processes 10 s after the driver was SIGKILLed;
- peak memory (max RSS, from wait4) of the CLI on every bad input.

    .venv/bin/python benchmarks/fault_campaign.py [--only bad_inputs,signals,...] [--keep DIR]

Exit status 0 only when every case passed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.sweep.conftest import make_spec  # noqa: E402

SIGNAL_LIMIT_S = 10.0
ORPHAN_WAIT_S = 10.0
MEMORY_LIMIT_MB = 200.0
CASE_ENV = "FAULT_CAMPAIGN_CASE"  # marks every process a case starts (inherited)
SECRETS = {
    "HF_TOKEN": "hf_CampaignSecretValue0001",
    "OPENAI_API_KEY": "sk-CampaignSecretValue0002",
    "api_key": "CampaignSecretValue0003",
}

# A small simulated sweep (the demo's target; short trials).
BASE: dict[str, Any] = {
    "name": "fc",
    "target": {
        "engine": "sglang",
        "engine_version": "0.5.17",
        "model": "qwen3.8-27b-awq-int4",
        "gpu": "rtx-4080-super-32g",
        "host_free_gib": 64,
    },
    "simulate": {"time_scale": 20, "max_startup_s": 0.3},
    "space": {
        "overrides": {
            "mem_fraction_static": {"low": 0.86, "high": 0.94, "step": 0.02},
            "chunked_prefill_size": {"choices": [2048, 4096]},
            "page_size": 1,
            "enable_hierarchical_cache": False,
            "speculative_algorithm": None,
        }
    },
    "workload": {
        "scenarios": [
            {
                "kind": "throughput",
                "name": "tp",
                "prompt_len": 256,
                "output_len": 32,
                "concurrency": 4,
                "num_requests": 8,
                "warmup_requests": 0,
            }
        ]
    },
    "objective": {"metric": "tp.output_tok_s"},
    "budget": {"max_trials": 4},
    "search": {"seed": 0, "n_startup_trials": 2},
    "finalists": {"top_k": 0},
    "engine": {"startup_timeout_s": 30, "bench_timeout_s": 120, "stop_grace_s": 3},
    "execution": {"workers": 1},
}


def spec_with(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-key changes (the sweep tests' helper)."""
    return make_spec(BASE, **changes)


@dataclass
class Row:
    case: str
    expected: str
    observed: str
    ok: bool


@dataclass
class Campaign:
    work: Path
    rows: list[Row] = field(default_factory=list)
    tracebacks: int = 0
    unstoppable: int = 0
    signal_s: list[float] = field(default_factory=list)
    secrets_found: list[str] = field(default_factory=list)
    orphans: int = 0
    peak_mb: list[tuple[str, float]] = field(default_factory=list)
    json_outputs: list[str] = field(default_factory=list)

    def add(self, case: str, expected: str, observed: str, ok: bool) -> None:
        self.rows.append(Row(case, expected, observed, ok))
        mark = "PASS" if ok else "FAIL"
        print(f"  [{mark}] {case}: {observed}", flush=True)


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-c", "from autotune.cli import main; main()", *args]


def env_for(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("AUTOTUNE_DEBUG", None)
    env.update(extra or {})
    return env


@dataclass
class Run:
    code: int
    out: str
    err: str
    peak_mb: float
    seconds: float


def run_cli(c: Campaign, *args: str, cwd: Path, timeout: float = 180, env: Any = None) -> Run:
    """Run the CLI to completion; peak RSS of that one child from wait4 (ru_maxrss, KiB)."""
    out_f = tempfile.TemporaryFile(mode="w+")
    err_f = tempfile.TemporaryFile(mode="w+")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cli_argv(*args), cwd=cwd, env=env or env_for(), stdout=out_f, stderr=err_f
    )
    deadline = t0 + timeout
    status = None
    rusage = None
    while time.monotonic() < deadline:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        _, status, rusage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out_f.seek(0)
    err_f.seek(0)
    r = Run(
        code=proc.returncode,
        out=out_f.read(),
        err=err_f.read(),
        peak_mb=(rusage.ru_maxrss / 1024) if rusage else 0.0,
        seconds=time.monotonic() - t0,
    )
    if "Traceback (most recent call last)" in r.err or "Traceback" in r.out:
        c.tracebacks += 1
    if "--json" in args:
        c.json_outputs.append(r.out)
    return r


def write(path: Path, spec: dict[str, Any] | str | bytes) -> Path:
    if isinstance(spec, bytes):
        path.write_bytes(spec)
    elif isinstance(spec, str):
        path.write_text(spec)
    else:
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


# -- bad inputs ------------------------------------------------------------------------------


def alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx","xxxxxxxxxx"]']
    for i in range(1, levels):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 9)}]")
    lines.append(f"name: [*a{levels - 1}]")
    return "\n".join(lines) + "\n"


def bad_inputs() -> list[tuple[str, Any, list[str], int]]:
    """(case, spec or raw text, extra CLI args, expected exit code)."""
    big = "x: " + "y" * 3_000_000 + "\n"
    return [
        ("yaml alias bomb", alias_bomb(), [], 2),
        ("non-UTF-8 bytes", b"name: \xff\xfe\xfa\n", [], 2),
        ("empty file", "", [], 2),
        ("top level is a list", "- a\n- b\n", [], 2),
        ("duplicate keys", "name: a\nname: b\n", [], 2),
        ("3 MB scalar", big, [], 2),
        ("deep nesting", "a: " + "[" * 5000 + "]" * 5000 + "\n", [], 2),
        ("unknown top-level key", spec_with(bogus=1), [], 2),
        (
            "num_requests 10**12",
            spec_with(
                **{
                    "workload.scenarios": [
                        {**BASE["workload"]["scenarios"][0], "num_requests": 10**12}
                    ]
                }
            ),
            [],
            2,
        ),
        (
            "prompt_len 10**9",
            spec_with(
                **{
                    "workload.scenarios": [
                        {**BASE["workload"]["scenarios"][0], "prompt_len": 10**9}
                    ]
                }
            ),
            [],
            2,
        ),
        ("launcher []", spec_with(**{"engine.launcher": []}), [], 2),
        (
            "range override outside the domain",
            spec_with(
                **{"space.overrides.mem_fraction_static": {"low": 1.5, "high": 2.0, "step": 0.1}}
            ),
            [],
            2,
        ),
        (
            "value override outside the domain",
            spec_with(**{"space.overrides.mem_fraction_static": 1.5}),
            [],
            2,
        ),
        ("unknown GPU", spec_with(**{"target.gpu": "h999"}), [], 2),
        ("unknown model card", spec_with(**{"target.model": "no-such"}), [], 2),
        ("engine_version not a version", spec_with(**{"target.engine_version": "abc"}), [], 2),
        ("missing space file", spec_with(**{"space.file": "/no/such.yaml"}), [], 2),
        ("bad objective metric", spec_with(**{"objective.metric": "tp.bogus"}), [], 2),
        ("port 0", spec_with(**{"engine.port": 0}), [], 2),
        (
            "fixed port with 2 workers",
            spec_with(**{"engine.port": 39999, "execution.workers": 2}),
            [],
            2,
        ),
        ("until 25:00", spec_with(**{"budget.until": "25:00"}), [], 2),
        ("negative stop grace", spec_with(**{"engine.stop_grace_s": -1}), [], 2),
        ("unknown engine flag", spec_with(**{"space.fixed": {"no_such_flag": 1}}), [], 2),
        ("name with a slash", spec_with(name="../evil"), [], 2),
        ("unwritable --out", spec_with(), ["--out", "SPECFILE/out"], 2),
        ("unknown CLI flag", spec_with(), ["--no-such-flag"], 2),
        ("--until bad", spec_with(), ["--until", "7pm"], 2),
        ("database is a folder", spec_with(), ["--db", "DBDIR"], 6),
        ("database is garbage", spec_with(), ["--db", "GARBAGE"], 6),
    ]


def section_bad_inputs(c: Campaign) -> None:
    print("bad inputs (autotune sweep SPEC --json):", flush=True)
    d = c.work / "bad"
    d.mkdir()
    (d / "dbdir.db").mkdir()
    (d / "garbage.db").write_bytes(os.urandom(4096))
    for i, (case, spec, extra, want) in enumerate(bad_inputs()):
        path = write(d / f"s{i}.yaml", spec)
        args = [a.replace("SPECFILE", str(path)) for a in extra]
        args = [
            str(d / "dbdir.db") if a == "DBDIR" else str(d / "garbage.db") if a == "GARBAGE" else a
            for a in args
        ]
        if "--db" not in args:
            args += ["--db", str(d / f"s{i}.db")]
        r = run_cli(c, "sweep", str(path), *args, "--json", "--progress", "none", cwd=d)
        c.peak_mb.append((case, r.peak_mb))
        try:
            err = json.loads(r.out)["error"]
            json_ok = bool(err.get("message")) and err.get("exit_code") == r.code
        except (ValueError, KeyError, TypeError):
            err, json_ok = {}, False
        tb = "Traceback" in r.err
        ok = r.code == want and json_ok and not tb and r.peak_mb < MEMORY_LIMIT_MB
        msg = err.get("message") or r.err.strip().splitlines()[-1:] or [""]
        first = (msg if isinstance(msg, str) else msg[0])[:90].replace("\n", " ")
        c.add(
            f"bad input: {case}",
            f"exit {want}, JSON error, no traceback, < {MEMORY_LIMIT_MB:.0f} MB",
            f"exit {r.code}, json {'yes' if json_ok else 'no'}, traceback "
            f"{'yes' if tb else 'no'}, {r.peak_mb:.0f} MB, {r.seconds:.1f} s: {first}",
            ok,
        )


# -- signals ---------------------------------------------------------------------------------


def sweep_args(d: Path, path: Path) -> list[str]:
    """`autotune sweep` on a case folder: its database, its report folder, JSON, no bar."""
    return [
        "sweep",
        str(path),
        "--db",
        str(d / "s.db"),
        "--out",
        str(d / "out"),
        "--json",
        "--progress",
        "none",
    ]


def start_sweep(
    c: Campaign, d: Path, spec: dict[str, Any], *extra: str, env: Any = None
) -> subprocess.Popen[str]:
    path = write(d / "spec.yaml", spec)
    return subprocess.Popen(
        cli_argv(*sweep_args(d, path), *extra),
        cwd=d,
        env=env or env_for({CASE_ENV: str(d)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # like a terminal's job: our signals reach only the driver
    )


def wait_running_trial(d: Path, timeout: float = 90) -> bool:
    """True once the database shows a running trial (read through the CLI: `status --json`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(
            cli_argv("status", "fc", "--db", str(d / "s.db"), "--json"),
            env=env_for(),
            capture_output=True,
            text=True,
            cwd=d,
        )
        if r.returncode == 0:
            try:
                if json.loads(r.stdout).get("running"):
                    return True
            except ValueError:
                pass
        time.sleep(0.3)
    return False


def engines_of(d: Path) -> list[psutil.Process]:
    """Live processes started for this case: the case's marker variable is in their
    environment (engines and their children inherit the driver's), or their command line
    names the case's folder."""
    found = []
    marker = str(d)
    for p in psutil.process_iter(["cmdline", "pid"]):
        try:
            if p.pid == os.getpid() or p.status() == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(p.info["cmdline"] or [])
            if marker in cmd or p.environ().get(CASE_ENV) == marker:
                found.append(p)
        except psutil.Error:
            continue
    return found


def signal_case(
    c: Campaign, name: str, spec: dict[str, Any], sigs: list[int], settle_s: float = 0.0
) -> None:
    d = c.work / f"sig-{name}"
    d.mkdir()
    proc = start_sweep(c, d, spec)
    if not wait_running_trial(d):
        proc.kill()
        c.add(f"signal: {name}", "a trial runs", "no trial started in 90 s", False)
        return
    time.sleep(settle_s)  # into the benchmark phase, past the engine's start
    for i, s in enumerate(sigs):
        if i:
            time.sleep(1.0)
        proc.send_signal(s)
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=60)
        answered = time.monotonic() - t0
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        answered = float("inf")
    c.signal_s.append(answered)
    if answered > SIGNAL_LIMIT_S:
        c.unstoppable += 1
    if "Traceback" in err:
        c.tracebacks += 1
    c.json_outputs.append(out)
    time.sleep(1.0)
    left = engines_of(d)
    try:
        outcome = json.loads(out)
        reason, status = outcome.get("stop_reason", ""), outcome.get("status")
    except ValueError:
        reason, status = "(no JSON)", None
    ok = answered <= SIGNAL_LIMIT_S and not left and status == "stopped"
    c.add(
        f"signal: {name}",
        f"exit within {SIGNAL_LIMIT_S:.0f} s, status stopped, no engine left",
        f"exit {proc.returncode} after {answered:.1f} s, status {status}, "
        f"{len(left)} processes left; reason: {reason[:60]}",
        ok,
    )


def section_signals(c: Campaign) -> None:
    print("signals (a sweep on the simulated engine, signal while a trial runs):", flush=True)
    slow = spec_with(
        **{
            "simulate.time_scale": 1,
            "budget.max_trials": 50,
            "workload.scenarios": [
                {**BASE["workload"]["scenarios"][0], "num_requests": 64, "output_len": 256}
            ],
        }
    )
    signal_case(c, "SIGTERM", slow, [signal.SIGTERM])
    signal_case(c, "SIGINT twice", slow, [signal.SIGINT, signal.SIGINT])
    # a long benchmark phase (1,000 requests of 32K tokens) must not block the event loop
    heavy = spec_with(
        **{
            "simulate.time_scale": 1,
            "target.engine_version": "0.5.17",
            "workload.scenarios": [
                {
                    "kind": "throughput",
                    "name": "tp",
                    "prompt_len": 32768,
                    "output_len": 16,
                    "concurrency": 8,
                    "num_requests": 1000,
                    "warmup_requests": 0,
                }
            ],
            "objective.metric": "tp.output_tok_s",
        }
    )
    signal_case(c, "SIGTERM during 1000 x 32K requests", heavy, [signal.SIGTERM], settle_s=4)


# -- crash and resume ------------------------------------------------------------------------


def section_crash(c: Campaign) -> None:
    print("driver SIGKILL, orphans, status, resume:", flush=True)
    d = c.work / "crash"
    d.mkdir()
    spec = spec_with(**{"simulate.time_scale": 1, "budget.max_trials": 3, "execution.workers": 2})
    proc = start_sweep(c, d, spec)
    if not wait_running_trial(d):
        os.killpg(proc.pid, signal.SIGKILL)
        c.add("crash: driver SIGKILL", "a trial runs", "no trial started", False)
        return
    before = engines_of(d)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    t0 = time.monotonic()
    while time.monotonic() - t0 < ORPHAN_WAIT_S and engines_of(d):
        time.sleep(0.2)
    gone_s = time.monotonic() - t0
    left = engines_of(d)
    c.orphans += len(left)
    c.add(
        "crash: engines die with a SIGKILLed driver",
        f"0 processes {ORPHAN_WAIT_S:.0f} s later",
        f"{len(before)} processes before, {len(left)} left after {gone_s:.1f} s",
        not left,
    )
    for p in left:  # leave the machine clean for the next cases
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    r = run_cli(c, "status", "fc", "--db", str(d / "s.db"), "--json", cwd=d)
    try:
        info = json.loads(r.out)
    except ValueError:
        info = {}
    driver = info.get("driver") or {}
    dead = isinstance(driver, dict) and driver.get("alive") is False or driver == "dead"
    c.add(
        "crash: status tells a dead driver",
        "status shows the driver is gone",
        f"status {info.get('status')}, driver {json.dumps(driver)[:80]}",
        bool(dead),
    )
    r = run_cli(
        c,
        "sweep",
        "--resume",
        "fc",
        "--db",
        str(d / "s.db"),
        "--json",
        "--progress",
        "none",
        cwd=d,
        timeout=300,
    )
    try:
        out = json.loads(r.out)
    except ValueError:
        out = {}
    ok = r.code == 0 and out.get("status") == "finished" and out.get("launched", 0) >= 3
    c.add(
        "crash: resume after SIGKILL finishes the sweep",
        "exit 0, finished, >= 3 launched",
        f"exit {r.code}, {out.get('status')}, {out.get('launched')} launched",
        ok,
    )


# -- storage faults --------------------------------------------------------------------------


def section_storage(c: Campaign) -> None:
    print("storage faults:", flush=True)
    d = c.work / "storage"
    d.mkdir()
    spec = write(d / "spec.yaml", spec_with())
    cases = [
        ("status on a missing database folder", ["status", "--db", str(d / "no/such/x.db")]),
        ("status on a garbage file", ["status", "--db", str(d / "garbage.db")]),
        ("sweep with a bad database URL", ["sweep", str(spec), "--db", "nosuch://x/y"]),
        ("resume of an unknown sweep", ["sweep", "--resume", "nope", "--db", str(d / "e.db")]),
    ]
    (d / "garbage.db").write_bytes(b"SQLite format 3\x00" + os.urandom(8192))
    for case, args in cases:
        r = run_cli(c, *args, "--json", cwd=d)
        try:
            err = json.loads(r.out)["error"]
        except (ValueError, KeyError, TypeError):
            err = {}
        tb = "Traceback" in r.err
        ok = r.code in (2, 6) and bool(err) and not tb
        c.add(
            f"storage: {case}",
            "exit 2 or 6, JSON error, no traceback",
            f"exit {r.code}, traceback {'yes' if tb else 'no'}: {str(err.get('message'))[:80]}",
            ok,
        )


# -- secrets ---------------------------------------------------------------------------------


def grep_secrets(c: Campaign, where: str, blobs: list[tuple[str, bytes]]) -> list[str]:
    found = []
    for label, data in blobs:
        for name, value in SECRETS.items():
            if value.encode() in data:
                found.append(f"{name} in {label}")
    c.secrets_found.extend(f"{where}: {f}" for f in found)
    return found


def section_secrets(c: Campaign) -> None:
    print("secrets at rest and in output:", flush=True)
    d = c.work / "secrets"
    d.mkdir()
    spec = spec_with(
        **{
            "engine.env": {
                "HF_TOKEN": SECRETS["HF_TOKEN"],
                "OPENAI_API_KEY": SECRETS["OPENAI_API_KEY"],
            },
            "space.fixed": {"api_key": SECRETS["api_key"]},
            "budget.max_trials": 2,
        }
    )
    path = write(d / "spec.yaml", spec)
    sweep = run_cli(c, *sweep_args(d, path), cwd=d, timeout=300)
    try:
        outcome = json.loads(sweep.out)
        complete = outcome.get("counts", {}).get("complete", 0)
    except ValueError:
        complete = 0
    status = run_cli(c, "status", "fc", "--db", str(d / "s.db"), "--json", cwd=d)
    listing = run_cli(c, "status", "--db", str(d / "s.db"), "--json", cwd=d)
    blobs: list[tuple[str, bytes]] = [
        (f.name, f.read_bytes()) for f in sorted(d.glob("s.db*")) if f.is_file()
    ]  # the database with its WAL and journal
    for p in sorted((d / "out").rglob("*")):
        # the engine's own server.log is the engine's output, not autotune's: it echoes its
        # argv (a real SGLang prints its server_args, api_key included); checked apart
        if p.is_file() and p.name != "server.log":
            blobs.append((str(p.relative_to(d)), p.read_bytes()))
    for label, text in (
        ("sweep --json", sweep.out),
        ("status --json", status.out),
        ("status list --json", listing.out),
    ):
        blobs.append((label, text.encode()))
    found = grep_secrets(c, "secrets", blobs)
    c.add(
        "secrets: none in the database, the report folder or JSON output",
        "0 found, trials complete (the engine and client got the real key)",
        f"{len(found)} found ({', '.join(found[:3])}), {complete} trials complete",
        not found and complete > 0,
    )


# -- service ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def section_service(c: Campaign) -> None:
    """`autotune serve` under abuse: no token, relative and state-folder paths, a symlink out,
    junk bodies, and several jobs on the same GPUs (they must queue)."""
    import httpx

    print("service abuse (autotune serve):", flush=True)
    d = c.work / "service"
    state, allowed, outside = d / "state", d / "allowed", d / "outside"
    for p in (allowed, outside):
        p.mkdir(parents=True)
    state.mkdir(mode=0o700)
    (outside / "secret.txt").write_text("x")
    (allowed / "link").symlink_to(outside)
    (state / "config.yaml").write_text(f"allowed_paths: [{allowed}]\nmax_workers: 2\n")
    port = free_port()
    log = open(d / "serve.log", "w")
    srv = subprocess.Popen(
        cli_argv(
            "serve",
            "--state-dir",
            str(state),
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--db",
            str(d / "s.db"),
        ),
        cwd=d,
        env=env_for({CASE_ENV: str(d)}),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    statuses: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        token = (state / "token").read_text().strip()
        h = {"Authorization": f"Bearer {token}"}
        cli = httpx.Client(base_url=base, timeout=30)

        def post(path: str, body: Any, headers: Any = None, **kw: Any) -> httpx.Response:
            r = cli.post(path, json=body, headers=headers if headers is not None else h, **kw)
            statuses.append(r.status_code)
            return r

        r = post("/v1/sweeps", {"spec": spec_with()}, headers={})
        c.add("service: no token", "401", str(r.status_code), r.status_code == 401)
        for value in ("token", "config.yaml", "autotune.db", str(state / "token")):
            r = post(
                "/v1/sweeps", {"spec": spec_with(**{"space.fixed": {"chat_template": value}})}
            )
            leak = str(state) in r.text and str(state) not in value
            c.add(
                f"service: chat_template {value if '/' not in value else 'STATE/token'}",
                "403, no server path in the body",
                f"{r.status_code}{', leaks the state path' if leak else ''}",
                r.status_code == 403 and not leak,
            )
        r = post(
            "/v1/sweeps",
            {
                "spec": spec_with(
                    **{"space.fixed": {"chat_template": str(allowed / "link" / "secret.txt")}}
                )
            },
        )
        leak = str(outside) in r.text or "allowed roots" in r.text
        c.add(
            "service: symlink out of an allowed folder",
            "403, no resolved path in the body",
            f"{r.status_code}{', leaks the target' if leak else ''}",
            r.status_code == 403 and not leak,
        )
        deep: Any = 1
        for _ in range(3000):
            deep = [deep]
        r = cli.post(
            "/v1/sweeps",
            content='{"spec": ' + "[" * 3000 + "]" * 3000 + "}",
            headers={**h, "Content-Type": "application/json"},
        )
        statuses.append(r.status_code)
        c.add(
            "service: JSON nested 3000 deep", "4xx", str(r.status_code), 400 <= r.status_code < 500
        )
        r = cli.post(
            "/v1/sweeps",
            content=b"x" * (2 * 1024 * 1024),
            headers={**h, "Content-Type": "application/yaml"},
        )
        statuses.append(r.status_code)
        c.add("service: 2 MB body", "413", str(r.status_code), r.status_code == 413)
        r = cli.post(
            "/v1/sweeps", content=b"\xff\xfe{", headers={**h, "Content-Type": "application/json"}
        )
        statuses.append(r.status_code)
        c.add("service: malformed JSON", "4xx", str(r.status_code), 400 <= r.status_code < 500)
        # several jobs on the same (here: all) GPUs: one runs, the rest queue in order
        names = [f"q{i}" for i in range(4)]
        for n in names:
            post(
                "/v1/sweeps",
                {"spec": spec_with(name=n, **{"budget.max_trials": 2, "simulate.time_scale": 1})},
            )
        time.sleep(1.0)
        listing = cli.get("/v1/sweeps", headers=h).json()
        statuses.append(200)
        text = json.dumps(listing)
        c.json_outputs.append(text)
        jobs = {s.get("name"): s for s in listing.get("sweeps", [])}
        states = {n: (jobs.get(n) or {}).get("state") for n in names}
        positions = [(jobs.get(n) or {}).get("queue_position") for n in names]
        running = sum(1 for v in states.values() if v in ("starting", "running"))
        ok = running == 1 and positions[1:] == [1, 2, 3]
        c.add(
            "service: 4 jobs on the same GPUs",
            "1 running, 3 queued at positions 1, 2, 3",
            f"states {list(states.values())}, positions {positions}",
            ok,
        )
        for n in reversed(names):
            r = post(f"/v1/sweeps/{n}/stop", {"force": False, "wait_s": 20})
        fives = [s for s in statuses if s >= 500]
        c.add(
            "service: no 5xx", "0 responses >= 500", f"{len(fives)} of {len(statuses)}", not fives
        )
    except Exception as exc:  # the campaign reports, it does not crash
        c.add("service: campaign", "runs", f"{type(exc).__name__}: {exc}", False)
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(srv.pid, signal.SIGKILL)
        log.close()
        left = engines_of(d)
        c.orphans += len(left)
        if left:
            c.add("service: nothing left after shutdown", "0 processes", str(len(left)), False)


SECTIONS: dict[str, Callable[[Campaign], None]] = {
    "bad_inputs": section_bad_inputs,
    "signals": section_signals,
    "crash": section_crash,
    "storage": section_storage,
    "secrets": section_secrets,
    "service": section_service,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated sections: " + ", ".join(SECTIONS))
    ap.add_argument("--keep", type=Path, help="keep the work folder here")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or list(SECTIONS)
    work = Path(tempfile.mkdtemp(prefix="autotune-faults-"))
    c = Campaign(work=work)
    t0 = time.monotonic()
    try:
        for n in names:
            SECTIONS[n](c)
    finally:
        # JSON outputs of every section are grepped for secrets too
        grep_secrets(
            c, "json", [(f"output {i}", o.encode()) for i, o in enumerate(c.json_outputs)]
        )
        if a.keep:
            shutil.copytree(work, a.keep, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    print()
    w = max(len(r.case) for r in c.rows)
    print(f"{'case':{w}}  {'pass':4}  expected / observed")
    for r in c.rows:
        print(f"{r.case:{w}}  {'yes' if r.ok else 'NO':4}  {r.expected}")
        print(f"{'':{w}}        {r.observed}")
    passed = sum(r.ok for r in c.rows)
    peak = max(c.peak_mb, key=lambda x: x[1]) if c.peak_mb else ("-", 0.0)
    print()
    print(f"cases: {passed}/{len(c.rows)} passed in {time.monotonic() - t0:.0f} s")
    sig = ", ".join(f"{s:.1f}" for s in c.signal_s) or "-"
    print(
        f"unstoppable runs (signal not answered in {SIGNAL_LIMIT_S:.0f} s): {c.unstoppable}"
        f"  (answered in: {sig} s)"
    )
    print(f"tracebacks: {c.tracebacks}")
    print(
        f"secrets found in database, reports, JSON output: {len(set(c.secrets_found))}"
        + (f" ({'; '.join(sorted(set(c.secrets_found))[:5])})" if c.secrets_found else "")
    )
    print(f"orphan processes {ORPHAN_WAIT_S:.0f} s after driver SIGKILL: {c.orphans}")
    print(
        f"CLI peak memory on bad inputs: max {peak[1]:.0f} MB ({peak[0]}), limit "
        f"{MEMORY_LIMIT_MB:.0f} MB, {len(c.peak_mb)} inputs"
    )
    return 0 if passed == len(c.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
