"""The anchors' methods, run on the same landscapes, noise and launch accounting as the default
search. None has a planner: every configuration it picks is launched, and one that does not fit
fails (a launch spent). Each keeps the best single measured run, as the tools do.

- sglang-capped-grid: SGLang auto_benchmark's tiered grid (python/sglang/auto_benchmark_lib.py,
  PR #21736): the baseline first; tier 1 varies each of the first six knobs alone, two values
  each; tier 2 the full product of the first three knobs (three values each) with the rest one
  at a time; tier 3 the full product; candidates capped by the budget (its default cap is 8).
- vllm-auto-tune: vLLM's benchmarks/auto_tune/auto_tune.sh: the memory fraction first (from the
  highest, down one step per failed start, with the largest batch settings), then the full
  grid of max-num-seqs x max-num-batched-tokens (here SGLang's max_running_requests x
  chunked_prefill_size), every other knob at the engine's default.
- random: configurations drawn uniformly from the space's grid, without the planner.
- ofat: one factor at a time from the defaults: each knob's other values in turn, keeping the
  best before moving on, cycling until the budget is spent.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from typing import Any

from autotune.sim.variation import RunVariation
from autotune.space.models import BoolParam, CategoricalParam
from autotune.sweep.study import config_key

from .landscapes import NOISE, Landscape

Config = dict[str, Any]


class Launcher:
    """Launches of one anchor run: each config measured once with the launch's luck."""

    def __init__(self, land: Landscape, seed: int, budget: int):
        self.land, self.seed, self.budget = land, seed, budget
        self.luck = RunVariation(
            NOISE["run_noise"], NOISE["straggler_rate"], NOISE["flaky_start_rate"]
        )
        self.launches: list[tuple[Config, float | None]] = []
        self.seconds = 0.0

    @property
    def left(self) -> int:
        return self.budget - len(self.launches)

    def measure(self, config: Config) -> float | None:
        """The noisy objective of one launch (None: it failed or broke a constraint)."""
        e = self.land.entry(config)
        draw = self.luck.draw(self.seed * 100_003 + len(self.launches) + 7_777_777)
        self.seconds += (e.startup_s or 60.0) + e.bench_s * draw.slowdown + 10.0
        value = None if draw.start_fails else self.land.measured(config, draw.slowdown)
        self.launches.append((dict(config), value))
        return value

    def winner(self) -> Config | None:
        done = [(v, i, c) for i, (c, v) in enumerate(self.launches) if v is not None]
        if not done:
            return None
        maximize = self.land.spec.objective.direction == "maximize"
        best = max(done, key=lambda t: (t[0] if maximize else -t[0], -t[1]))
        return best[2]


def _values(land: Landscape, name: str) -> list[Any]:
    p = land.space.parameters[name]
    if isinstance(p, BoolParam):
        return [False, True]
    if isinstance(p, CategoricalParam):
        return list(p.choices)
    return list(p.grid_values())


def _knobs(land: Landscape) -> list[str]:
    """Searched knobs in the order the spec lists them (unconditional ones: a grid tool sets
    flags, it does not know the space's conditions)."""
    order = list(land.spec.space.overrides)
    names = [n for n in land.space.parameters if len(_values(land, n)) > 1]
    names.sort(key=lambda n: order.index(n) if n in order else len(order))
    return [n for n in names if not land.space.parameters[n].condition]


def _resolve(land: Landscape, base: Config, changes: Config) -> Config:
    return dict(land.space.resolve({**base, **changes}))


def _others(land: Landscape, name: str, current: Any, k: int) -> list[Any]:
    """Up to k values of `name` other than `current`, spread over its range."""
    vals = [v for v in _values(land, name) if v != current]
    if len(vals) <= k:
        return vals
    step = (len(vals) - 1) / max(k - 1, 1)
    return [vals[round(i * step)] for i in range(k)]


