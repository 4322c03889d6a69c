"""autotune.sweep.installed: a real sweep stops before its first launch when the engine its
launcher starts follows another release than the spec (a version read from the interpreter's
metadata, the engine never imported)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.errors import ConfigError
from autotune.sweep.installed import check_installed_engine, launcher_python
from tests.installs import fake_engine_site


def _site(root: Path, package: str, version: str) -> Path:
    return fake_engine_site(root / f"site-{version}", package, package, version)


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_launcher_python_reads_interpreters_and_console_scripts(tmp_path: Path) -> None:
    py = _script(tmp_path / "python3.12", "#!/bin/sh\n")
    assert launcher_python(str(py)) == str(py)
    serve = _script(tmp_path / "vllm", f"#!{py}\nimport sys\n")
    assert launcher_python(str(serve)) == str(py)
    # pip's header where the interpreter path is too long for a #! line
    long = _script(tmp_path / "sglang", f"#!/bin/sh\n'''exec' \"{py}\" \"$0\" \"$@\"\n' '''\n")
    assert launcher_python(str(long)) == str(py)
    # uv's header quotes a path with a space in single quotes; `env -S` takes options
    (tmp_path / "my env").mkdir()
    spaced = _script(tmp_path / "my env" / "python3", "#!/bin/sh\n")
    uv = _script(tmp_path / "uvscript", f"#!/bin/sh\n'''exec' '{spaced}' \"$0\" \"$@\"\n' '''\n")
    assert launcher_python(str(uv)) == str(spaced)
    env_s = _script(tmp_path / "envs", "#!/usr/bin/env -S python3 -u\n")
    assert launcher_python(str(env_s)) == shutil.which("python3")
    # a container or a wrapper: not checked
    assert (
        launcher_python(str(_script(tmp_path / "docker", "#!/bin/sh\nexec docker run\n"))) is None
    )
    assert launcher_python("no-such-launcher-here") is None


@pytest.mark.parametrize(
    ("installed", "spec", "error", "fix"),
    [
        ("0.33.0", "0.33.0", None, None),
        ("0.34.1.dev5+g0123abc", "0.34.0", None, None),  # a nightly of the spec's release
        ("0.35.0", "0.34.0", None, None),  # a newer line, followed as the newest on purpose
        ("0.33.0", "0.34.0", "follows 0.33.0; the spec follows 0.34.0", '"0.33.0"'),
        ("0.35.0rc1", "0.33.0", "is newer than any release autotune catalogues", '"0.34.0"'),
    ],
)
def test_the_installed_release_must_be_the_one_the_spec_follows(
    tmp_path: Path, installed: str, spec: str, error: str | None, fix: str | None
) -> None:
    env = {"PYTHONPATH": str(_site(tmp_path, "vllm", installed))}  # engine.env reaches the probe
    launcher = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    if error is None:
        assert check_installed_engine("vllm", spec, launcher, env) == installed
        return
    with pytest.raises(ConfigError) as err:
        check_installed_engine("vllm", spec, launcher, env)
    text = str(err.value)
    assert text.startswith("target.engine_version: the engine this sweep launches is vLLM ")
    assert error in text and f"set target.engine_version: {fix}" in text


def test_a_spec_version_the_catalogue_refuses_names_the_spec_field(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(_site(tmp_path, "vllm", "0.34.0"))}
    with pytest.raises(ConfigError) as err:
        check_installed_engine("vllm", "0.36.0", [sys.executable], env)
    assert str(err.value).startswith("target.engine_version: unsupported vLLM version '0.36.0'")


def test_nothing_to_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No engine for the interpreter (the first launch says so), a launcher that is no Python,
    llama.cpp: nothing is refused."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert check_installed_engine("sglang", "0.5.23", [sys.executable, "-m", "x"]) is None
    assert check_installed_engine("sglang", "0.5.23", ["docker", "run"]) is None
    assert check_installed_engine("llamacpp", "0.3.36", None) is None


def test_a_sweep_with_another_installed_release_stops_before_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.store import Store
    from autotune.sweep.orchestrator import run_sweep
    from autotune.sweep.spec import spec_from_yaml

    monkeypatch.setenv("PYTHONPATH", str(_site(tmp_path, "sglang", "0.5.17")))
    spec = spec_from_yaml(
        f"""
