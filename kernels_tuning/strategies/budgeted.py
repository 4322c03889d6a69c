"""Budgeted search: warm start, Optuna TPE, then a local neighbourhood check.

1. Seeds (at most half the budget): the winners of the neighbouring batch sizes of the same
   shape (and of other shapes at this M) are evaluated first; neighbouring M values mostly share
   winners, so these are cheap strong candidates. The runner puts the engine's default config
   first, so the search always knows the figure it must beat.
2. TPE (Optuna, multivariate) on the ordinal index of each dimension, told the seed results first.
   Points outside the pre-filtered space (shared memory, waste) are told as failed without
   evaluation; repeats are answered from the memo.
3. Hill climb: evaluate every unevaluated config one step away (+-1 along one dimension) from the
   best; move to the best improvement; repeat until none improves or the budget is spent.

Every distinct config evaluated counts towards `budget`, whatever phase asked for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from kernels_tuning.kernel_config import DIMENSIONS, KernelConfig
from kernels_tuning.space import dimension_values
from kernels_tuning.strategies import Memo, SearchResult, neighbours


def default_budget(
    space_size: int, *, fraction: float = 0.1, min_evals: int = 8, max_evals: int = 48
) -> int:
    """Evaluations for one (shape, M): a fraction of the space, clamped."""
    return max(
        1, min(space_size, max(min_evals, min(max_evals, math.ceil(fraction * space_size))))
    )


def search(
    space: Sequence[KernelConfig],
    memo: Memo,
    *,
    budget: int,
    seeds: Iterable[KernelConfig] = (),
    seed: int = 0,
    reserve_local: int | None = None,
) -> SearchResult:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cands = list(space)
    pool = set(cands)
    budget = max(1, min(budget, len(cands)))
    axes = dimension_values(cands)
    active = [d for d in DIMENSIONS if len(axes[d]) > 1]
    used: set[KernelConfig] = {c for c in memo.costs if c in pool}
    phases = {"cached": len(used), "seed": 0, "tpe": 0, "local": 0}

    def evaluate(cfg: KernelConfig, phase: str) -> float:
        new = cfg not in used
        cost = memo(cfg, phase)
        if new:
            used.add(cfg)
            phases[phase] += 1
        return cost

    max_seeds = max(1, (budget + 1) // 2)  # leave room for the search itself
    for s in seeds:
        if phases["seed"] >= max_seeds or len(used) >= budget:
            break
        if s in pool and s not in used:
            evaluate(s, "seed")

    if reserve_local is None:
        reserve_local = min(2 * len(active), budget // 3)
    tpe_budget = budget - reserve_local
    if active and len(used) < tpe_budget:
        _tpe(cands, pool, axes, active, used, evaluate, memo, tpe_budget, seed)

    best, best_cost = memo.best(used)
    if best is not None:
        best, best_cost = hill_climb(pool, axes, memo, best, best_cost, used, evaluate, budget)
    return SearchResult(best, best_cost, len(used), len(cands), phases)


def _tpe(
    cands: list[KernelConfig],
    pool: set[KernelConfig],
    axes: dict[str, list[int]],
    active: list[str],
    used: set[KernelConfig],
    evaluate: Callable[[KernelConfig, str], float],
    memo: Memo,
    tpe_budget: int,
    seed: int,
) -> None:
    import optuna
    from optuna.distributions import BaseDistribution, IntDistribution
    from optuna.trial import TrialState, create_trial

    dists: dict[str, BaseDistribution] = {d: IntDistribution(0, len(axes[d]) - 1) for d in active}
    fixed = {d: axes[d][0] for d in DIMENSIONS if d not in active}
    sampler = optuna.samplers.TPESampler(
        seed=seed, multivariate=True, n_startup_trials=max(4, tpe_budget // 4)
    )
    study = optuna.create_study(direction="minimize", sampler=sampler)

    def params(cfg: KernelConfig) -> dict[str, int]:
        return {d: axes[d].index(getattr(cfg, d)) for d in active}

    for cfg in sorted(used):
        cost = memo.costs[cfg]
        if math.isfinite(cost):
            study.add_trial(create_trial(params=params(cfg), distributions=dists, value=cost))
        else:
            study.add_trial(
                create_trial(params=params(cfg), distributions=dists, state=TrialState.FAIL)
            )
    attempts = 0
    max_attempts = 20 * tpe_budget + 50
    while len(used) < tpe_budget and attempts < max_attempts:
        attempts += 1
        trial = study.ask(dists)
        vals = {d: axes[d][int(trial.params[d])] for d in active}
        cfg = KernelConfig(**{**fixed, **vals})
        if cfg not in pool:
            study.tell(trial, state=TrialState.FAIL)
            continue
        cost = evaluate(cfg, "tpe")
        if math.isfinite(cost):
            study.tell(trial, cost)
        else:
            study.tell(trial, state=TrialState.FAIL)


def hill_climb(
    pool: set[KernelConfig],
    axes: dict[str, list[int]],
    memo: Memo,
    best: KernelConfig,
    best_cost: float,
    used: set[KernelConfig],
    evaluate: Callable[[KernelConfig, str], float],
    budget: int,
    dims: Iterable[str] = DIMENSIONS,
) -> tuple[KernelConfig, float]:
    """Best-improvement moves to +-1 neighbours until none improves or the budget is spent."""
    dims = tuple(dims)
    while len(used) < budget:
        step_best, step_cost = best, best_cost
        for nb in neighbours(best, axes, pool, dims):
            if nb in used:
                c = memo.costs[nb]
            elif len(used) >= budget:
                break
            else:
                c = evaluate(nb, "local")
            if c < step_cost:
                step_best, step_cost = nb, c
        if step_best == best:
            break
        best, best_cost = step_best, step_cost
    return best, best_cost


def swap_starts(
    space: Sequence[KernelConfig], start: KernelConfig, count: int = 2
) -> list[KernelConfig]:
    """The `count` SWAP_AB=1, SPLIT_K=1 configs of `space` nearest to the (unswapped) `start`:
    same BK, group, warps and stages where possible, then the closest BN and BM (in powers of
    two). Empty when the space has no swapped configs."""
    swapped = [
        c for c in space if c.SWAP_AB and c.SPLIT_K == 1 and not c.FOLD_SCALES and not c.TMA
    ]

    def dist(c: KernelConfig) -> tuple[int, float]:
        same = sum(
            getattr(c, d) != getattr(start, d)
            for d in ("BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
        )
        tile = abs(math.log2(c.BLOCK_SIZE_N / start.BLOCK_SIZE_N)) + abs(
            math.log2(c.BLOCK_SIZE_M / start.BLOCK_SIZE_M)
        )
        return same, tile

    return sorted(swapped, key=lambda c: (dist(c), c))[:count]


def refine_split_k(
    space: Sequence[KernelConfig],
    memo: Memo,
    start: KernelConfig,
    *,
    budget: int,
    swap_starts: Sequence[KernelConfig] = (),
) -> SearchResult:
    """From an SPLIT_K=1 winner: try each split of it (and of each of `swap_starts`, SWAP_AB
    configs near it), then hill-climb in the split-K (and SWAP_AB, FOLD_SCALES, TMA) space.
    Where the space has FOLD_SCALES and TMA, the splits are tried of the folded configs with
    TMA (folding only removes work; TMA loads were 1.14-1.35x faster at M >= 1024 on an H200,
    reports/kernels/README.md; the climb can still step back to 0). Used for FP8, whose engine
    files cannot hold SPLIT_K, SWAP_AB, FOLD_SCALES or TMA but our own files can."""
    cands = list(space)
    pool = set(cands)
    axes = dimension_values(cands)
    used: set[KernelConfig] = set()
    phases = {"split": 0, "swap": 0, "local": 0}
    names = {"split": "split-k", "swap": "swap-ab", "local": "split-k-local"}

    def evaluate(cfg: KernelConfig, phase: str) -> float:
        cost = memo(cfg, names[phase])
        if cfg not in used:
            used.add(cfg)
            phases[phase] += 1
        return cost

    if start in memo.costs:
        used.add(start)

    def lean(c: KernelConfig) -> KernelConfig:
        f = c.with_(FOLD_SCALES=1)
        c = f if f in pool else c
        t = c.with_(TMA=1)
        return t if t in pool else c

    for first, phase in [(start, "split"), *((s, "swap") for s in swap_starts)]:
        for sk in axes["SPLIT_K"]:
            cfg = lean(first).with_(SPLIT_K=sk)
            if cfg in pool and len(used) < budget:
                evaluate(cfg, phase)
    best, cost = memo.best(used)
    if best is None:
        return SearchResult(None, math.inf, len(used), len(cands), phases)
    best, cost = hill_climb(pool, axes, memo, best, cost, used, evaluate, budget)
    return SearchResult(best, cost, len(used), len(cands), phases)
