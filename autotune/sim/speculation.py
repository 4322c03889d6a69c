"""How many draft tokens a speculative verify step accepts in the simulated engine (C4): a chain
of D drafts where each position is accepted with one probability p, chosen per kind of text so
that the mean yield 1 + sum p^i is the perf model's accept length for that kind."""

from __future__ import annotations

import math
import random

import numpy as np

from autotune.planner.perf import PerfModel
from autotune.sim.tokens import IdArray


def chain_p(mean: float, d: int) -> float:
    """Per-position acceptance p of a draft chain whose expected yield 1 + sum p^i is `mean`."""
    target = mean - 1.0
    if d <= 0 or target <= 0:
        return 0.0
    if target >= d:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(1, d + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


class AcceptanceSampler:
    """Seeded draws of the tokens one verify step yields (1 + accepted drafts, at most 1 + D).
    It draws from the scheduler's own generators, so the run is the same whoever holds them."""

    def __init__(
        self, perf: PerfModel, drafts: int, rng: random.Random, nprng: np.random.Generator
    ):
        self.perf = perf
        self.drafts = drafts
        self.rng = rng
        self.nprng = nprng
        self._p: dict[str, float] = {}

    def p(self, kind: str) -> float:
        """The per-position acceptance for a kind of text (computed once per kind)."""
        p = self._p.get(kind)
        if p is None:
            p = self._p[kind] = chain_p(self.perf.accept_length(kind), self.drafts)
        return p

    def draws(self, kind: str, size: int) -> IdArray:
        """The yields of `size` verify steps at once (the analytic mode's fused decode)."""
        p = self.p(kind)
        if p <= 0.0:
            return np.ones(size, dtype=np.int64)
        if p >= 1.0:
            return np.full(size, 1 + self.drafts, dtype=np.int64)
        g = self.nprng.geometric(1.0 - p, size) - 1  # drafts accepted before the first reject
        return 1 + np.minimum(g, self.drafts)

    def one(self, kind: str) -> int:
        """The yield of one verify step."""
        p = self.p(kind)
        if p <= 0.0:
            return 1
        if p >= 1.0:
            return 1 + self.drafts
        u = 1.0 - self.rng.random()  # (0, 1]
        return 1 + min(int(math.log(u) / math.log(p)), self.drafts)