name: installed-check
target: {{engine: sglang, engine_version: "0.5.23", model: qwen3.8-27b-fp8, gpu: h200-141g}}
engine: {{launcher: ["{sys.executable}", "-m", "sglang.launch_server"]}}
workload:
  scenarios: [{{kind: decode, name: d, prompt_len: 64, output_len: 8, num_requests: 1}}]
objective: {{metric: d.output_tok_s}}
""",
        source="spec.yaml",
    )
    store = Store(path=tmp_path / "autotune.db")
    with pytest.raises(ConfigError, match="SGLang 0.5.17 .* follows 0.5.17; the spec follows"):
        run_sweep(spec, store=store, install_signals=False)
    assert store.list_sweeps() == []
    # Ray trials start on the cluster's nodes, whose workers check their own installs
    # (test_a_worker_with_another_release_launches_nothing); simulated ones: not checked
    from autotune.sweep.orchestrator import check_target

    text = spec.model_dump(mode="json")
    for section, value in (("execution", {"executor": "ray"}), ("simulate", {"seed": 0})):
        check_target(type(spec).model_validate({**text, section: value}))
    check_target(spec, executor_kind="ray")  # `autotune sweep --executor ray`


def _real_trial(tmp_path: Path, site: Path, **kw: Any) -> Any:
    from autotune.sweep.trial import TrialSpec
    from tests.sweep.conftest import fake_launcher

    return TrialSpec(
        **{
            "sweep": "t",
            "number": 0,
            "config": {},
            "engine": "sglang",
            "engine_version": "0.5.23",
            "model": str(tmp_path / "fake-model"),
            "gpu": "cpu",
            "scenarios": [
                {"kind": "decode", "prompt_len": 16, "output_len": 4, "num_requests": 1}
            ],
            "startup_timeout_s": 5,
            "stop_grace_s": 2,
            "log_dir": str(tmp_path / "logs"),
            "launcher": fake_launcher(),
            "env": {"PYTHONPATH": str(site)},  # the worker's install, through engine.env
            **kw,
        }
    )


def test_a_worker_with_another_release_launches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every worker checks its own install before it launches (a Ray trial runs on whichever
    node Ray places it): another release fails the trial as ENGINE_MISMATCH, naming the worker,
    with no process started. An install that passed is asked once per worker process and
    search path; one that failed is asked again (a fixed install is seen on --resume)."""
    from autotune.engines.base import FailureClass
    from autotune.store.models import TrialStatus
    from autotune.sweep import installed
    from autotune.sweep.trial import run_trial, started_nothing

    calls: list[str] = []
    probe = installed.installed_version
    monkeypatch.setattr(installed, "_PASSED", set())  # this process's earlier answers

    def counted(engine: str, python: str, env: Any) -> str | None:
        calls.append(engine)
        return probe(engine, python, env)

    monkeypatch.setattr(installed, "installed_version", counted)
    old = _real_trial(tmp_path, _site(tmp_path, "sglang", "0.5.22"))
    for number in (1, 2):
        res = run_trial(old.model_copy(update={"number": number}), worker="node-b/pid7")
        assert res.status == TrialStatus.FAILED and res.failure is not None
        assert res.failure.cls == FailureClass.ENGINE_MISMATCH
        assert res.failure.reason.startswith(
            "on node-b/pid7: target.engine_version: the engine this sweep launches is "
            "SGLang 0.5.22"
        )
        assert "follows 0.5.22; the spec follows 0.5.23" in res.failure.reason
        assert started_nothing(res) and not (tmp_path / "logs").exists()
    assert calls == ["sglang", "sglang"]  # a mismatch is asked again
    # the spec's own release on the worker: the trial launches; asked once
    good = _real_trial(tmp_path, _site(tmp_path, "sglang", "0.5.23"), startup_timeout_s=60)
    for number in (3, 4):
        res = run_trial(good.model_copy(update={"number": number}), worker="node-a/pid8")
        assert res.failure is None or res.failure.cls != FailureClass.ENGINE_MISMATCH
        assert res.pid is not None and (tmp_path / "logs" / "server.log").exists()
    assert calls == ["sglang", "sglang", "sglang"]


