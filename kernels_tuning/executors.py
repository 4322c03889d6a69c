"""Executors of a tuning run: in-process for one GPU (no Ray), or Ray with one actor per GPU
pulling items from the driver's queue (ray is imported only then; `pip install autotune[ray]`).
Only the driver (kernels_tuning.result_cache.Driver) writes the cache; each item is seeded when
it is handed out (kernels_tuning.item_search.choose_seeds).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from autotune.errors import ConfigError
from kernels_tuning.item_search import TuneParams, choose_seeds, tune_item
from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.objectives import ObjectiveFactory
from kernels_tuning.resources import DeviceLimits
from kernels_tuning.result_cache import Driver, eval_record
from kernels_tuning.strategies import Trial
from kernels_tuning.work_items import ItemResult, WorkItem


def run_in_process(
    items: Sequence[WorkItem],
    driver: Driver,
    factory: ObjectiveFactory,
    limits: DeviceLimits,
    params: TuneParams,
    deadline: float | None,
) -> list[WorkItem]:
    skipped = []
    for item in items:
        if item.key() in driver.done:
            continue
        if deadline is not None and time.monotonic() > deadline:
            skipped.append(item)
            continue
        objective = factory(item)

        def on_eval(trial: Trial, item: WorkItem = item) -> None:
            driver.cache.append(eval_record(item, trial))

        res = tune_item(
            item,
            objective,
            limits,
            params=params,
            seeds=choose_seeds(item, driver.done),
            known=driver.evals.get(item.key()),
            on_eval=on_eval,
        )
        driver.finish(res)
    return skipped


def _ray_worker_class() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ConfigError(
            "the Ray executor needs ray: pip install 'autotune[ray]'", field="--executor"
        ) from exc

    @ray.remote
    class TuneWorker:
        """One per GPU: builds objectives on its own device and tunes the items it is given."""

        def __init__(
            self, factory: ObjectiveFactory, limits: DeviceLimits, params: TuneParams
        ) -> None:
            self.factory = factory
            self.limits = limits
            self.params = params

        def tune(
            self,
            item_d: dict[str, Any],
            seeds: list[dict[str, int]],
            known: list[tuple[dict[str, int], float]],
        ) -> dict[str, Any]:
            item = WorkItem.from_dict(item_d)
            records: list[dict[str, Any]] = []
            res = tune_item(
                item,
                self.factory(item),
                self.limits,
                params=self.params,
                seeds=[KernelConfig.from_dict(s) for s in seeds],
                known={KernelConfig.from_dict(c): v for c, v in known},
                on_eval=lambda t: records.append(eval_record(item, t)),
            )
            return {"evals": records, "item": res.to_record()}

    return TuneWorker


def run_ray(
    items: Sequence[WorkItem],
    driver: Driver,
    factory: ObjectiveFactory,
    limits: DeviceLimits,
    params: TuneParams,
    deadline: float | None,
    *,
    num_workers: int | None = None,
    gpus_per_worker: float = 1.0,
) -> list[WorkItem]:
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    if num_workers is None:
        gpus = ray.cluster_resources().get("GPU", 0)  # type: ignore[no-untyped-call]
        num_workers = int(gpus // max(gpus_per_worker, 1e-9))
    if num_workers < 1:
        raise ConfigError(
            "Ray sees no GPU; pass --workers or use --executor local", field="--executor"
        )
    worker_cls = _ray_worker_class()
    actors = [
        worker_cls.options(num_gpus=gpus_per_worker).remote(factory, limits, params)
        for _ in range(num_workers)
    ]
    queue = deque(i for i in items if i.key() not in driver.done)
    idle = list(actors)
    inflight: dict[Any, tuple[Any, WorkItem]] = {}
    skipped: list[WorkItem] = []
    try:
        while queue or inflight:
            while queue and idle:
                item = queue.popleft()
                if deadline is not None and time.monotonic() > deadline:
                    skipped.append(item)
                    continue
                actor = idle.pop()
                seeds = [c.as_dict() for c in choose_seeds(item, driver.done)]
                known = [(c.as_dict(), v) for c, v in driver.evals.get(item.key(), {}).items()]
                ref = actor.tune.remote(item.to_dict(), seeds, known)
                inflight[ref] = (actor, item)
            if not inflight:
                break
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                actor, item = inflight.pop(ref)
                idle.append(actor)
                out = ray.get(ref)
                for rec in out["evals"]:
                    driver.cache.append(rec)
                driver.finish(ItemResult.from_record(out["item"]))
    finally:
        for a in actors:
            ray.kill(a)
    return skipped
