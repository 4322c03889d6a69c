"""The search of one (shape, M) work item: its space, the strategy that walks it, and for our own
FP8 files the split-K refinement around the winner.

Each item is seeded with the winners of the nearest batch sizes already done for its shape and
of other shapes at the same M (`choose_seeds`; the driver picks them when it hands an item out,
so this also works with several GPUs).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from autotune.errors import ConfigError
from kernels_tuning.kernel_config import DEFAULT_INT4, SGLANG_DEFAULT_FP8, KernelConfig, KernelKind
from kernels_tuning.resources import DeviceLimits
from kernels_tuning.space import build_space, canonical_group, legality
from kernels_tuning.strategies import Memo, Objective, SearchResult, Trial, budgeted, exhaustive
from kernels_tuning.work_items import ItemResult, WorkItem


@dataclass
class TuneParams:
    strategy: str = "budgeted"
    budget_fraction: float = 0.1
    min_evals: int = 8
    max_evals: int = 48
    split_k_fp8: bool = True  # also search split-K (and SWAP_AB) for our own FP8 files
    split_k_budget: int = 20  # a full round of the climb around the TMA form (call 22)
    swap_ab: bool = True  # SWAP_AB in the INT4 space and in FP8's own-file refinement
    swap_budget: int = 10  # extra FP8 own-file evaluations where swapped configs exist
    fold_scales: bool = True  # FOLD_SCALES in FP8's own-file refinement (kernels_tuning/space.py)
    tma: bool = True  # TMA in FP8's own-file refinement (kernels_tuning/space.py)
    deterministic: bool = False  # leave out ATOMIC_REDUCE (INT4: run-to-run identical output)
    seed: int = 0
    # An engine release's own kernel at M up to this is searched exhaustively under the
    # budgeted strategy: its space mixes plain, split and swapped tiles (not a product of axes,
    # where TPE proposes mostly outside it), evaluations there take milliseconds, and decode
    # sizes are where its default is furthest from the best (kernels_tuning/engine_space.py).
    engine_exhaustive_max_m: int = 128


def default_config(kind: KernelKind, engine: str = "") -> KernelConfig:
    """The config the kernel runs without a file (an engine release's own default)."""
    if engine:
        from kernels_tuning.engine_space import EngineTarget

        return EngineTarget.parse(engine).default_config()
    return SGLANG_DEFAULT_FP8 if kind == "fp8" else DEFAULT_INT4


def item_legality(item: WorkItem, cfg: KernelConfig, limits: DeviceLimits) -> str | None:
    """Why `cfg` cannot run for `item` on its kernel (ours or the engine release's)."""
    if item.engine:
        from kernels_tuning.engine_space import EngineTarget

        return EngineTarget.parse(item.engine).legality(cfg, limits, item.n, item.k)
    return legality(cfg, item.kind, 128, limits, item.n, item.k)


def choose_seeds(
    item: WorkItem, done: Mapping[str, ItemResult], *, per_side: int = 1, other_shapes: int = 2
) -> list[KernelConfig]:
    """The engine default, then the winners of the nearest finished M of the same shape (below
    and above) and of other shapes at this M."""
    same = [r for r in done.values() if r.item.shape_key == item.shape_key and r.item.m != item.m]
    below = sorted((r for r in same if r.item.m < item.m), key=lambda r: -r.item.m)[:per_side]
    above = sorted((r for r in same if r.item.m > item.m), key=lambda r: r.item.m)[:per_side]
    others = [
        r
        for r in done.values()
        if r.item.kind == item.kind and r.item.m == item.m and r.item.shape_key != item.shape_key
    ][:other_shapes]
    out: list[KernelConfig] = [default_config(item.kind, item.engine)]
    for r in [*below, *above, *others]:
        for c in (r.engine_best, r.best):
            if c is not None and c not in out:
                out.append(c)
    return out


def tune_item(
    item: WorkItem,
    objective: Objective,
    limits: DeviceLimits,
    *,
    params: TuneParams,
    seeds: Sequence[KernelConfig] = (),
    known: Mapping[KernelConfig, float] | None = None,
    on_eval: Callable[[Trial], None] | None = None,
) -> ItemResult:
    """Search one (shape, M)."""
    t0 = time.perf_counter()
    space = item_space(item, limits, params)
    d = default_config(item.kind, item.engine)
    memo = Memo(objective, known=known, on_eval=on_eval)
    res = run_strategy(item, space, memo, params, seeds)
    engine_best, engine_cost = res.best, res.best_cost
    best, cost = engine_best, engine_cost
    phases = dict(res.phases)
    if item.kind == "fp8" and not item.engine and params.split_k_fp8 and engine_best is not None:
        r2 = refine_own_fp8(item, engine_best, memo, limits, params)
        if r2 is not None:
            phases.update({f"split_k_{k}": v for k, v in r2.phases.items()})
            if r2.best is not None and r2.best_cost < cost:
                best, cost = r2.best, r2.best_cost
    default_us = memo.costs.get(d)
    return ItemResult(
        item,
        best,
        cost,
        engine_best,
        engine_cost,
        len(memo.costs),
        len(space),
        time.perf_counter() - t0,
        phases,
        default_us if default_us is not None and math.isfinite(default_us) else None,
    )


def item_space(item: WorkItem, limits: DeviceLimits, params: TuneParams) -> list[KernelConfig]:
    """The configs searched for `item`: its kernel's space on this device (ours or the engine
    release's), the engine default always among them where it is legal."""
    split = item.kind == "int4"
    if item.engine:
        from kernels_tuning.engine_space import EngineTarget

        space = EngineTarget.parse(item.engine).space(item.m, item.n, item.k, limits)
    else:
        space = build_space(
            item.kind,
            item.m,
            item.n,
            item.k,
            limits,
            split_k=split,
            swap_ab=split and params.swap_ab,
            atomic=split and not params.deterministic,
        )
    d = default_config(item.kind, item.engine)
    if d not in space and item_legality(item, d, limits) is None:
        space.append(d)  # the engine default is always a candidate, even where "wasteful"
    if not space:
        raise ConfigError(f"{item.key()}: no legal config on {limits.name or 'this GPU'}")
    return space


def run_strategy(
    item: WorkItem,
    space: list[KernelConfig],
    memo: Memo,
    params: TuneParams,
    seeds: Sequence[KernelConfig],
) -> SearchResult:
    """The search of `space` with the strategy `params` names (an engine release's kernel at
    small M: exhaustive under the budgeted strategy, TuneParams.engine_exhaustive_max_m)."""
    if params.strategy == "exhaustive" or (
        item.engine and params.strategy == "budgeted" and item.m <= params.engine_exhaustive_max_m
    ):
        return exhaustive.search(space, memo)
    if params.strategy == "budgeted":
        budget = budgeted.default_budget(
            len(space),
            fraction=params.budget_fraction,
            min_evals=params.min_evals,
            max_evals=params.max_evals,
        )
        return budgeted.search(
            space,
            memo,
            budget=budget,
            # a deterministic search seeds with the ordered form of atomic neighbours' winners
            seeds=[s.with_(ATOMIC_REDUCE=0) for s in seeds] if params.deterministic else seeds,
            seed=_stable_seed(item.key(), params.seed),
        )
    raise ConfigError(
        f"unknown strategy {params.strategy!r}; valid: exhaustive, budgeted",
        field="--strategy",
    )


def refine_own_fp8(
    item: WorkItem,
    engine_best: KernelConfig,
    memo: Memo,
    limits: DeviceLimits,
    params: TuneParams,
) -> SearchResult | None:
    """For our own FP8 files: the split-K (and SWAP_AB, FOLD_SCALES, TMA) climb from the engine
    winner, or None where that space holds no such form."""
    sk_space = build_space(
        "fp8",
        item.m,
        item.n,
        item.k,
        limits,
        split_k=True,
        swap_ab=params.swap_ab,
        fold=params.fold_scales,
        tma=params.tma,
    )
    swap_starts = budgeted.swap_starts(sk_space, engine_best)
    if not (any(c.SPLIT_K > 1 or c.FOLD_SCALES or c.TMA for c in sk_space) or swap_starts):
        return None
    # From the engine winner's form in this space: the default's G32 is a duplicate
    # order `waste` dropped, and none of its own-file forms would be in the space.
    return budgeted.refine_split_k(
        sk_space,
        memo,
        canonical_group(engine_best, item.m),
        budget=params.split_k_budget + (params.swap_budget if swap_starts else 0),
        swap_starts=swap_starts,
    )


def _stable_seed(key: str, base: int) -> int:
    return (int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) + base) % 2**31
