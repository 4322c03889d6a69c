"""The tuning run: a queue of (shape, M) work items, executors, a resumable result cache, and
the merged, atomically written outputs. `tune` searches, `polish` cross-checks, and
`tune_and_polish` (what `autotune kernels tune` runs) does both and writes the files.

- Work items are processed shape by shape in increasing M, and each one is seeded with the
  winners of the nearest batch sizes already done for its shape and of other shapes at the same
  M (kernels_tuning.item_search, which also holds the search of one item).
- The result cache is an append-only JSONL file that a killed run resumes from
  (kernels_tuning.result_cache); only the driver writes it.
- Executors: in-process for one GPU (no Ray), or Ray with one actor per GPU pulling items from
  the driver's queue (kernels_tuning.executors).
- The cross-check (kernels_tuning.polish) and the engine-default margin
  (kernels_tuning.engine_defaults).
- Outputs are rebuilt from the results, merged with existing files and written atomically
  (kernels_tuning.result_files, kernels_tuning.output).

The names of those modules that callers use are importable from here too.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from kernels_tuning.engine_defaults import ENGINE_MARGIN, reconfirm_engine_defaults
from kernels_tuning.executors import run_in_process, run_ray
from kernels_tuning.item_search import (
    TuneParams,
    choose_seeds,
    default_config,
    item_legality,
    tune_item,
)
from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.objectives import GpuObjectiveFactory, ObjectiveFactory
from kernels_tuning.polish import polish
from kernels_tuning.resources import DeviceLimits
from kernels_tuning.result_cache import Driver, Log, ResultCache, eval_record
from kernels_tuning.result_files import write_engine_file, write_outputs
from kernels_tuning.work_items import ItemResult, TuneSummary, WorkItem, make_items

__all__ = [
    "ENGINE_MARGIN",
    "GpuObjectiveFactory",
    "ItemResult",
    "Log",
    "ObjectiveFactory",
    "ResultCache",
    "TuneParams",
    "TuneSummary",
    "WorkItem",
    "choose_seeds",
    "default_config",
    "eval_record",
    "item_legality",
    "make_items",
    "polish",
    "reconfirm_engine_defaults",
    "tune",
    "tune_and_polish",
    "tune_item",
    "write_engine_file",
    "write_outputs",
]


def tune(
    items: Sequence[WorkItem],
    *,
    cache_path: Path,
    limits: DeviceLimits,
    objective_factory: ObjectiveFactory | None = None,
    params: TuneParams | None = None,
    executor: str = "local",
    num_workers: int | None = None,
    gpus_per_worker: float = 1.0,
    out_dir: Path | None = None,
    device_name: str | None = None,
    provenance: Mapping[str, Any] | None = None,
    deadline_s: float | None = None,
    log: Log | None = None,
) -> TuneSummary:
    """Tune every item (resuming from `cache_path`) and, with `out_dir`, write the files.

    `objective_factory(item)` returns the config -> measurement callable; the default builds
    the GPU benchmark (kernels_tuning.bench). `provenance` holds the machine facts for the
    sidecars (default: read from the local GPU). `deadline_s` stops handing out new items after
    that many seconds; they are returned in `skipped`.
    """
    params = params or TuneParams()
    log = log or (lambda s: None)
    factory = objective_factory or GpuObjectiveFactory()
    t0 = time.monotonic()
    deadline = t0 + deadline_s if deadline_s is not None else None
    driver = Driver(ResultCache(cache_path), log)
    if executor == "local":
        skipped = run_in_process(items, driver, factory, limits, params, deadline)
    elif executor == "ray":
        skipped = run_ray(
            items,
            driver,
            factory,
            limits,
            params,
            deadline,
            num_workers=num_workers,
            gpus_per_worker=gpus_per_worker,
        )
    else:
        raise ConfigError(f"unknown executor {executor!r}; valid: local, ray", field="--executor")
    wanted = {i.key() for i in items}
    results = {k: v for k, v in driver.done.items() if k in wanted}
    summary = TuneSummary(
        results, time.monotonic() - t0, sum(r.evaluations for r in results.values()), skipped
    )
    if out_dir is not None and results:
        summary.files = _write_files(results, out_dir, device_name, provenance)
    return summary


def tune_and_polish(
    items: Sequence[WorkItem],
    *,
    cache_path: Path,
    limits: DeviceLimits,
    out_dir: Path,
    retune: bool = False,
    polish_pass: bool = True,
    objective_factory: ObjectiveFactory | None = None,
    params: TuneParams | None = None,
    executor: str = "local",
    num_workers: int | None = None,
    device_name: str | None = None,
    provenance: Mapping[str, Any] | None = None,
    deadline_s: float | None = None,
    log: Log | None = None,
    search_share: float = 1.0,
) -> TuneSummary:
    """What `autotune kernels tune` runs: the search (`tune`), then the cross-check (`polish`,
    two timings per config), then the files from every finished item.

    `retune` first appends a retune record for `items` (they are searched again although the
    cache has them: after a kernel or space change), and the cross-check then also times each
    item's winners from before (`ResultCache.superseded`), so a re-tune whose search missed an
    earlier winner keeps the faster of the two. The search stops handing out items after
    `search_share` of `deadline_s`; the cross-check gets what is left."""
    t0 = time.monotonic()
    cache = ResultCache(cache_path)
    if retune:
        cache.mark_retune(items)
    summary = tune(
        items,
        cache_path=cache_path,
        limits=limits,
        objective_factory=objective_factory,
        params=params,
        executor=executor,
        num_workers=num_workers,
        out_dir=None,
        deadline_s=None if deadline_s is None else deadline_s * search_share,
        log=log,
    )
    deterministic = params is not None and params.deterministic
    if polish_pass:
        left = None if deadline_s is None else max(0.0, deadline_s - (time.monotonic() - t0))
        _polish_pass(items, cache, limits, objective_factory, left, log, retune, deterministic)
    summary.results = _shipped(items, cache, deterministic=deterministic)
    summary.evaluations = sum(r.evaluations for r in summary.results.values())
    summary.wall_s = time.monotonic() - t0
    if summary.results:
        summary.files = _write_files(summary.results, out_dir, device_name, provenance)
    return summary


def _polish_pass(
    items: Sequence[WorkItem],
    cache: ResultCache,
    limits: DeviceLimits,
    objective_factory: ObjectiveFactory | None,
    deadline_s: float | None,
    log: Log | None,
    retune: bool,
    deterministic: bool,
) -> None:
    """tune_and_polish's cross-check: after a re-tune, with the items' earlier winners too."""
    pol = polish(
        items,
        cache_path=cache.path,
        limits=limits,
        objective_factory=objective_factory,
        deadline_s=deadline_s,
        log=log,
        prior=cache.superseded() if retune else None,
        deterministic=deterministic,
    )
    if pol.skipped and log is not None:
        log(f"cross-check: {len(pol.skipped)} items left for lack of time")


def _write_files(
    results: Mapping[str, ItemResult],
    out_dir: Path,
    device_name: str | None,
    provenance: Mapping[str, Any] | None,
) -> list[Path]:
    """The files of `results` under `out_dir` (device name: this GPU's by default)."""
    from kernels_tuning.output import current_device_name

    dev = device_name or current_device_name()
    return write_outputs(results.values(), Path(out_dir), dev, provenance)


def _shipped(
    items: Sequence[WorkItem], cache: ResultCache, *, deterministic: bool
) -> dict[str, ItemResult]:
    """The cache's finished results of `items`, as their files hold them."""
    _, done = cache.load()
    if deterministic:
        # Winners of an earlier run (a resumed cache) may sum their splits atomically; a
        # deterministic run ships the same configs with the ordered sum.
        done = {key: _ordered(r) for key, r in done.items()}
    return {i.key(): done[i.key()] for i in items if i.key() in done}


def _ordered(r: ItemResult) -> ItemResult:
    """`r` with ATOMIC_REDUCE=0 in its configs (kernels_tuning/space.py); a time measured with
    the atomic sum does not describe the ordered form, so it becomes unknown."""

    def strip(c: KernelConfig | None, us: float) -> tuple[KernelConfig | None, float]:
        return (
            (c.with_(ATOMIC_REDUCE=0), math.inf) if c is not None and c.ATOMIC_REDUCE else (c, us)
        )

    best, best_us = strip(r.best, r.best_us)
    engine_best, engine_best_us = strip(r.engine_best, r.engine_best_us)
    return replace(
        r, best=best, best_us=best_us, engine_best=engine_best, engine_best_us=engine_best_us
    )