def _mismatched(spec: Any, **_kw: Any) -> Any:
    """A worker whose install follows another release (module level: executors call it)."""
    from autotune.engines.base import Failure, FailureClass
    from autotune.store.models import TrialStatus
    from autotune.sweep.trial import TrialResult

    why = "on node-b/pid7: target.engine_version: the engine this sweep launches is SGLang 0.5.22"
    return TrialResult(
        number=spec.number,
        status=TrialStatus.FAILED,
        worker="node-b/pid7",
        failure=Failure(cls=FailureClass.ENGINE_MISMATCH, reason=why),
    )


def test_a_worker_mismatch_stops_the_sweep_at_once_and_resume_runs_it_again(
    store: Any, tmp_path: Path
) -> None:
    """The first ENGINE_MISMATCH stops the sweep (every trial on that worker would get another
    release's argv); nothing counts as launched, and --resume runs the configuration again."""
    from autotune.engines.base import FailureClass
    from autotune.sweep.executors import InProcessExecutor
    from autotune.sweep.orchestrator import run_sweep
    from autotune.sweep.spec import parse_spec
    from tests.sweep.conftest import make_spec

    spec = parse_spec(make_spec(**{"budget.max_trials": 4, "search.known_good": False}))
    out_dir = tmp_path / "out"
    out = run_sweep(
        spec,
        store=store,
        out_dir=out_dir,
        executor=InProcessExecutor(1, trial_fn=_mismatched),
        install_signals=False,
    )
    assert out.launched == 0 and out.exit_code == 4
    assert out.failures_by_class == {FailureClass.ENGINE_MISMATCH.value: 1}
    assert out.stop_reason.startswith(
        "stopped early: a trial failed with engine_mismatch, a fault of the environment"
    )
    assert "SGLang 0.5.22" in out.stop_reason
    first = store.get_trials(out.sweep_id)[0]
    assert (first.launch or {}).get("source") == "baseline"
    again = run_sweep(spec, store=store, out_dir=out_dir, resume=True, install_signals=False)
    assert again.counts.get("complete", 0) >= 1
    rows = store.get_trials(again.sweep_id)
    rerun = [r for r in rows if (r.launch or {}).get("source") == f"rerun:#{first.number}"]
    assert rerun and rerun[-1].config == first.config and rerun[-1].status == "complete"
    # the defaults' figures are the re-run's: the report measures changes against them
    assert again.baseline is not None and again.baseline["status"] == "complete"
    assert again.baseline["number"] == rerun[-1].number
    from autotune.report.collect.assemble import collect

    data = collect(store, "t")
    assert data.baseline is not None and data.baseline.number == rerun[-1].number


def test_the_served_release_is_judged_like_an_installed_one() -> None:
    from autotune.sweep.installed import served_mismatch

    assert served_mismatch("vllm", "0.34.0", "0.34.0", "GET /version") is None
    assert served_mismatch("vllm", "0.34.0", "0.34.1.dev5+g0123abc", "its startup log") is None
    why = served_mismatch("vllm", "0.34.0", "0.11.0", "GET /version")
    assert why is not None and why.startswith(
        "target.engine_version: the engine serving this trial is vLLM 0.11.0 (GET /version), "
        "which follows 0.11.0; the spec follows 0.34.0"
    )
    assert 'set target.engine_version: "0.11.0" (the release engine.launcher runs)' in why
    assert why.endswith("or point engine.launcher at vLLM 0.34.0")


