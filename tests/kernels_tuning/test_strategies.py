"""Search strategies on a synthetic cost function (no GPU)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.resources import H200_LIMITS
from kernels_tuning.space import build_space, cdiv
from kernels_tuning.strategies import Memo, budgeted, exhaustive


@dataclass
class Res:
    cost: float


def synthetic(m: int, n: int, k: int):  # type: ignore[no-untyped-def]
    """Waves x tile work x penalties, with a deterministic ripple so ties are rare."""

    def f(c: KernelConfig) -> Res:
        tiles = cdiv(m, c.BLOCK_SIZE_M) * cdiv(n, c.BLOCK_SIZE_N) * c.SPLIT_K
        work = math.ceil(tiles / 132) * c.BLOCK_SIZE_M * c.BLOCK_SIZE_N * k / c.SPLIT_K
        eff = (
            1 + 0.3 * abs(math.log2(c.num_stages / 4)) + 0.1 * abs(math.log2(c.BLOCK_SIZE_K / 128))
        )
        eff += 0.15 * (c.num_warps == 8 and c.BLOCK_SIZE_M * c.BLOCK_SIZE_N < 8192)
        eff *= 1 + 0.03 * abs(math.log2(c.GROUP_SIZE_M + 1) - 3)
        ripple = 1 + 0.02 * ((c.BLOCK_SIZE_N * 7 + c.BLOCK_SIZE_M * 3 + c.num_stages) % 5) / 4
        return Res(work * eff * ripple * 1e-6 + 2.0)

    return f


def test_budgeted_close_to_exhaustive_with_a_tenth_of_the_evaluations() -> None:
    total_b = total_e = 0
    for m in (64, 256, 1024, 4096):
        space = build_space("fp8", m, 5120, 6144, H200_LIMITS)
        f = synthetic(m, 5120, 6144)
        ex = exhaustive.search(space, Memo(f))
        budget = budgeted.default_budget(len(space))
        b = budgeted.search(space, Memo(f), budget=budget, seed=1)
        assert b.evaluations <= budget
        assert b.best_cost <= 1.02 * ex.best_cost, (m, b.best, ex.best)
        total_b += b.evaluations
        total_e += ex.evaluations
    assert total_b <= 0.1 * total_e


def test_seeds_first_and_memo_counts_distinct_configs() -> None:
    space = build_space("fp8", 64, 5120, 6144, H200_LIMITS)
    calls: list[KernelConfig] = []
    f = synthetic(64, 5120, 6144)

    def obj(c: KernelConfig) -> Res:
        calls.append(c)
        return f(c)

    memo = Memo(obj)
    seeds = [space[3], space[3], space[10]]
    res = budgeted.search(space, memo, budget=12, seeds=seeds, seed=0)
    assert calls[:2] == [space[3], space[10]]
    assert len(calls) == len(set(calls)) == memo.evaluations == res.evaluations <= 12
    assert res.phases["seed"] == 2


def test_cached_results_count_towards_the_budget() -> None:
    space = build_space("fp8", 64, 5120, 6144, H200_LIMITS)
    known = {c: 5.0 for c in space[:6]}
    calls: list[KernelConfig] = []
    memo = Memo(lambda c: calls.append(c) or Res(4.0), known=known)  # type: ignore[func-returns-value]
    res = budgeted.search(space, memo, budget=8)
    assert res.evaluations == 8 and len(calls) == 2


def test_hill_climb_reaches_the_optimum_of_a_separable_function() -> None:
    space = build_space("fp8", 1024, 5120, 6144, H200_LIMITS)
    target = KernelConfig(64, 128, 128, 16, 4, 4)
    order = {
        d: sorted({getattr(c, d) for c in space})
        for d in (
            "BLOCK_SIZE_M",
            "BLOCK_SIZE_N",
            "BLOCK_SIZE_K",
            "GROUP_SIZE_M",
            "num_warps",
            "num_stages",
        )
    }

    def f(c: KernelConfig) -> Res:
        return Res(
            1
            + sum(
                abs(order[d].index(getattr(c, d)) - order[d].index(getattr(target, d)))
                for d in order
            )
        )

    memo = Memo(f)
    res = budgeted.search(
        space, memo, budget=60, seeds=[KernelConfig(32, 64, 64, 1, 4, 3)], seed=3
    )
    assert res.best == target


def test_refine_split_k_improves_a_narrow_shape() -> None:
    f = synthetic(1, 5120, 6144)
    sk_space = build_space("fp8", 1, 5120, 6144, H200_LIMITS, split_k=True)
    start = KernelConfig(16, 64, 128, 1, 4, 4)
    memo = Memo(f)
    base = memo(start, "x")
    res = budgeted.refine_split_k(sk_space, memo, start, budget=10)
    assert res.best is not None and res.best.SPLIT_K > 1 and res.best_cost < base
    assert res.evaluations <= 10


def test_swap_starts_and_refinement_reach_swapped_configs() -> None:
    space = build_space("fp8", 4, 5120, 6144, H200_LIMITS, split_k=True, swap_ab=True)
    start = KernelConfig(16, 32, 128, 1, 4, 3)
    starts = budgeted.swap_starts(space, start)
    assert len(starts) == 2 and all(c.SWAP_AB and c.SPLIT_K == 1 for c in starts)
    # nearest: same BK, group, warps, stages and BM; BN up to the 64 a swapped tile needs
    assert starts[0] == KernelConfig(16, 64, 128, 1, 4, 3, SWAP_AB=1)
    assert budgeted.swap_starts([c for c in space if not c.SWAP_AB], start) == []
    f = synthetic(4, 5120, 6144)

    def favour_swap(c: KernelConfig) -> Res:
        return Res(f(c).cost * (0.5 if c.SWAP_AB else 1.0))

    res = budgeted.refine_split_k(space, Memo(favour_swap), start, budget=20, swap_starts=starts)
    assert res.best is not None and res.best.SWAP_AB == 1
    assert res.phases["swap"] > 0 and res.evaluations <= 20


def test_refinement_folds_scales_at_large_m_where_nothing_else_is_left() -> None:
    # M=4096: no split-K (enough tiles) and no SWAP_AB (M > 32); FOLD_SCALES is the own-file
    # option left, tried first on the engine winner, then the climb stays in the folded space.
    space = build_space(
        "fp8", 4096, 5120, 6144, H200_LIMITS, split_k=True, swap_ab=True, fold=True
    )
    assert not any(c.SPLIT_K > 1 or c.SWAP_AB for c in space)
    f = synthetic(4096, 5120, 6144)

    def favour_fold(c: KernelConfig) -> Res:
        return Res(f(c).cost * (0.8 if c.FOLD_SCALES else 1.0))

    start = KernelConfig(64, 128, 128, 32, 4, 3)
    memo = Memo(favour_fold)
    base = memo(start, "engine")
    res = budgeted.refine_split_k(space, memo, start, budget=10)
    assert res.best is not None and res.best.FOLD_SCALES == 1 and res.best_cost <= 0.8 * base
    assert start.with_(FOLD_SCALES=1) in memo.costs and res.evaluations <= 10


def test_refinement_tries_tma_on_the_folded_winner_and_can_step_back() -> None:
    space = build_space(
        "fp8", 4096, 5120, 6144, H200_LIMITS, split_k=True, swap_ab=True, fold=True, tma=True
    )
    f = synthetic(4096, 5120, 6144)
    start = KernelConfig(64, 128, 128, 32, 4, 3)
    for factor, want in ((0.8, 1), (1.25, 0)):

        def cost(c: KernelConfig, factor: float = factor) -> Res:
            return Res(f(c).cost * (factor if c.TMA else 1.0) * (0.9 if c.FOLD_SCALES else 1.0))

        memo = Memo(cost)
        memo(start, "engine")
        res = budgeted.refine_split_k(space, memo, start, budget=10)
        # the folded TMA form is tried first; where TMA is slower the climb steps back to 0
        assert start.with_(FOLD_SCALES=1, TMA=1) in memo.costs
        assert res.best is not None and res.best.TMA == want
        assert res.best_cost <= memo.costs[start.with_(FOLD_SCALES=1, TMA=1)]
