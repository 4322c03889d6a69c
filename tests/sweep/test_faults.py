"""Fault tests on CPU: engines that exit at start, never become ready, crash mid-benchmark or
stream garbage, and ports in use. Each is recorded with the right class and its log tail,
nothing completed is lost, and no process is left behind."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from autotune.engines.base import FailureClass
from autotune.process import PidRegistry, free_port
from autotune.store.models import TrialStatus
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.spec import parse_spec
from autotune.sweep.trial import TrialSpec, run_trial
from tests.sweep.conftest import fake_launcher, live_children, make_spec, procs_matching

# chunked_prefill_size -> what the fake engine does (tests/sweep/fake_engine.py)
EXPECTED = {
    512: FailureClass.NEVER_READY,
    1024: FailureClass.KV_CACHE_OOM,
    2048: FailureClass.CRASH_AFTER_READY,
    4096: FailureClass.BENCHMARK_ERROR,
}


def fake_spec(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    spec = make_spec(
        **{
            # "simulated": no GPU is needed; the fake engine replaces the simulator's launcher
            "simulate": {"time_scale": 1},
            "target.model_path": str(tmp_path / "fake-model"),
            "engine.launcher": fake_launcher(),
            "engine.startup_timeout_s": 3,
            **changes,
        }
    )
    spec["workload"]["scenarios"][1]["num_requests"] = 6
    return spec


def test_every_fault_is_classified_and_the_sweep_goes_on(store: Any, tmp_path: Path) -> None:
    spec = parse_spec(
        fake_spec(
            tmp_path,
            **{
                "search.sampler": "grid",
                "search.baseline": False,
                "search.known_good": False,
                "space.overrides.chunked_prefill_size": {"choices": [512, 1024, 2048, 4096, 8192]},
                "space.overrides.mem_fraction_static": 0.9,
                "space.overrides.max_running_requests": None,
                "space.overrides.max_mamba_cache_size": None,
                "space.overrides.kv_cache_dtype": "fp8_e4m3",
                "budget.max_trials": 10,
                # about faults, not speed: a benchmark-error trial's probe can set the cut-off,
                # and on a loaded 2-core machine the healthy trial's probe fell below it once
                "workload.prune_below": 0,
            },
        )
    )
    out = run_sweep(spec, store=store, out_dir=tmp_path / "out", install_signals=False)
    assert out.stop_reason.startswith("grid") and out.launched == 5
    trials = {t.config["chunked_prefill_size"]: t for t in store.get_trials(out.sweep_id)}
    failures = {f.trial_id: f for f in store.get_failures(out.sweep_id)}
    for cps, cls in EXPECTED.items():
        t = trials[cps]
        assert t.status == TrialStatus.FAILED.value, (cps, t.status)
        f = failures[t.id]
        assert f.failure_class == cls.value, (cps, f.failure_class, f.reason)
        assert f.reason
        if cls != FailureClass.BENCHMARK_ERROR:
            assert f.log_tail and "fake engine mode" in f.log_tail
    ok = trials[8192]
    assert ok.status == TrialStatus.COMPLETE.value and ok.value and ok.value > 0
    assert {m.scenario for m in store.get_measurements(ok.id)} == {"probe", "tp"}
    # no engine survives, none is left in the PID registry
    assert procs_matching(str(tmp_path / "fake-model")) == []
    assert live_children() == []
    reg = PidRegistry(Path(str(store.storage_url).removeprefix("sqlite:///") + ".pids.jsonl"))
    assert reg.entries() == []


def _trial(tmp_path: Path, **kw: Any) -> TrialSpec:
    base: dict[str, Any] = dict(
        sweep="t",
        number=1,
        config={"chunked_prefill_size": 8192},
        engine_version="0.5.17",
        model=str(tmp_path / "fake-model"),
        gpu="rtx-4080-super-32g",
        simulate=True,
        scenarios=[
            {
                "kind": "decode",
                "prompt_len": 16,
                "output_len": 4,
                "num_requests": 1,
                "warmup_requests": 0,
            }
        ],
        startup_timeout_s=5,
        stop_grace_s=2,
        log_dir=str(tmp_path / "logs"),
        launcher=fake_launcher(),
    )
    base.update(kw)
    return TrialSpec(**base)


def test_fixed_port_in_use_fails_before_launch(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = run_trial(_trial(tmp_path, port=port))
    assert res.status == TrialStatus.FAILED and res.failure is not None
    assert res.failure.cls == FailureClass.PORT_IN_USE and str(port) in res.failure.reason
    assert res.pid is None  # nothing was started


def test_port_taken_after_the_check_is_classified_by_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process binds the port between run_trial's check and the spawn: EngineProcess
    raises PortInUseError, which the trial maps to PORT_IN_USE by its type."""
    from autotune.process import manager

    monkeypatch.setattr(manager, "port_is_free", lambda port, host="127.0.0.1": False)
    res = run_trial(_trial(tmp_path, port=free_port()))
    assert res.status == TrialStatus.FAILED and res.failure is not None
    assert res.failure.cls == FailureClass.PORT_IN_USE and "already in use" in res.failure.reason
    assert res.pid is None  # nothing was started


