"""Confirmation re-runs inside the search (noise-aware selection), and the final choice.

Real engines measure 3-5 % differently from one launch to the next, with outliers; a search that
keeps the best single run returns a lucky one. So a leader (the best centre) whose lead over the
incumbent (the best lower bound among the others) is more than a near-tie and less than luck can
explain is launched again (fresh engine; stored as a repeat of its trial, like a finalist
re-run), up to `search.confirm_runs` runs and `search.confirm_share` of the launch budget; in
the last tenth of the budget a leader with one run is confirmed once unless its lead is clear.
Near-ties are not raced (getting them wrong costs little) and a clear leader costs nothing. At the end, the winner is the configuration with the best lower
confidence bound over all its runs (search, confirmation and finalist runs alike), and the
notes keep its interval and where the launches went.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import TYPE_CHECKING

from autotune.store.models import TrialStatus
from autotune.sweep.confidence import (
    Estimate,
    ambiguous,
    figures_by_repeat,
    pooled_sigma,
    selection_note,
    winner,
    worst_margin,
)
from autotune.sweep.resume import row_feasible, row_launched
from autotune.sweep.selection import enabled, reselect
from autotune.sweep.state import CONFIRM_SOURCE, Running
from autotune.sweep.study import config_key, user_constraints
from autotune.sweep.trial import started_nothing
from autotune.sweep.trial_bench import CUT_PREFIX

if TYPE_CHECKING:
    from concurrent.futures import Future

    from autotune.sweep.state import SweepState
    from autotune.sweep.trial import TrialResult

SOURCE = CONFIRM_SOURCE
TIE_Z, LUCK_Z = 0.5, 3.0  # a lead below TIE_Z standard errors is a tie; above LUCK_Z, real
END_GAME = 0.1  # share of a trial budget kept for confirming the leader at the end


def _may_spend(state: SweepState) -> bool:
    share = state.setup.spec.search.confirm_share
    cap = state.budget.max_trials if state.budget.max_trials is not None else state.launched + 1
    return state.confirm_launched + 1 <= share * cap


def _end_game(state: SweepState) -> bool:
    """The last tenth of a trial budget (at least one launch): what is returned must stand
    on more than one run, so the leader is confirmed before a new configuration is tried."""
    total = state.budget.max_trials
    if total is None:
        return False
    left = total - state.launched - len(state.running_keys)
    return left <= max(1, round(END_GAME * total))


def _last_launch(state: SweepState) -> bool:
    total = state.budget.max_trials
    return total is not None and total - state.launched - len(state.running_keys) <= 1


def _final_check(state: SweepState, ests: list[Estimate], sigma: float) -> Running | None:
    """Under the spec's bounds, the budget's last launch re-runs what the sweep would return
    when that stands on fewer than confirm_runs runs, rather than trying a configuration that
    nothing could confirm: one lucky launch can put a new one inside a TTFT limit its true
    figures break, and the last launch is where that cannot be caught."""
    best = winner(ests, sigma, state.setup.maximize)
    if best is None or not best.margins or best.row_id is None:
        return None
    if best.n >= state.setup.spec.search.confirm_runs:
        return None
    if config_key(best.config) in state.running_keys:
        return None
    return _repeat(state, best)


def _repeat(state: SweepState, est: Estimate) -> Running:
    assert est.row_id is not None
    key = config_key(est.config)
    repeat = state.repeats_started.get(key, 0) + 1
    state.repeats_started[key] = repeat
    spec = state.trial_spec(est.number, est.config, repeat=repeat)
    state.confirm_launched += 1  # counted now, so that parallel slots respect the share
    return Running(None, est.row_id, spec, None, key, SOURCE, time.monotonic())


def next_repeat(state: SweepState) -> Running | None:
    """A re-run of the leader (the best centre) while its lead over the incumbent (the best
    lower bound among the others) could be luck, or None."""
    if not enabled(state) or not _may_spend(state):
        return None
    maximize = state.setup.maximize
    ests = list(state.estimates.values())
    if len(ests) < 2:
        return None
    sigma = pooled_sigma(ests)
    if _last_launch(state):
        final = _final_check(state, ests, sigma)
        if final is not None:
            return final
    leader = max(ests, key=lambda e: (e.score(maximize) if e.feasible else -math.inf, -e.number))
    rest = [e for e in ests if e is not leader]
    rival = winner(rest, sigma, maximize) or max(rest, key=lambda e: e.score(maximize))
    most = state.setup.spec.search.confirm_runs
    if leader.n >= most or config_key(leader.config) in state.running_keys:
        return None
    if not (doubtful(leader, rival, sigma, maximize) or leader.at_risk(sigma) or (
            _end_game(state) and leader.n == 1
            and ambiguous(leader, rival, sigma, maximize, z=LUCK_Z))):  # fmt: skip
        return None
    if leader.row_id is None:
        return None
    return _repeat(state, leader)


def doubtful(leader: Estimate, rival: Estimate, sigma: float, maximize: bool) -> bool:
    """The leader is ahead by more than a near-tie (which costs little to get wrong) and by
    less than luck can explain (LUCK_Z standard errors; the tails are heavy)."""
    gap = leader.score(maximize) - rival.score(maximize)
    se = sigma * (1.0 / max(leader.n, 1) + 1.0 / max(rival.n, 1)) ** 0.5
    return bool(TIE_Z * se < gap < LUCK_Z * se)


def record_confirm(state: SweepState, item: Running, fut: Future[TrialResult]) -> None:
    """A confirmation run: stored as a repeat of its trial; its value joins the estimate."""
    from autotune.sweep.finalists import record_repeat
    from autotune.sweep.recording import collect, judge

    res = collect(state, item, fut)
    record_repeat(state, item, res, label="confirm")
    if res.status == TrialStatus.INTERRUPTED or started_nothing(res):
        state.confirm_launched -= 1  # it cost nothing: the budget gets it back
        return
    state.launched += 1
    if res.timings.get("total_s"):
        state.durations.append(res.timings["total_s"])
    status, _, values = judge(state.setup.refs, res)
    est = state.estimates.get(item.key)
    if status == TrialStatus.COMPLETE and values and est is not None:
        est.values.append(values[0])
        bounds = user_constraints(res.figures(), state.setup.spec.objective.constraints)
        margin = worst_margin(bounds)
        if margin is not None:
            est.margins.append(margin)
        reselect(state)
    state.save_notes()


def estimates_from_store(state: SweepState) -> list[Estimate]:
    """Every feasible complete trial's runs as the database holds them (search run, then
    confirmation and finalist re-runs), one estimate per configuration, with each run's
    margin to the spec's own bounds."""
    metric = state.setup.refs[0].metric
    bounds = state.setup.spec.objective.constraints
    by_key: dict[str, Estimate] = {}
    for row in state.store.get_trials(state.sweep_id, TrialStatus.COMPLETE):
        if row.value is None or not row_feasible(row):  # (the first test narrows the type)
            continue
        cons = (row.launch or {}).get("constraints") or {}
        runs = figures_by_repeat(state.store.get_measurements(row.id or 0))
        est = by_key.setdefault(
            config_key(row.config), Estimate(row.number or 0, dict(row.config), row_id=row.id)
        )
        est.values.append(float(row.value))  # the search run's value is the objective as told
        first = worst_margin(cons)
        if first is not None:
            est.margins.append(first)
        for r in sorted(k for k in runs if k > 0):
            v = runs[r].get(metric)
            if v is None:
                continue
            est.values.append(v)
            margin = worst_margin(user_constraints(runs[r], bounds))
            if margin is not None:
                est.margins.append(margin)
    return list(by_key.values())


