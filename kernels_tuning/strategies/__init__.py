"""Search strategies over a config space, one module each (Kernel Tuner's layout).

A strategy takes the candidate list for one (shape, M), a `Memo` that evaluates configs (each
distinct config at most once; cached results count towards budgets, as in Kernel Tuner) and
returns a `SearchResult`. Strategies never touch the GPU themselves, so they are tested on
synthetic cost functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kernels_tuning.kernel_config import DIMENSIONS, KernelConfig


class Result(Protocol):
    """What an objective returns (bench.Measurement satisfies it)."""

    @property
    def cost(self) -> float: ...


Objective = Callable[[KernelConfig], Result]


@dataclass
class Trial:
    config: KernelConfig
    cost: float  # microseconds; inf when the config failed
    phase: str
    result: Result | None = None


class Memo:
    """Evaluates each distinct config once; counts evaluations; reports each new one."""

    def __init__(
        self,
        objective: Objective,
        *,
        known: Mapping[KernelConfig, float] | None = None,
        on_eval: Callable[[Trial], None] | None = None,
    ) -> None:
        self.objective = objective
        self.costs: dict[KernelConfig, float] = dict(known or {})
        self.trials: list[Trial] = []
        self.on_eval = on_eval
        self.evaluations = len(self.costs)  # results loaded from a cache count, too

    def __call__(self, cfg: KernelConfig, phase: str) -> float:
        if cfg in self.costs:
            return self.costs[cfg]
        res = self.objective(cfg)
        cost = float(res.cost)
        self.costs[cfg] = cost
        self.evaluations += 1
        trial = Trial(cfg, cost, phase, res)
        self.trials.append(trial)
        if self.on_eval is not None:
            self.on_eval(trial)
        return cost

    def best(
        self, among: Iterable[KernelConfig] | None = None
    ) -> tuple[KernelConfig | None, float]:
        pool = (
            self.costs if among is None else {c: self.costs[c] for c in among if c in self.costs}
        )
        if not pool:
            return None, math.inf
        cfg = min(pool, key=lambda c: (pool[c], c))
        return cfg, pool[cfg]


@dataclass
class SearchResult:
    best: KernelConfig | None
    best_cost: float
    evaluations: int  # distinct configs evaluated for this search (incl. cached ones it used)
    space_size: int
    phases: dict[str, int] = field(default_factory=dict)


def neighbours(
    cfg: KernelConfig,
    axes: Mapping[str, list[int]],
    space: set[KernelConfig],
    dims: Iterable[str] = DIMENSIONS,
) -> list[KernelConfig]:
    """Configs one step away along one dimension (its sorted values), that are in `space`."""
    out = []
    for d in dims:
        vals = axes.get(d, [])
        v = getattr(cfg, d)
        if v not in vals:
            continue
        i = vals.index(v)
        for j in (i - 1, i + 1):
            if 0 <= j < len(vals):
                cand = cfg.with_(**{d: vals[j]})
                if cand in space:
                    out.append(cand)
    return out


STRATEGIES = ("exhaustive", "budgeted")
