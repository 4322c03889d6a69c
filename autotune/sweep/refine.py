"""Local refinement: the last share of the budget climbs from the best configurations so far to
their one-parameter neighbours (the next value up or down of an ordered parameter, any other
choice of a categorical one).

Climbing starts from the best configuration overall and from the best configuration of every
branch of the space (each value of a parameter that others depend on: no speculation / NGRAM /
NEXTN, HiCache off / on), taking turns; a branch value with no feasible result at all is first
tried at the best configuration's settings (branch_jumps). Why: these spaces have plateaus
(many configurations within a few percent of each other) with narrow ridges inside one branch
(NGRAM with exactly two draft tokens and enough mamba slots, say); TPE learns early that the
branch is mostly worse and stops visiting it, while a step from the branch's best configuration
reaches the ridge.
benchmarks/sweep_quality.py measures the search with and without it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from autotune.errors import ConfigError
from autotune.space.models import BoolParam, CategoricalParam, Config, SearchSpace
from autotune.space.rules import ConfigValue, same
from autotune.sweep.study import config_key, enqueue

if TYPE_CHECKING:
    from autotune.sweep.state import SweepState

# A feasible trial: (objective value, trial number, configuration).
Result = tuple[float, int, Config]
ConfigView = Mapping[str, ConfigValue]


def neighbours(space: SearchSpace, config: ConfigView) -> Iterator[Config]:
    """Configurations that differ from `config` in one active parameter by one step."""
    for name, p in space.parameters.items():
        current = config.get(name)
        values: Sequence[ConfigValue]
        if isinstance(p, BoolParam):
            values = [not current] if isinstance(current, bool) else [False, True]
        elif isinstance(p, CategoricalParam):
            values = [c for c in p.choices if not same(c, current)]
        else:
            try:
                grid = sorted(p.grid_values())
            except ConfigError:
                continue  # a continuous float has no "next value"
            if current is None:
                values = [grid[0], grid[-1]]
            elif not isinstance(current, int | float):  # as comparing it with the grid would
                raise TypeError(f"{name}: {current!r} is not a number")
            else:
                below = [v for v in grid if v < current]
                above = [v for v in grid if v > current]
                values = ([below[-1]] if below else []) + ([above[0]] if above else [])
        params = {n: config.get(n) for n in space.parameters}
        for v in values:
            cand = space.resolve({**params, name: v})
            if any(cand.get(n) != config.get(n) for n in space.parameters):
                yield {**config, **cand}


def branch_params(space: SearchSpace) -> list[str]:
    """Categorical/bool parameters that other parameters' conditions name (branch roots)."""
    roots: list[str] = []
    for p in space.parameters.values():
        for group in p.condition or ():
            for key in group:
                target = space.parameters.get(key)
                if isinstance(target, CategoricalParam | BoolParam) and key not in roots:
                    roots.append(key)
    return roots


def starts(
    space: SearchSpace, results: list[Result], *, maximize: bool
) -> list[tuple[int, Config]]:
    """Climbing starts: the best (value, number, config) overall, then the best of each branch,
    best first, one per configuration."""
    ranked = sorted(results, key=lambda r: (-r[0] if maximize else r[0], r[1]))
    out: list[tuple[int, Config]] = []
    seen: set[int] = set()

    def add(r: Result) -> None:
        if r[1] not in seen:
            seen.add(r[1])
            out.append((r[1], r[2]))

    if ranked:
        add(ranked[0])
    for name in branch_params(space):
        best_per_value: dict[str, Result] = {}
        for r in ranked:
            best_per_value.setdefault(repr(r[2].get(name)), r)
        for r in best_per_value.values():
            add(r)
    return out


def branch_jumps(
    space: SearchSpace, incumbent: ConfigView, results: list[Result]
) -> Iterator[Config]:
    """The incumbent moved to each branch value (of a branch root) that no feasible result
    holds: a branch whose every run broke a bound or failed elsewhere has not been measured at
    the incumbent's settings, which may be what it lacked (n-gram off wins under a TTFT limit
    only with the large chunk the n-gram runs found)."""
    roots = branch_params(space)
    held = {(k, repr(cfg.get(k))) for _, _, cfg in results for k in roots}
    for cand in neighbours(space, incumbent):
        moved = [k for k in roots if not same(cand.get(k), incumbent.get(k))]
        if moved and all((k, repr(cand.get(k))) not in held for k in moved):
            yield cand