def finish(state: SweepState) -> None:
    """The final choice over every run, noted with its interval and where launches went."""
    if len(state.setup.refs) != 1:
        return
    ests = estimates_from_store(state)
    maximize = state.setup.maximize
    sigma = pooled_sigma(ests)
    note = selection_note(ests, sigma, maximize)
    if note is not None:
        state.notes["selection"] = note
        best = next(e for e in ests if e.number == note["winner"])
        if best.row_id is not None:
            state.store.update_sweep(state.sweep_id, best_trial_id=best.row_id)
    state.notes["launches_by_source"] = launches_by_source(state)
    cut = cut_runs(state)
    if cut:
        state.notes["cut_runs"] = cut
    state.save_notes()


def cut_runs(state: SweepState) -> int:
    """Search runs whose benchmark search.cut_below stopped early."""
    return sum(
        1
        for row in state.store.get_trials(state.sweep_id, TrialStatus.PRUNED)
        if str((row.launch or {}).get("reason") or "").startswith(CUT_PREFIX)
    )


def load(state: SweepState) -> None:
    """A (resumed) sweep's confirmation count and every configuration's runs so far, from the
    notes and the rows; the incumbent they give."""
    state.confirm_launched = int(state.notes.get("confirm_launched") or 0)
    state.launched += state.confirm_launched
    if len(state.setup.refs) != 1:
        return
    for est in estimates_from_store(state):
        key = config_key(est.config)
        state.estimates[key] = est
        state.repeats_started[key] = max(est.n - 1, 0)
    if enabled(state):
        reselect(state)


def launches_by_source(state: SweepState) -> dict[str, int]:
    """Launches per purpose: the baseline, known-good seeds, the sampler, refine steps,
    re-runs of failed trials, confirmation and finalist re-runs."""
    counts: Counter[str] = Counter()
    for row in state.store.get_trials(state.sweep_id):
        if not row_launched(row):
            continue
        source = str((row.launch or {}).get("source") or "sampler")
        counts[source.split(":")[0]] += 1
    counts[SOURCE] += state.confirm_launched
    counts["finalist"] += state.finalist_launched
    return {k: v for k, v in counts.items() if v}
