"""Regressions from the fault campaign (issue 19, item 9): inputs that used to give a
traceback, a sweep left marked running, a silent default, an accepted range outside the
domain, the wrong name in an error, nothing on stdout under --json, a stale stop reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError, StorageError, UnknownNameError
from autotune.store.db import Store
from autotune.sweep.analytic import AnalyticExecutor
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.spec import load_spec, parse_spec
from tests.sweep.conftest import make_spec, write_spec

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The installed entry point in a child process: what a user (or a script) sees."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AUTOTUNE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-c", "from autotune.cli import main; main()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_unwritable_out_is_a_clear_error_and_leaves_no_running_sweep(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, make_spec(**{"budget.max_trials": 1}))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    db = tmp_path / "s.db"
    res = _cli("sweep", str(spec), "--db", str(db), "--out", str(blocker / "out"), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert "--out" in res.stderr and "cannot write the output folder" in res.stderr
    with Store(path=db) as store:  # nothing half-started is left "running"
        assert [s.status for s in store.list_sweeps()] == []


def test_empty_launcher_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = write_spec(tmp_path, make_spec(**{"engine.launcher": []}))
    with pytest.raises(ConfigError, match=r"engine\.launcher: an empty launcher"):
        load_spec(path)
    with pytest.raises(ConfigError, match=r"engine\.launcher"):
        parse_spec(make_spec(**{"engine.launcher": ["python", " "]}))


def test_range_override_entirely_outside_the_domain_is_refused(tmp_path: Path) -> None:
    outside = make_spec(
        **{"space.overrides.mem_fraction_static": {"low": 1.5, "high": 2.0, "step": 0.1}}
    )
    with Store(path=tmp_path / "a.db") as store, pytest.raises(ConfigError) as err:
        run_sweep(
            parse_spec(outside),
            store=store,
            out_dir=tmp_path / "out",
            executor=AnalyticExecutor(1),
            install_signals=False,
        )
    assert "mem_fraction_static" in str(err.value) and "entirely outside" in str(err.value)
    # overlapping (here: wider) ranges stay allowed
    overlap = make_spec(
        **{"space.overrides.mem_fraction_static": {"low": 0.90, "high": 0.96, "step": 0.02}}
    )
    with Store(path=tmp_path / "b.db") as store:
        out = run_sweep(
            parse_spec(overlap),
            store=store,
            out_dir=tmp_path / "out2",
            executor=AnalyticExecutor(1),
            install_signals=False,
            max_trials=1,
        )
    assert out.launched == 1


@pytest.mark.parametrize(
    ("change", "field", "kind"),
    [
        ({"target.gpu": "h999"}, "target.gpu", UnknownNameError),
        ({"target.model": "no-such-card"}, "target.model", UnknownNameError),
        ({"space.file": "/no/such/space.yaml"}, "space.file", ConfigError),
    ],
)
def test_target_errors_name_the_spec_field(
    tmp_path: Path, change: dict[str, Any], field: str, kind: type[Exception]
) -> None:
    with Store(path=tmp_path / "a.db") as store, pytest.raises(kind) as err:
        run_sweep(
            parse_spec(make_spec(**change)),
            store=store,
            out_dir=tmp_path / "out",
            executor=AnalyticExecutor(1),
            install_signals=False,
        )
    assert str(err.value).startswith(f"{field}: "), str(err.value)


def test_engine_version_is_checked_when_the_spec_is_read(tmp_path: Path) -> None:
    path = write_spec(tmp_path, make_spec(**{"target.engine_version": "abc"}))
    with pytest.raises(ConfigError, match=r"target\.engine_version: not a version number"):
        load_spec(path)


@pytest.mark.parametrize(
    ("args", "code", "kind"),
    [
        (["sweep", "SPEC", "--json"], 2, "UnknownNameError"),
        (["sweep", "SPEC", "--json", "--no-such-flag"], 2, "NoSuchOption"),
        (["status", "nope", "--json"], 6, "StorageError"),
    ],
)
def test_json_errors_are_one_json_object_on_stdout(
    tmp_path: Path, args: list[str], code: int, kind: str
) -> None:
    spec = write_spec(tmp_path, make_spec(**{"target.gpu": "h999"}))
    argv = [str(spec) if a == "SPEC" else a for a in args] + ["--db", str(tmp_path / "x.db")]
    res = _cli(*argv, cwd=tmp_path)
    assert res.returncode == code, res.stderr
    error = json.loads(res.stdout)["error"]  # the whole stdout is one JSON document
    assert error["type"] == kind and error["exit_code"] == code and error["message"]
    assert "Traceback" not in res.stderr and res.stderr.strip()


def _a_trial_runs(db: Path) -> bool:
    try:
        with Store(path=db) as store:
            rows = store.list_sweeps()
            return bool(rows) and any(
                t.status == "running" for t in store.get_trials(rows[0].id or 0)
            )
    except StorageError:  # the sweep is creating its tables right now
        return False


def test_second_sigint_is_the_stop_reason_and_is_answered_quickly(tmp_path: Path) -> None:
    """A real sweep on the simulated engine: SIGINT (finish running trials), SIGINT again (stop
    them now); the process exits within seconds and reports the second, stronger reason."""
    spec = write_spec(
        tmp_path,
        make_spec(
            **{
                "budget.max_trials": 50,
                "execution.workers": 2,
                "simulate.time_scale": 1,  # trials long enough to be running at the signal
                "workload.scenarios": [
                    {
                        "kind": "throughput",
                        "name": "tp",
                        "prompt_len": 128,
                        "output_len": 256,
                        "concurrency": 4,
                        "num_requests": 16,
                        "warmup_requests": 0,
                    }
                ],
                "objective.metric": "tp.output_tok_s",
            }
        ),
    )
    db = tmp_path / "s.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from autotune.cli import main; main()", "sweep", str(spec)]
        + ["--db", str(db), "--out", str(tmp_path / "out"), "--json", "--progress", "none"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until a trial is running
            if db.exists() and _a_trial_runs(db):
                break
            time.sleep(0.2)
            if proc.poll() is not None:
                break
        else:
            pytest.fail("no trial started within 60 s")
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended before a signal: {proc.communicate()[1][-2000:]}")
        proc.send_signal(signal.SIGINT)
        time.sleep(1.5)  # the first signal has ended the search loop: trials are draining
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        answered_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert answered_s < 10, answered_s
    assert proc.returncode == 128 + signal.SIGINT, err
    outcome = json.loads(out)
    assert outcome["status"] == "stopped"
    assert "stopped and marked interrupted" in outcome["stop_reason"], outcome["stop_reason"]


def test_status_reads_without_creating_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "x.db"
    res = _cli("status", "--db", str(missing), "--json", cwd=tmp_path)
    assert res.returncode == 6 and "no database at" in json.loads(res.stdout)["error"]["message"]
    assert not (tmp_path / "no").exists()


def test_deeply_nested_yaml_is_an_error_not_a_stack_overflow(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("name: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nested deeper than"):
        load_spec(path)


def test_a_target_nothing_can_run_stops_at_once_with_the_reason(tmp_path: Path) -> None:
    # NVFP4 on Hopper: every configuration breaks the same rule; the search used to ask 200
    # times and call the space "converged"
    spec = make_spec(
        **{
            "name": "nvfp4-hopper",
            "target.model": "qwen3.8-27b-nvfp4",
            "target.gpu": "h200-141g",
            "budget.max_trials": 40,
        }
    )
    res = _cli(
        "sweep", str(write_spec(tmp_path, spec)), "--db", str(tmp_path / "s.db"),
        "--out", str(tmp_path / "out"), "--json", "--no-report", cwd=tmp_path,
    )  # fmt: skip
    out = json.loads(res.stdout)
    assert res.returncode == 7, res.stderr[-2000:]
    assert out["stop_reason"].startswith("nothing this target can run")
    assert "nvfp4-blackwell" in out["stop_reason"] and out["launched"] == 0
    with Store(path=tmp_path / "s.db") as store:
        sweep = store.get_sweep("nvfp4-hopper")
        assert len(store.get_trials(sweep.id or 0)) <= 25
