"""Exhaustive: evaluate every config of the (pre-filtered) space."""

from __future__ import annotations

from collections.abc import Sequence

from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.strategies import Memo, SearchResult


def search(space: Sequence[KernelConfig], memo: Memo) -> SearchResult:
    before = memo.evaluations
    for cfg in space:
        memo(cfg, "exhaustive")
    best, cost = memo.best(space)
    used = sum(1 for c in space if c in memo.costs)
    return SearchResult(best, cost, used, len(space), {"exhaustive": memo.evaluations - before})