def test_engine_reporting_port_in_use_is_retried_then_classified(tmp_path: Path) -> None:
    res = run_trial(_trial(tmp_path, env={"FAKE_ENGINE_MODE": "port_taken"}))
    assert res.failure is not None and res.failure.cls == FailureClass.PORT_IN_USE
    logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert logs == ["server.attempt2.log", "server.attempt3.log", "server.log"]
    assert procs_matching(str(tmp_path / "fake-model")) == []


def _env_fault_sweep(store: Any, tmp_path: Path, **changes: Any) -> Any:
    spec = parse_spec(
        fake_spec(
            tmp_path,
            **{"budget.max_trials": 10, "search.known_good": False, "workload.prune_below": 0},
            **changes,
        )
    )
    return run_sweep(spec, store=store, out_dir=tmp_path / "out", install_signals=False)


def test_missing_launcher_keeps_the_os_error_and_stops_early(store: Any, tmp_path: Path) -> None:
    """Issue 19.8 (and 19.6): a launcher that does not exist fails every trial alike: the OS
    error is the reason, nothing counts as launched, the sweep stops after 3 with exit 4."""
    missing = str(tmp_path / "no-such-engine")
    out = _env_fault_sweep(store, tmp_path, **{"engine.launcher": [missing]})
    assert out.launched == 0 and out.exit_code == 4
    assert out.failures_by_class == {FailureClass.SPAWN_FAILED.value: 3}
    assert out.stop_reason.startswith("stopped early: 3 trials in a row failed with spawn_failed")
    for f in store.get_failures(out.sweep_id):
        assert "No such file or directory" in f.reason and missing in f.reason
        assert f.log_tail and "No such file or directory" in f.log_tail
    assert store.get_sweep("t").notes["stop_reason"] == out.stop_reason  # what status shows


def test_taken_fixed_port_counts_nothing_and_stops_early(store: Any, tmp_path: Path) -> None:
    """Issue 19.6: a trial that fails before any process starts is not launched."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = _env_fault_sweep(store, tmp_path, **{"engine.port": port})
    assert out.launched == 0 and out.exit_code == 4
    assert out.failures_by_class == {FailureClass.PORT_IN_USE.value: 3}
    from autotune.sweep.status import sweep_status

    shown = sweep_status(store, "t")
    assert shown["launched"] == 0 and shown["stop_reason"].startswith("stopped early")


def test_engine_api_key_is_sent_by_the_benchmark(store: Any, tmp_path: Path) -> None:
    """Issue 19.8: an engine started with --api-key answers 401 to a client without it."""
    spec = make_spec(
        **{
            "space.overrides.api_key": "sk-test-19",
            "budget.max_trials": 2,
            "search.known_good": False,
        }
    )
    out = run_sweep(parse_spec(spec), store=store, out_dir=tmp_path / "out", install_signals=False)
    assert out.failures_by_class == {}, out.failures_by_class
    assert out.counts.get("complete") == 2 and out.exit_code == 0


def test_api_key_of_engine_argv() -> None:
    from autotune.sweep.trial import api_key_of

    assert api_key_of(["sglang", "--api-key", "k1"], {}) == "k1"
    assert api_key_of(["vllm", "--api-key=k2"], {}) == "k2"
    assert api_key_of(["vllm"], {"VLLM_API_KEY": "k3"}) == "k3"
    assert api_key_of(["vllm"], {}) is None