def marginal_gain(
    results: list[Result], *, maximize: bool, broken: Sequence[ConfigView] = ()
) -> Callable[[ConfigView, ConfigView], float]:
    """Score of a move from `start` to `cand`: for each parameter it changes, the mean result
    of trials with the new value minus the mean with the old one (values never measured count
    as the overall mean). A one-dimensional marginal model: cheap, and it tries first the moves
    the data so far favours (more mamba slots, say) instead of a random order.

    A `broken` configuration (measured, but it broke a bound: a TTFT limit, say) counts at the
    worst feasible result, so a move toward values whose runs broke a bound comes after moves
    toward values never measured: without it, every start steps into the same wall in turn
    (a smaller chunk under a TTFT limit), as a wall leaves no feasible result to average."""
    sign = 1.0 if maximize else -1.0
    overall = sum(r[0] for r in results) / len(results) if results else 0.0
    sums: dict[tuple[str, str], list[float]] = {}
    worst = (min if maximize else max)((r[0] for r in results), default=overall)
    scored = [(value, cfg) for value, _, cfg in results] + [(worst, cfg) for cfg in broken]
    for value, cfg in scored:
        for k, v in cfg.items():
            sums.setdefault((k, repr(v)), []).append(value)

    def mean(k: str, v: ConfigValue) -> float:
        vals = sums.get((k, repr(v)))
        return sum(vals) / len(vals) if vals else overall

    def score(start: ConfigView, cand: ConfigView) -> float:
        changed = [k for k in cand if not same(cand.get(k), start.get(k))]
        return sign * sum(mean(k, cand.get(k)) - mean(k, start.get(k)) for k in changed)

    return score


def next_neighbour(
    space: SearchSpace,
    incumbent: ConfigView,
    *,
    seed: int,
    tried: Callable[[ConfigView], bool],
    feasible: Callable[[ConfigView], bool],
    score: Callable[[ConfigView, ConfigView], float] | None = None,
) -> Config | None:
    """The untried, feasible neighbour of the incumbent with the best score (ties in a seeded
    random order), or None when the incumbent is a local optimum (every neighbour tried or
    infeasible)."""
    cands = list(neighbours(space, incumbent))
    random.Random(seed).shuffle(cands)
    if score is not None:
        cands.sort(key=lambda c: -score(incumbent, c))  # stable: ties keep the shuffle
    for cand in cands:
        if not tried(cand) and feasible(cand):
            return cand
    return None


def enqueue_neighbour(state: SweepState) -> None:
    """Queue the next untried neighbour of a climbing start, taking turns between the best
    configuration and the best of each branch; a start with no neighbour left is a local
    optimum and drops out."""
    if state.waiting():
        return  # something (a rerun, a neighbour) is already queued

    def tried(c: ConfigView) -> bool:
        k = config_key(c)
        return k in state.done_by_key or k in state.running_keys or k in state.rejected_keys

    setup = state.setup
    if state.incumbent is not None:
        for jump in branch_jumps(setup.space, state.incumbent[1], state.feasible_results):
            if not tried(jump) and setup.planner.assess(jump).fits:
                enqueue(state.study, setup.space, jump, f"refine:#{state.incumbent[0]}")
                return
    score = marginal_gain(
        state.feasible_results, maximize=setup.maximize, broken=state.broken_results
    )
    open_starts = [
        st
        for st in starts(setup.space, state.feasible_results, maximize=setup.maximize)
        if config_key(st[1]) not in state.local_optima
    ]
    for i in range(len(open_starts)):
        number, config = open_starts[(state.refine_turn + i) % len(open_starts)]
        cand = next_neighbour(
            setup.space,
            config,
            seed=setup.spec.search.seed + number,
            tried=tried,
            feasible=lambda c: setup.planner.assess(c).fits,
            score=score,
        )
        if cand is None:
            state.local_optima.add(config_key(config))
            continue
        state.refine_turn += 1
        enqueue(state.study, setup.space, cand, f"refine:#{number}")
        return
