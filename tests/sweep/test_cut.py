"""search.cut_below: which objectives a slow run can be cut on, and a sweep that cuts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.bench.scenarios import scenario_from_dict
from autotune.store.models import TrialStatus
from autotune.sweep.analytic import AnalyticExecutor
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.setup import cut_scenario
from autotune.sweep.spec import MetricRef, parse_spec
from tests.sweep.conftest import make_spec

TP = {"kind": "throughput", "name": "tp", "prompt_len": 128, "output_len": 16, "concurrency": 4}


@pytest.mark.parametrize(
    ("scenario", "metric", "direction", "cut_below", "expected"),
    [
        (TP, "tp.output_tok_s", "maximize", 0.5, "tp"),
        (TP, "tp.requests_per_s", "maximize", 0.5, "tp"),
        (TP, "tp.output_tok_s", "maximize", 0.0, None),  # turned off
        (TP, "tp.ttft_p95_s", "minimize", 0.5, None),  # not work over wall time
        (TP, "tp.decode_tok_s", "maximize", 0.5, None),  # per stream, not per wall second
        ({**TP, "duration_s": 60}, "tp.output_tok_s", "maximize", 0.5, None),  # fixed time
        ({**TP, "ignore_eos": False}, "tp.output_tok_s", "maximize", 0.5, None),  # may stop early
        ({**TP, "ignore_eos": False}, "tp.input_tok_s", "maximize", 0.5, "tp"),  # prompts fixed
        (
            {"kind": "agent", "name": "ag", "sessions": 2, "turns": 2},
            "ag.output_tok_s",
            "maximize",
            0.5,
            "ag",
        ),
        (
            {"kind": "decode", "name": "d", "prompt_len": 64, "output_len": 8},
            "d.output_tok_s",
            "maximize",
            0.5,
            None,
        ),
    ],
)
def test_which_objectives_can_be_cut(
    scenario: dict[str, Any], metric: str, direction: str, cut_below: float, expected: str | None
) -> None:
    data = make_spec(**{"search.cut_below": cut_below, "objective.metric": metric})
    data["workload"]["scenarios"] = [scenario]
    spec = parse_spec(data)
    scs = [scenario_from_dict(scenario)]
    assert cut_scenario(spec, scs, [MetricRef(metric=metric, direction=direction)]) == expected  # type: ignore[arg-type]


def _sweep(store: Any, tmp_path: Path, cut_below: float) -> list[Any]:
    data = make_spec(
        **{
            "search.cut_below": cut_below,
            "budget.max_trials": 10,
            "space.overrides.max_running_requests": {"choices": [1, 8]},
            "workload.scenarios": [
                {**TP, "concurrency": 8, "num_requests": 16, "warmup_requests": 0}
            ],
        }
    )
    run_sweep(
        parse_spec(data),
        store=store,
        out_dir=tmp_path / f"out{cut_below}",
        executor=AnalyticExecutor(1),
        install_signals=False,
    )
    return store.get_trials(store.get_sweep("t").id)


def test_an_analytic_sweep_cuts_runs_far_behind_the_best(store: Any, tmp_path: Path) -> None:
    """One request at a time against eight concurrent: such runs take several times the best
    run's time, so once a fast run is in, they are cut (pruned, with the reason); with
    cut_below 0 every one of them runs to the end."""
    rows = _sweep(store, tmp_path, 0.5)
    cut = [r for r in rows if r.status == TrialStatus.PRUNED]
    assert cut, [(r.number, r.status, r.config.get("max_running_requests")) for r in rows]
    for r in cut:
        assert r.config["max_running_requests"] == 1
        assert "search.cut_below" in (r.launch or {}).get("reason", "")
    fast = [r for r in rows if r.config.get("max_running_requests") == 8]
    assert all(r.status == TrialStatus.COMPLETE for r in fast)
    # the notes count them and the report says so
    assert (store.get_sweep("t").notes or {})["cut_runs"] == len(cut)
    from autotune.report.writer import write_report

    text = Path(write_report(store, "t", tmp_path / "report", plots=False).report_md).read_text()
    assert f"{len(cut)} search run" in text and "stopped early" in text


def test_cut_below_0_runs_every_benchmark_to_the_end(store: Any, tmp_path: Path) -> None:
    rows = _sweep(store, tmp_path, 0.0)
    assert rows and all(r.status != TrialStatus.PRUNED for r in rows)
    assert "cut_runs" not in (store.get_sweep("t").notes or {})


def test_a_resumed_sweep_cuts_from_the_fastest_stored_run(store: Any, tmp_path: Path) -> None:
    """The cut survives a resume: the fastest feasible run's stored wall seconds come back."""
    from types import SimpleNamespace

    from autotune.sweep.resume import restore_cut

    rows = _sweep(store, tmp_path, 0.5)
    walls: list[float] = []
    state = SimpleNamespace(
        setup=SimpleNamespace(cut_scenario="tp"), store=store, update_wall=walls.append
    )
    for row in rows:
        restore_cut(state, row)  # type: ignore[arg-type]
    complete = [r for r in rows if r.status == TrialStatus.COMPLETE]
    assert len(walls) == len(complete) > 0
    stored = [
        m.metrics["result"]["wall_s"] for r in complete for m in store.get_measurements(r.id)
    ]
    assert min(walls) == min(stored) > 0