def capped_grid(land: Landscape, seed: int, budget: int) -> Launcher:
    run = Launcher(land, seed, budget)
    base = land.defaults()
    knobs = _knobs(land)

    def candidates() -> Iterator[Config]:
        yield base
        for n in knobs[:6]:  # tier 1
            for v in _others(land, n, base.get(n), 2):
                yield _resolve(land, base, {n: v})
        head = knobs[:3]  # tier 2
        grids = [[base.get(n), *_others(land, n, base.get(n), 2)] for n in head]
        for combo in itertools.product(*grids):
            yield _resolve(land, base, dict(zip(head, combo, strict=True)))
        for n in knobs[3:]:
            for v in _others(land, n, base.get(n), 2):
                yield _resolve(land, base, {n: v})
        for combo in itertools.product(*(_values(land, n) for n in knobs)):  # tier 3
            yield _resolve(land, base, dict(zip(knobs, combo, strict=True)))

    _launch_unique(run, candidates())
    return run


def vllm_auto_tune(land: Landscape, seed: int, budget: int) -> Launcher:
    run = Launcher(land, seed, budget)
    base = land.defaults()
    seqs = (
        [v for v in _values(land, "max_running_requests")]
        if ("max_running_requests" in land.space.parameters)
        else [base.get("max_running_requests")]
    )
    tokens = (
        [v for v in _values(land, "chunked_prefill_size")]
        if ("chunked_prefill_size" in land.space.parameters)
        else [base.get("chunked_prefill_size")]
    )
    largest = {"max_running_requests": _largest(seqs), "chunked_prefill_size": _largest(tokens)}
    mem = base.get("mem_fraction_static")
    if "mem_fraction_static" in land.space.parameters:
        for m in sorted(_values(land, "mem_fraction_static"), reverse=True):
            if run.left <= 0:
                break
            mem = m
            if (
                run.measure(_resolve(land, base, {**largest, "mem_fraction_static": m}))
                is not None
            ):
                break
    grid = (_resolve(land, base, {"max_running_requests": s, "chunked_prefill_size": t,
                                  "mem_fraction_static": mem})
            for s, t in itertools.product(seqs, tokens))  # fmt: skip
    _launch_unique(run, grid)
    return run


def _largest(values: list[Any]) -> Any:
    nums = [v for v in values if isinstance(v, int | float)]
    return max(nums) if nums else None


def random_search(land: Landscape, seed: int, budget: int) -> Launcher:
    run = Launcher(land, seed, budget)
    grid = land.grid()
    random.Random(seed).shuffle(grid)
    _launch_unique(run, iter(grid))
    return run


def ofat(land: Landscape, seed: int, budget: int) -> Launcher:
    run = Launcher(land, seed, budget)
    best = land.defaults()
    best_v = run.measure(best) or 0.0
    maximize = land.spec.objective.direction == "maximize"
    seen = {config_key(best)}
    knobs = [n for n in land.space.parameters if len(_values(land, n)) > 1]
    while run.left > 0:
        moved = False
        for n in knobs:
            for v in _values(land, n):
                if run.left <= 0:
                    return run
                cand = _resolve(land, best, {n: v})
                if config_key(cand) in seen:
                    continue
                seen.add(config_key(cand))
                got = run.measure(cand)
                if got is not None and (got > best_v if maximize else got < best_v):
                    best, best_v, moved = cand, got, True
        if not moved:
            break
    return run


def _launch_unique(run: Launcher, cands: Iterator[Config]) -> None:
    seen: set[str] = set()
    for c in cands:
        if run.left <= 0:
            return
        k = config_key(c)
        if k in seen or any(config_key(x) == k for x, _ in run.launches):
            continue
        seen.add(k)
        run.measure(c)


ANCHORS: dict[str, Callable[[Landscape, int, int], Launcher]] = {
    "sglang-capped-grid": capped_grid,
    "vllm-auto-tune": vllm_auto_tune,
    "random": random_search,
    "ofat": ofat,
}
