"""The sweep's running estimates of each configuration (sweep/confidence.py) as trials and
re-runs arrive, and the incumbent they give: the part of noise-aware selection that recording
and confirmation both use (apart, so that neither imports the other)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.sweep.confidence import Estimate, pooled_sigma, winner, worst_margin
from autotune.sweep.study import config_key

if TYPE_CHECKING:
    from autotune.sweep.state import SweepState


def enabled(state: SweepState) -> bool:
    """On for a single objective searched by a sampler (a grid runs each point once)."""
    search = state.setup.spec.search
    return search.confirm_runs > 1 and search.sampler != "grid" and len(state.setup.refs) == 1


def add_result(state: SweepState, number: int, row_id: int | None, config: dict[str, Any],
               value: float, constraints: dict[str, float]) -> None:  # fmt: skip
    """A feasible search run: a new estimate (or one more run of a configuration seen)."""
    key = config_key(config)
    est = state.estimates.setdefault(key, Estimate(number, dict(config), row_id=row_id))
    est.values.append(value)
    margin = worst_margin(constraints)
    if margin is not None:
        est.margins.append(margin)
    if enabled(state):
        reselect(state)


def reselect(state: SweepState) -> None:
    """The incumbent (what refine climbs from, the best shown) is the best lower bound."""
    maximize = state.setup.maximize
    ests = list(state.estimates.values())
    best = winner(ests, pooled_sigma(ests), maximize)
    if best is None:
        return
    state.incumbent = (best.number, dict(best.config))
    state.best_value = best.centre(maximize)
    if best.row_id is not None:
        state.store.update_sweep(state.sweep_id, best_trial_id=best.row_id)
