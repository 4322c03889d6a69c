"""Noise-aware selection: estimates over runs, the race between the top two configurations,
and the winner by its lower confidence bound (sweep/confidence.py, sweep/confirm.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from autotune.sweep.analytic import AnalyticExecutor
from autotune.sweep.confidence import (
    PRIOR_SIGMA,
    Estimate,
    ambiguous,
    pooled_sigma,
    selection_note,
    winner,
)
from autotune.sweep.orchestrator import StopController, run_sweep
from autotune.sweep.spec import parse_spec
from tests.sweep.conftest import make_spec


def test_pooled_sigma_starts_at_the_prior_and_learns_the_spread() -> None:
    assert pooled_sigma([]) == pytest.approx(PRIOR_SIGMA)
    assert pooled_sigma([Estimate(0, {}, [100.0])]) == pytest.approx(PRIOR_SIGMA)
    # many repeats 10 % apart: the pooled spread moves well above the 4 % prior
    noisy = [Estimate(i, {}, [100.0, 110.0, 90.0]) for i in range(10)]
    assert 0.08 < pooled_sigma(noisy) < 0.11


def test_one_lucky_run_loses_to_a_confirmed_configuration() -> None:
    """A single run 1 % above a configuration measured three times alike does not win: its
    lower bound is a whole sigma below its one value (the steady one's, sigma / sqrt(3))."""
    steady = Estimate(1, {"a": 1}, [100.0, 101.0, 99.0])
    lucky = Estimate(2, {"a": 2}, [101.0])
    sigma = pooled_sigma([steady, lucky])
    assert winner([steady, lucky], sigma, maximize=True) is steady
    assert ambiguous(steady, lucky, sigma, maximize=True)
    # far ahead is not ambiguous, and then it wins on one run
    clear = Estimate(3, {"a": 3}, [150.0])
    assert not ambiguous(steady, clear, sigma, maximize=True)
    assert winner([steady, clear], sigma, maximize=True) is clear


def test_minimised_objectives_and_the_median_from_three_runs() -> None:
    fast = Estimate(1, {}, [1.0, 1.02, 5.0])  # a straggler run; the median ignores it
    slow = Estimate(2, {}, [1.3, 1.31, 1.29])
    sigma = 0.04
    assert fast.centre(maximize=False) == pytest.approx(1.02)
    assert winner([fast, slow], sigma, maximize=False) is fast
    note = selection_note([fast, slow], sigma, maximize=False)
    assert note is not None and note["winner"] == 1 and note["runs"] == 3
    lo, hi = note["ci95"]
    assert lo < note["estimate"] < hi
    assert hi / lo == pytest.approx(math.exp(2 * 1.96 * sigma / math.sqrt(3)), rel=1e-3)


def _noisy(**changes: Any) -> dict[str, Any]:
    return make_spec(
        **{
            "search.confirm_runs": 3,
            "search.confirm_share": 0.3,
            "simulate.run_noise": 0.05,
            "simulate.seed": 3,
            "budget.max_trials": 12,
            **changes,
        }
    )


def _run(store: Any, tmp_path: Path, data: dict[str, Any], **kw: Any) -> Any:
    return run_sweep(
        parse_spec(data),
        store=store,
        out_dir=tmp_path / "out",
        executor=AnalyticExecutor(1),
        install_signals=False,
        **kw,
    )


def test_confirmation_runs_count_in_the_budget_and_decide_the_winner(
    store: Any, tmp_path: Path
) -> None:
    out = _run(store, tmp_path, _noisy())
    notes = store.get_sweep("t").notes or {}
    confirms = int(notes.get("confirm_launched") or 0)
    assert confirms >= 1, notes.get("launches_by_source")
    assert confirms <= 0.3 * 12
    assert out.launched == 12  # search runs and re-runs together
    by_source = notes["launches_by_source"]
    assert sum(by_source.values()) == out.launched and by_source["confirm"] == confirms
    # the re-runs are stored as repeats of their trials
    rows = store.get_trials(out.sweep_id)
    repeats = [m for r in rows for m in store.get_measurements(r.id) if m.repeat > 0]
    scenario = parse_spec(_noisy()).objective.metric.rpartition(".")[0]
    assert scenario in {m.scenario for m in repeats}
    sel = notes["selection"]
    assert out.best is not None and out.best["number"] == sel["winner"]
    assert sel["ci95"][0] <= sel["estimate"] <= sel["ci95"][1]
    best = next(r for r in rows if r.number == sel["winner"])
    assert store.get_sweep("t").best_trial_id == best.id
    # the report names the same winner, states its interval and where the launches went
    from autotune.report.writer import write_report

    paths = write_report(store, "t", tmp_path / "report", plots=False)
    text = Path(paths.report_md).read_text()
    assert f"The winner, #{sel['winner']}, was measured {sel['runs']} time" in text
    assert "95 % interval" in text and f"confirm {confirms}" in text


def test_confirm_runs_1_turns_the_race_off(store: Any, tmp_path: Path) -> None:
    """confirm_runs 1 turns the race off: nothing is re-run, every launch is a search run."""
    out = _run(store, tmp_path, _noisy(**{"search.confirm_runs": 1}))
    notes = store.get_sweep("t").notes or {}
    assert "confirm_launched" not in notes and out.launched == 12
    assert notes["launches_by_source"].get("confirm") is None


def test_resume_keeps_the_confirmation_count(store: Any, tmp_path: Path) -> None:
    stop = StopController()
    seen: list[int] = []

    def after(trial: dict[str, Any]) -> None:
        seen.append(trial["number"])
        if len(seen) == 6:
            stop.request("test: stop")

    _run(store, tmp_path, _noisy(), stop=stop, on_trial=after)
    first = int((store.get_sweep("t").notes or {}).get("confirm_launched") or 0)
    out = _run(store, tmp_path, _noisy(), resume=True)
    notes = store.get_sweep("t").notes or {}
    assert int(notes.get("confirm_launched") or 0) >= first
    assert out.launched == 12  # the budget spans both runs, re-runs included
    from autotune.sweep.status import sweep_status

    assert sweep_status(store, "t")["launched"] == 12


def test_a_winner_must_meet_the_bounds_with_confidence() -> None:
    """A configuration whose TTFT sits just under its limit (margin -1 %) on its one run is
    not the winner while one with room (-20 %) is; with the runs of a steady margin it is."""
    sigma = 0.04
    edge = Estimate(1, {"a": 1}, [700.0], margins=[-0.01])
    roomy = Estimate(2, {"a": 2}, [640.0], margins=[-0.2])
    assert not edge.within_bounds(sigma) and roomy.within_bounds(sigma)
    assert winner([edge, roomy], sigma, maximize=True) is roomy
    steady = Estimate(3, {"a": 3}, [690.0] * 4, margins=[-0.05] * 4)
    assert steady.within_bounds(sigma)
    assert winner([edge, roomy, steady], sigma, maximize=True) is steady
    assert edge.at_risk(sigma) and not roomy.at_risk(sigma)


def test_under_bounds_the_one_further_inside_wins_within_the_noise() -> None:
    """The landscape suite's mixed-TTFT seed 9 in miniature: three lucky runs put #38 6 % above
    its true throughput and its TTFT margin on the safe side; #4 is 6 % slower on its runs but
    twice as far inside the limit. The best lower bound alone takes #38 (which truly breaks the
    limit); discounted by the chance of meeting the bounds, #4 wins."""
    sigma = 0.0405
    lucky = Estimate(38, {"a": 38}, [690.2, 657.1, 713.5], margins=[-0.031, 0.018, -0.062])
    inside = Estimate(4, {"a": 4}, [622.8, 668.0, 647.9], margins=[-0.008, -0.075, -0.046])
    assert lucky.within_bounds(sigma) and inside.within_bounds(sigma)
    assert lucky.bound(sigma, True) > inside.bound(sigma, True)
    assert lucky.within_probability(sigma) < 0.9 < inside.within_probability(sigma)
    assert winner([lucky, inside], sigma, maximize=True) is inside
    note = selection_note([lucky, inside], sigma, maximize=True)
    assert note is not None and note["winner"] == 4
    assert note["bounds_confident"] is True and note["bounds_probability"] > 0.9
    # far ahead, the faster one still wins: the discount is a chance, not a veto
    fast = Estimate(38, {"a": 38}, [900.0, 910.0, 905.0], margins=[-0.031, 0.018, -0.062])
    assert winner([fast, inside], sigma, maximize=True) is fast


def test_without_a_confident_configuration_the_best_on_its_mean_is_returned_and_flagged() -> None:
    sigma = 0.04
    edge = Estimate(1, {"a": 1}, [700.0], margins=[-0.01])
    broken = Estimate(2, {"a": 2}, [900.0], margins=[0.05])
    assert winner([broken], sigma, maximize=True) is None
    assert winner([edge, broken], sigma, maximize=True) is edge
    note = selection_note([edge, broken], sigma, maximize=True)
    assert note is not None and note["bounds_confident"] is False
    assert 0.5 < note["bounds_probability"] < 0.7
    # no bounds in the spec: nothing about them in the note
    free = selection_note([Estimate(3, {"a": 3}, [100.0])], sigma, maximize=True)
    assert free is not None and "bounds_confident" not in free


def test_a_bounded_sweeps_report_states_the_winners_chance_of_meeting_the_bounds(
    store: Any, tmp_path: Path
) -> None:
    data = _noisy(
        **{
            "objective.constraints": [{"metric": "tp.e2e_p95_s", "max": 1000.0}],
            "budget.max_trials": 8,
        }
    )
    _run(store, tmp_path, data)
    sel = (store.get_sweep("t").notes or {})["selection"]
    assert sel["bounds_confident"] is True and sel["bounds_probability"] == 1.0
    from autotune.report.writer import write_report

    text = Path(write_report(store, "t", tmp_path / "report", plots=False).report_md).read_text()
    assert "within the spec's bounds with a probability of 100 %" in text
    assert "the one further inside the bounds wins" in text


def _final_state(ests: list[Estimate], *, launched: int, total: int = 40) -> Any:
    from types import SimpleNamespace

    search = SimpleNamespace(confirm_runs=3, confirm_share=0.3)
    state = SimpleNamespace(
        setup=SimpleNamespace(maximize=True, spec=SimpleNamespace(search=search), refs=[1]),
        budget=SimpleNamespace(max_trials=total),
        launched=launched,
        running_keys=set(),
        repeats_started={},
        confirm_launched=0,
        estimates={str(e.number): e for e in ests},
    )
    state.trial_spec = lambda number, config, repeat: ("spec", number, repeat)
    return state


def test_under_bounds_the_last_launch_confirms_what_would_be_returned() -> None:
    """The landscape suite's mixed-TTFT seed 7 in miniature: the sweep's best has one run
    11 % inside a TTFT limit; the last launch re-runs it instead of trying a configuration
    that nothing could confirm. Earlier launches, or a sweep without bounds, are left alone."""
    from autotune.sweep import confirm

    lucky = Estimate(41, {"a": 41}, [1002.0], row_id=7, margins=[-0.11])
    steady = Estimate(5, {"a": 5}, [940.0] * 3, row_id=3, margins=[-0.1] * 3)
    sigma = pooled_sigma([lucky, steady])
    state = _final_state([lucky, steady], launched=39)
    item = confirm._final_check(state, [lucky, steady], sigma)
    assert item is not None and item.source == confirm.SOURCE and item.row_id == 7
    assert state.repeats_started and state.confirm_launched == 1
    assert confirm._last_launch(state) and not confirm._last_launch(
        _final_state([lucky, steady], launched=30)
    )
    # no bounds: nothing a lucky margin could hide
    free = Estimate(41, {"a": 41}, [1002.0], row_id=7)
    assert confirm._final_check(_final_state([free], launched=39), [free], sigma) is None
    # what would be returned already stands on confirm_runs runs
    assert confirm._final_check(_final_state([steady], launched=39), [steady], sigma) is None


def test_a_straggler_run_does_not_outvote_two_within_the_limit() -> None:
    """The landscape suite's mixed-TTFT seed 14 in miniature: a configuration truly 8 % inside
    a TTFT limit measured 6 % and 6 % inside and, on one straggler launch, 19 % over; another
    truly 2 % over it measured 3 % inside, then on the limit twice. The margins' centre is their
    median from three runs, as the value's is: the straggler does not make the first break the
    limit, and the second's lucky first run does not make it meet it."""
    sigma = 0.06
    inside = Estimate(6, {"a": 6}, [527.9, 418.1, 527.6], margins=[-0.06, 0.19, -0.058])
    edge = Estimate(25, {"a": 25}, [558.7, 539.7, 537.4], margins=[-0.033, 0.002, 0.007])
    assert inside.feasible and inside.within_bounds(sigma)
    assert not edge.feasible
    assert winner([inside, edge], sigma, maximize=True) is inside
    two = Estimate(7, {"a": 7}, [500.0, 500.0], margins=[-0.06, 0.05])  # two runs: the mean
    assert two.margin == pytest.approx(-0.005)