def test_a_container_serving_another_release_is_stopped_before_it_is_measured(
    tmp_path: Path,
) -> None:
    """A launcher nothing can read before it runs (a container image, a wrapper): once ready,
    the engine's own answer (SGLang's GET /server_info) is checked; another release fails the
    trial as ENGINE_MISMATCH with nothing measured, and the engine is stopped."""
    from autotune.engines.base import FailureClass
    from autotune.store.models import TrialStatus
    from autotune.sweep.trial import run_trial
    from tests.sweep.conftest import procs_matching

    empty = tmp_path / "empty-site"  # this interpreter has no SGLang: nothing to read first
    empty.mkdir()
    spec = _real_trial(tmp_path, empty, startup_timeout_s=60)
    spec = spec.model_copy(update={"env": {**spec.env, "FAKE_ENGINE_VERSION": "0.5.21"}})
    res = run_trial(spec, worker="node-c/pid9")
    assert res.status == TrialStatus.FAILED and res.failure is not None
    assert res.failure.cls == FailureClass.ENGINE_MISMATCH
    assert res.failure.reason.startswith(
        "on node-c/pid9: target.engine_version: the engine serving this trial is SGLang 0.5.21 "
        "(GET /server_info), which follows 0.5.21; the spec follows 0.5.23"
    )
    assert res.pid is not None and not res.measurements
    assert procs_matching(str(tmp_path / "fake-model")) == []
    # the spec's own release: measured
    spec = spec.model_copy(update={"env": {**spec.env, "FAKE_ENGINE_VERSION": "0.5.23"}})
    res = run_trial(spec, worker="node-c/pid9")
    assert res.status == TrialStatus.COMPLETE and res.measurements, res.failure


def test_the_logged_release_is_taken_before_asking_the_engine() -> None:
    """vLLM states its release in its startup log: no request is made (the engine's port is
    closed here, so one would answer nothing)."""
    from types import SimpleNamespace

    from autotune.engines.base import LaunchReport
    from autotune.engines.vllm.adapter import VLLMAdapter
    from autotune.sweep.trial_serving import served_version

    res = SimpleNamespace(launch=LaunchReport(engine_version="0.11.0"))
    eng = SimpleNamespace(argv=["vllm", "serve"], port=1)
    spec = SimpleNamespace(host="127.0.0.1", engine_env=dict)
    assert served_version(spec, VLLMAdapter(), eng, res) == ("0.11.0", "its startup log")  # type: ignore[arg-type]
    res.launch = LaunchReport()
    assert served_version(spec, VLLMAdapter(), eng, res) is None  # type: ignore[arg-type]


def _mismatched_repeats(spec: Any, **kw: Any) -> Any:
    """The search runs serve; a finalist re-run lands on a worker with another release."""
    from autotune.sweep.trial import run_trial

    return _mismatched(spec) if spec.repeat else run_trial(spec, **kw)


def test_a_finalist_rerun_on_another_release_stops_the_sweep(store: Any, tmp_path: Path) -> None:
    from autotune.engines.base import FailureClass
    from autotune.sweep.executors import InProcessExecutor
    from autotune.sweep.orchestrator import run_sweep
    from autotune.sweep.spec import parse_spec
    from tests.sweep.conftest import make_spec

    spec = parse_spec(
        make_spec(
            **{
                "budget.max_trials": 3,
                "search.known_good": False,
                "finalists.top_k": 2,
                "finalists.repeats": 2,
            }
        )
    )
    out = run_sweep(
        spec,
        store=store,
        out_dir=tmp_path / "out",
        executor=InProcessExecutor(1, trial_fn=_mismatched_repeats),
        install_signals=False,
    )
    assert out.stop_reason.startswith("stopped early: a trial failed with engine_mismatch")
    failures = store.get_failures(out.sweep_id)
    assert [f.failure_class for f in failures] == [FailureClass.ENGINE_MISMATCH.value]
    assert failures[0].reason.startswith("finalist repeat 1: on node-b/pid7")
