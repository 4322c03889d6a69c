"""The sweep core's small parts on their own: how a finished trial is judged (recording), the
budget and stop requests (control), and the winner of a closed sweep (outcome). The whole loop
is exercised by test_orchestrator, test_faults and test_hardening."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from autotune.engines.base import Failure, FailureClass
from autotune.store.models import TrialStatus
from autotune.sweep.control import Budget, StopController, check_deadline
from autotune.sweep.outcome import best_feasible
from autotune.sweep.recording import judge, verdict_of
from autotune.sweep.spec import MetricRef
from autotune.sweep.spec_models import QualitySpec
from autotune.sweep.state import Done
from autotune.sweep.trial import ScenarioMeasurement, TrialResult

REFS = [MetricRef(metric="streams.output_tok_s", direction="maximize")]


def _measurement(scenario: str, **figures: float | None) -> ScenarioMeasurement:
    main = next(iter(figures.values()), None)
    return ScenarioMeasurement(
        scenario=scenario, kind="throughput", value=main, figures=figures, result={}
    )


def _result(status: TrialStatus, *measurements: ScenarioMeasurement, **kw: Any) -> TrialResult:
    return TrialResult(number=3, status=status, measurements=list(measurements), **kw)


def _item(source: str = "sampler") -> Any:
    return SimpleNamespace(
        spec=SimpleNamespace(number=3, config={"a": 1}),
        assessment=None,
        source=source,
    )


def _setup(stop_after_env_failures: int = 3) -> Any:
    return SimpleNamespace(
        refs=REFS,
        probe="probe",
        cut_scenario=None,
        gpu=None,
        planner=SimpleNamespace(need_tokens=0),
        guarded=dict,
        spec=SimpleNamespace(
            objective=SimpleNamespace(vram_headroom_gib=0.0, constraints=[]),
            target=SimpleNamespace(engine="sglang"),
            quality=QualitySpec(),
            budget=SimpleNamespace(stop_after_env_failures=stop_after_env_failures),
        ),
    )


def test_a_complete_trial_gives_its_objective_values() -> None:
    res = _result(TrialStatus.COMPLETE, _measurement("streams", output_tok_s=812.5))
    status, failure, values = judge(REFS, res)
    assert (status, failure, values) == (TrialStatus.COMPLETE, None, [812.5])
    v = verdict_of(_setup(), _item(), res, (status, failure, values))
    assert (v.stored, v.told, v.values) == (TrialStatus.COMPLETE, "complete", [812.5])
    assert v.constraints == {"rules": 0.0, "planner": 0.0}
    assert v.done == Done(3, [812.5], {"rules": 0.0, "planner": 0.0}, "complete")
    assert v.text == "streams.output_tok_s 812.50" and not v.requeue


def test_a_complete_trial_without_its_objective_figure_failed() -> None:
    res = _result(TrialStatus.COMPLETE, _measurement("streams", ttft_p95_s=1.0))
    status, failure, values = judge(REFS, res)
    assert status == TrialStatus.FAILED and values == []
    assert failure is not None and failure.cls == FailureClass.BENCHMARK_ERROR
    assert "streams.output_tok_s" in failure.reason
    v = verdict_of(_setup(), _item(), res, (status, failure, values))
    assert (v.told, v.constraints) == ("pruned", {"launch_failed": 1.0})
    assert v.done == Done(3, None, {"launch_failed": 1.0}, "failed")


def test_a_pruned_trial_reports_its_probe_figure() -> None:
    res = _result(TrialStatus.PRUNED, _measurement("probe", tok_s=40.0), reason="below 0.5 x")
    v = verdict_of(_setup(), _item(), res, judge(REFS, res))
    assert (v.told, v.probe, v.text) == ("pruned", 40.0, "below 0.5 x")
    assert v.done == Done(3, None, {}, "pruned") and v.constraints is None


def test_a_failure_that_is_not_the_configurations_runs_it_once_more() -> None:
    lost = Failure(cls=FailureClass.WORKER_LOST, reason="actor died")
    res = _result(TrialStatus.FAILED, failure=lost)
    v = verdict_of(_setup(), _item(), res, judge(REFS, res))
    assert (v.stored, v.told, v.requeue, v.done) == (TrialStatus.FAILED, "fail", True, None)
    assert v.text == "worker_lost: actor died (re-queued)"
    again = verdict_of(_setup(), _item("rerun:#3"), res, judge(REFS, res))
    assert not again.requeue  # a rerun that fails alike is not queued a third time


def test_another_releases_engine_queues_the_configuration_however_often() -> None:
    """The sweep stops at the first engine_mismatch, so a rerun that meets another bad node
    (or a --resume before every node is fixed) keeps its configuration queued; with
    stop_after_env_failures 0 (never stop) a rerun is not queued a third time."""
    bad = Failure(cls=FailureClass.ENGINE_MISMATCH, reason="on node-b: SGLang 0.5.22")
    res = _result(TrialStatus.FAILED, failure=bad)
    for setup, source, requeue in [
        (_setup(), "sampler", True),
        (_setup(), "rerun:#3", True),
        (_setup(0), "sampler", True),
        (_setup(0), "rerun:#3", False),
    ]:
        v = verdict_of(setup, _item(source), res, judge(REFS, res))
        assert (v.told, v.requeue, v.done) == ("fail", requeue, None), source


def test_an_interrupted_trial_is_stored_interrupted_and_queued_again() -> None:
    res = _result(TrialStatus.INTERRUPTED, reason="SIGTERM")
    v = verdict_of(_setup(), _item(), res, judge(REFS, res))
    assert (v.stored, v.told, v.requeue, v.text) == (
        TrialStatus.INTERRUPTED,
        "fail",
        True,
        "SIGTERM",
    )


def test_the_deadline_is_a_hard_stop() -> None:
    stop = StopController()
    check_deadline(Budget(wall_clock_s=60.0), stop)
    assert not stop.graceful.is_set()
    check_deadline(Budget(wall_clock_s=1.0, t0=time.monotonic() - 2.0), stop)
    assert stop.hard.is_set() and stop.graceful.is_set()
    assert stop.reason == "budget: wall clock or deadline reached"
    past = datetime.now().astimezone() - timedelta(seconds=5)
    left = Budget(deadline=past, wall_clock_s=3600.0).seconds_left()
    assert left is not None and left < 0  # the earlier of the two bounds


def test_a_hard_request_takes_over_the_reason() -> None:
    stop = StopController()
    stop.request("first")
    stop.request("second")
    assert stop.reason == "first" and not stop.hard.is_set()
    stop.request("now", hard=True)
    assert stop.reason == "now" and stop.hard.is_set()


def test_the_winner_breaks_no_constraint() -> None:
    def row(number: int, value: float, broken: float = 0.0, status: str = "complete") -> Any:
        return SimpleNamespace(
            number=number,
            status=status,
            value=value,
            launch={"constraints": {"vram_headroom": broken}},
        )

    rows = [
        row(1, 900.0, broken=0.5),
        row(2, 700.0),
        row(3, 700.0),
        row(4, 950.0, status="pruned"),
    ]
    assert best_feasible(rows, maximize=True).number == 2  # ties: the earlier trial
    assert best_feasible(rows, maximize=False).number == 2
    assert best_feasible(rows[:1], maximize=True) is None
