"""The cross-check after the search (`polish`): each finished item's winners timed side by side,
and freshly, against those of its neighbours in M (and, after a re-tune, its earlier winners);
the fastest is kept, and on an engine release's kernel the release's default unless the winner
clearly beats it (kernels_tuning.engine_defaults.ENGINE_MARGIN).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kernels_tuning.engine_defaults import ENGINE_MARGIN
from kernels_tuning.item_search import default_config, item_legality
from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.objectives import GpuObjectiveFactory, ObjectiveFactory
from kernels_tuning.resources import DeviceLimits
from kernels_tuning.result_cache import Driver, Log, ResultCache, eval_record
from kernels_tuning.strategies import Memo, Objective, Trial
from kernels_tuning.work_items import ItemResult, TuneSummary, WorkItem

ShapeKey = tuple[str, int, int, str]


def _recorder(cache: ResultCache, item: WorkItem) -> Callable[[Trial], None]:
    def record(trial: Trial) -> None:
        cache.append(eval_record(item, trial))

    return record


def polish(
    items: Sequence[WorkItem],
    *,
    cache_path: Path,
    limits: DeviceLimits,
    objective_factory: ObjectiveFactory | None = None,
    deadline_s: float | None = None,
    log: Log | None = None,
    prior: Mapping[str, Sequence[ItemResult]] | None = None,
    rounds: int = 2,
    deterministic: bool = False,
) -> TuneSummary:
    """Cross-check each finished item against its neighbours' winners, in one session.

    Items are searched in increasing M, so an item only ever saw the winner of the M below it
    (and M=1, the first, none of its own shape). This pass times, side by side and freshly, the
    item's winners and those of the next smaller and larger M of the same shape (legal ones),
    `rounds` times (each config's fastest time counts), and keeps the fastest: 2 to 6 configs
    per item. `prior` (ResultCache.superseded) adds
    each item's winners from before its last re-tune, and for FP8 their FOLD_SCALES=1 and TMA=1
    forms, for INT4 their ATOMIC_REDUCE=1 forms; with `deterministic` every ATOMIC_REDUCE
    candidate is timed in its ordered form instead.
    The updated result is appended to the cache (the latest record of an item wins when it is
    loaded).
    """
    log = log or (lambda s: None)
    factory = objective_factory or GpuObjectiveFactory()
    t0 = time.monotonic()
    driver = Driver(ResultCache(cache_path), log)
    by_shape = _by_shape(driver.done)
    skipped: list[WorkItem] = []
    touched: dict[str, ItemResult] = {}
    for item in items:
        res = driver.done.get(item.key())
        if res is None or res.best is None:
            continue
        if deadline_s is not None and time.monotonic() - t0 > deadline_s:
            skipped.append(item)
            continue
        before = (prior or {}).get(item.key(), ())
        pool = candidate_pool(item, res, by_shape[item.shape_key], before, limits, deterministic)
        # (one candidate is enough when it is the ordered form of an atomic winner: it has no
        # time of its own yet)
        if len(pool) < 2 and not (deterministic and res.best.ATOMIC_REDUCE):
            continue
        t_item = time.perf_counter()
        costs = time_pool(pool, factory(item), _recorder(driver.cache, item), rounds)
        updated = _polished(item, res, pool, costs, t_item)
        driver.finish(updated)
        touched[item.key()] = updated
    return TuneSummary(
        touched,
        time.monotonic() - t0,
        sum(r.phases.get("polish", 0) for r in touched.values()),
        skipped,
    )


def _by_shape(done: Mapping[str, ItemResult]) -> dict[ShapeKey, list[ItemResult]]:
    """Finished results per shape, in increasing M."""
    by_shape: dict[ShapeKey, list[ItemResult]] = {}
    for r in done.values():
        by_shape.setdefault(r.item.shape_key, []).append(r)
    for rs in by_shape.values():
        rs.sort(key=lambda r: r.item.m)
    return by_shape


def candidate_pool(
    item: WorkItem,
    res: ItemResult,
    rs: Sequence[ItemResult],
    before: Sequence[ItemResult],
    limits: DeviceLimits,
    deterministic: bool,
) -> list[KernelConfig]:
    """The legal configs the cross-check times for `item` (finished as `res`; `rs`: its shape's
    results in increasing M; `before`: its results set aside by re-tunes), without repeats."""
    i = next(j for j, r in enumerate(rs) if r.item.m == item.m)
    pool: list[KernelConfig] = []
    cands: list[KernelConfig | None] = []
    for r in [res, *rs[max(0, i - 1) : i], *rs[i + 1 : i + 2]]:
        cands += [r.engine_best, r.best]
    if item.engine:  # confirmed side by side against the release's own default
        cands.append(default_config(item.kind, item.engine))
    for earlier in before:
        olds = [c for c in (earlier.engine_best, earlier.best) if c is not None]
        cands += olds
        if item.kind == "fp8":
            cands += [c.with_(FOLD_SCALES=1) for c in olds]
            cands += [c.with_(FOLD_SCALES=f, TMA=1) for c in olds for f in (0, 1)]
        elif not deterministic:
            cands += [c.with_(ATOMIC_REDUCE=1) for c in olds if c.SPLIT_K > 1]
    if deterministic:  # atomic winners take part in their ordered form
        cands = [c.with_(ATOMIC_REDUCE=0) if c is not None else c for c in cands]
    for c in cands:
        if c is not None and c not in pool and item_legality(item, c, limits) is None:
            pool.append(c)
    return pool


def time_pool(
    pool: Sequence[KernelConfig],
    objective: Objective,
    record: Callable[[Trial], None],
    rounds: int,
) -> dict[KernelConfig, float]:
    """Each config's fastest time over `rounds` timings (each one recorded)."""
    memo = Memo(objective, on_eval=record)
    costs = {c: memo(c, "polish") for c in pool}
    for _ in range(rounds - 1):
        # Again in reverse order, keeping each config's faster time: one timing per config
        # let a momentary slowdown on a shared GPU pick the slower of two close configs.
        for c in reversed(pool):
            if math.isfinite(costs[c]):
                meas = objective(c)
                record(Trial(c, float(meas.cost), "polish", meas))
                costs[c] = min(costs[c], float(meas.cost))
    return costs


def _polished(
    item: WorkItem,
    res: ItemResult,
    pool: Sequence[KernelConfig],
    costs: Mapping[KernelConfig, float],
    t_item: float,
) -> ItemResult:
    """`item`'s result `res` with the cross-check's winners (`costs` of `pool`, timed since
    `t_item`)."""
    default = default_config(item.kind, item.engine)
    # (an engine release's own kernel: everything in its pool is engine-ok by construction)
    eng = [c for c in pool if c.engine_ok] if item.kind == "fp8" and not item.engine else pool
    new_eng = min(eng, key=lambda c: costs[c]) if eng else res.engine_best
    new_best = min(pool, key=lambda c: costs[c])
    if item.engine and default in costs and new_best != default:
        # An entry not clearly faster than the default (ENGINE_MARGIN) ships the default
        # itself: never slower than no file.
        if not costs[new_best] < ENGINE_MARGIN * costs[default]:
            new_best = new_eng = default
    phases = dict(res.phases)
    phases["polish"] = len(pool)
    return ItemResult(
        item,
        new_best,
        costs[new_best],
        new_eng,
        costs[new_eng] if new_eng is not None else math.inf,
        res.evaluations + sum(1 for c in pool if c not in (res.best, res.engine_best)),
        res.space_size,
        res.wall_s + time.perf_counter() - t_item,
        phases,
        res.default_us,
    )
