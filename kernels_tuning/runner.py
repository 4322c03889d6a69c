"""The tuning run: a queue of (shape, M) work items, executors, a resumable result cache, and
the merged, atomically written outputs.

- Work items are processed shape by shape in increasing M, and each one is seeded with the
  winners of the nearest batch sizes already done for its shape and of other shapes at the same
  M (the driver picks seeds when it hands an item out, so this also works with several GPUs).
- The result cache is an append-only JSONL file: one line per evaluated config ("eval") and one
  per finished item ("item"); a "retune" line makes the items it names count as never tuned
  (`ResultCache.mark_retune`). A killed run resumes: finished items are skipped, and the
  evaluations of an unfinished one are reused without re-timing. Only the driver writes it, so
  several GPUs cannot race on it (the engines' tuners lost results to exactly that race).
- Executors: in-process for one GPU (no Ray), or Ray with one actor per GPU pulling items from
  the driver's queue (ray is imported only then; `pip install autotune[ray]`).
- Outputs are rebuilt from the results, merged with existing files and written atomically
  (kernels_tuning.output).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from autotune.errors import ConfigError
from kernels_tuning.space import (
    DEFAULT_INT4,
    SGLANG_DEFAULT_FP8,
    DeviceLimits,
    KernelConfig,
    KernelKind,
    build_space,
    canonical_group,
    legality,
)
from kernels_tuning.strategies import Memo, Objective, Trial, budgeted, exhaustive

Log = Callable[[str], None]


@dataclass(frozen=True)
class WorkItem:
    kind: KernelKind
    n: int
    k: int
    m: int
    label: str = ""
    packing: str = "awq"  # int4 only
    # "sglang==0.5.23": timed on that release's own kernel (kernels_tuning.engine_kernel),
    # searched in its space (kernels_tuning.engine_space); "": our own kernels.
    engine: str = ""

    def key(self) -> str:
        extra = f",packing={self.packing}" if self.kind == "int4" else ""
        if self.engine:
            extra += f",engine={self.engine}"
        return f"{self.kind}:N={self.n},K={self.k},M={self.m}{extra}"

    @property
    def shape_key(self) -> tuple[str, int, int, str]:
        tag = self.packing if self.kind == "int4" else ""
        return (self.kind, self.n, self.k, f"{tag}{self.engine}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "n": self.n,
            "k": self.k,
            "m": self.m,
            "label": self.label,
            "packing": self.packing,
            **({"engine": self.engine} if self.engine else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkItem:
        return cls(
            d["kind"],
            int(d["n"]),
            int(d["k"]),
            int(d["m"]),
            str(d.get("label", "")),
            str(d.get("packing", "awq")),
            str(d.get("engine", "")),
        )


def make_items(
    kind: KernelKind,
    shapes: Iterable[Any],
    batch_sizes: Iterable[int],
    packing: str = "awq",
    engine: str = "",
) -> list[WorkItem]:
    """Shape-major, M ascending (neighbouring M seeds the next)."""
    ms = sorted(set(batch_sizes))
    return [WorkItem(kind, s.n, s.k, m, s.label, packing, engine) for s in shapes for m in ms]


@dataclass
class ItemResult:
    item: WorkItem
    best: KernelConfig | None  # for our own files (FP8: SPLIT_K allowed)
    best_us: float
    engine_best: KernelConfig | None  # SPLIT_K=1 (the engine files); INT4: same as best
    engine_best_us: float
    evaluations: int
    space_size: int
    wall_s: float
    phases: dict[str, int] = field(default_factory=dict)
    default_us: float | None = None  # the engine default config, when the search timed it

    def to_record(self) -> dict[str, Any]:
        def cfg(c: KernelConfig | None) -> dict[str, int] | None:
            return c.as_dict() if c is not None else None

        return {
            "t": "item",
            "item": self.item.to_dict(),
            "best": cfg(self.best),
            "best_us": _num(self.best_us),
            "engine_best": cfg(self.engine_best),
            "engine_best_us": _num(self.engine_best_us),
            "evaluations": self.evaluations,
            "space_size": self.space_size,
            "wall_s": round(self.wall_s, 3),
            "phases": self.phases,
            "default_us": self.default_us,
        }

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> ItemResult:
        def cfg(d: Any) -> KernelConfig | None:
            return KernelConfig.from_dict(d) if d else None

        return cls(
            WorkItem.from_dict(r["item"]),
            cfg(r.get("best")),
            _inf(r.get("best_us")),
            cfg(r.get("engine_best")),
            _inf(r.get("engine_best_us")),
            int(r.get("evaluations", 0)),
            int(r.get("space_size", 0)),
            float(r.get("wall_s", 0.0)),
            dict(r.get("phases", {})),
            r.get("default_us"),
        )


def _num(x: float) -> float | None:
    return None if not math.isfinite(x) else round(x, 4)


def _inf(x: Any) -> float:
    return math.inf if x is None else float(x)


class ResultCache:
    """Append-only JSONL of evaluations and finished items (module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, record: Mapping[str, Any], *, sync: bool = False) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
            f.flush()
            if sync:
                os.fsync(f.fileno())

    def load(self) -> tuple[dict[str, dict[KernelConfig, float]], dict[str, ItemResult]]:
        """(evaluations by item key, finished results by item key). A torn last line (killed
        mid-write) is skipped."""
        evals: dict[str, dict[KernelConfig, float]] = {}
        done: dict[str, ItemResult] = {}
        for lineno, r in self._records():
            try:
                if r.get("t") == "eval":
                    cfg = KernelConfig.from_dict(r["cfg"])
                    evals.setdefault(r["item"], {})[cfg] = (
                        _inf(r.get("us")) if r.get("ok") else math.inf
                    )
                elif r.get("t") == "item":
                    res = ItemResult.from_record(r)
                    done[res.item.key()] = res
                elif r.get("t") == "retune":
                    # Forget what came before for these items: they are searched afresh (a
                    # changed space or kernel); records after this line count again.
                    for key in r["items"]:
                        evals.pop(str(key), None)
                        done.pop(str(key), None)
            except (KeyError, TypeError, ValueError, ConfigError) as exc:
                raise ConfigError(
                    f"line {lineno}: malformed record ({exc})", source=str(self.path)
                ) from None
        return evals, done

    def _records(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line number, record) of each line; a torn last line (killed mid-write) is skipped
        and that evaluation simply redone."""
        if not self.path.exists():
            return
        for lineno, line in enumerate(self.path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError:
                continue

    def superseded(self) -> dict[str, list[ItemResult]]:
        """Per item, the finished results that retune records set aside, oldest first (what was
        shipped before each re-tune; also what an interrupted re-tune had finished when it was
        marked again): `polish(prior=...)` times them against the new winners, so a re-tune
        whose search missed a config found earlier keeps the faster one."""
        done: dict[str, ItemResult] = {}
        out: dict[str, list[ItemResult]] = {}
        for _, r in self._records():
            if r.get("t") == "item":
                res = ItemResult.from_record(r)
                done[res.item.key()] = res
            elif r.get("t") == "retune":
                for key in r["items"]:
                    if str(key) in done:
                        out.setdefault(str(key), []).append(done.pop(str(key)))
        return out

    def mark_retune(self, items: Iterable[WorkItem]) -> int:
        """Append a record that makes `load` forget the earlier evaluations and results of
        `items`, so the next run searches them again (e.g. after the space gained SWAP_AB).
        Returns how many items were marked."""
        keys = sorted({i.key() for i in items})
        if keys:
            self.append({"t": "retune", "items": keys}, sync=True)
        return len(keys)


class ObjectiveFactory(Protocol):
    def __call__(self, item: WorkItem) -> Objective: ...


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
    memo = Memo(objective, known=known, on_eval=on_eval)
    if params.strategy == "exhaustive" or (
        item.engine and params.strategy == "budgeted" and item.m <= params.engine_exhaustive_max_m
    ):
        res = exhaustive.search(space, memo)
    elif params.strategy == "budgeted":
        budget = budgeted.default_budget(
            len(space),
            fraction=params.budget_fraction,
            min_evals=params.min_evals,
            max_evals=params.max_evals,
        )
        res = budgeted.search(
            space,
            memo,
            budget=budget,
            # a deterministic search seeds with the ordered form of atomic neighbours' winners
            seeds=[s.with_(ATOMIC_REDUCE=0) for s in seeds] if params.deterministic else seeds,
            seed=_stable_seed(item.key(), params.seed),
        )
    else:
        raise ConfigError(
            f"unknown strategy {params.strategy!r}; valid: exhaustive, budgeted",
            field="--strategy",
        )
    engine_best, engine_cost = res.best, res.best_cost
    best, cost = engine_best, engine_cost
    phases = dict(res.phases)
    if item.kind == "fp8" and not item.engine and params.split_k_fp8 and engine_best is not None:
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
        if any(c.SPLIT_K > 1 or c.FOLD_SCALES or c.TMA for c in sk_space) or swap_starts:
            # From the engine winner's form in this space: the default's G32 is a duplicate
            # order `waste` dropped, and none of its own-file forms would be in the space.
            r2 = budgeted.refine_split_k(
                sk_space,
                memo,
                canonical_group(engine_best, item.m),
                budget=params.split_k_budget + (params.swap_budget if swap_starts else 0),
                swap_starts=swap_starts,
            )
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


def _stable_seed(key: str, base: int) -> int:
    return (int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) + base) % 2**31


def eval_record(item: WorkItem, trial: Trial) -> dict[str, Any]:
    r = trial.result
    rec: dict[str, Any] = {
        "t": "eval",
        "item": item.key(),
        "cfg": trial.config.as_dict(),
        "us": _num(trial.cost),
        "ok": math.isfinite(trial.cost),
        "phase": trial.phase,
    }
    for attr in ("error", "rel_err", "early", "launch_s", "wall_s"):
        v = getattr(r, attr, None)
        if v not in (None, False):
            rec[attr] = round(v, 6) if isinstance(v, float) else v
    return rec


@dataclass
class TuneSummary:
    results: dict[str, ItemResult]
    wall_s: float
    evaluations: int
    skipped: list[WorkItem]
    files: list[Path] = field(default_factory=list)


class _Driver:
    """Owns the cache and the finished results; hands out seeds."""

    def __init__(self, cache: ResultCache, log: Log) -> None:
        self.cache = cache
        self.log = log
        self.evals, self.done = cache.load()

    def finish(self, res: ItemResult) -> None:
        self.done[res.item.key()] = res
        self.cache.append(res.to_record(), sync=True)
        self.log(
            f"{res.item.key():48s} best {res.best_us:9.2f} us {res.best.key() if res.best else '-'}"
            f"  evals {res.evaluations}/{res.space_size}  {res.wall_s:.1f}s"
        )


def run_in_process(
    items: Sequence[WorkItem],
    driver: _Driver,
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
    driver: _Driver,
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
    driver = _Driver(ResultCache(cache_path), log)
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
        from kernels_tuning.output import current_device_name

        dev = device_name or current_device_name()
        summary.files = write_outputs(results.values(), Path(out_dir), dev, provenance)
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
    if polish_pass:
        left = None if deadline_s is None else max(0.0, deadline_s - (time.monotonic() - t0))
        pol = polish(
            items,
            cache_path=cache_path,
            limits=limits,
            objective_factory=objective_factory,
            deadline_s=left,
            log=log,
            prior=cache.superseded() if retune else None,
            deterministic=params is not None and params.deterministic,
        )
        if pol.skipped and log is not None:
            log(f"cross-check: {len(pol.skipped)} items left for lack of time")
    _, done = cache.load()
    if params is not None and params.deterministic:
        # Winners of an earlier run (a resumed cache) may sum their splits atomically; a
        # deterministic run ships the same configs with the ordered sum.
        done = {key: _ordered(r) for key, r in done.items()}
    summary.results = {i.key(): done[i.key()] for i in items if i.key() in done}
    summary.evaluations = sum(r.evaluations for r in summary.results.values())
    summary.wall_s = time.monotonic() - t0
    if summary.results:
        from kernels_tuning.output import current_device_name

        dev = device_name or current_device_name()
        summary.files = write_outputs(summary.results.values(), Path(out_dir), dev, provenance)
    return summary


# An entry on an engine release's kernel must beat the release's default by 3% in the
# cross-check's best-of-two timings, or the file holds the default itself: on an H200 one config
# timed twice in one run differed by up to 5% on kernels of a millisecond or more (the GPU's
# clocks under sustained load), where tuned configs gain a few percent at most; at decode sizes
# the gains are 1.2-4x, far above the margin.
ENGINE_MARGIN = 0.97


def reconfirm_engine_defaults(cache_path: Path, margin: float = ENGINE_MARGIN) -> list[str]:
    """Apply the default rule (ENGINE_MARGIN) again to the finished engine items of a cache,
    from the cross-check timings it recorded (no new timing): where the winner's best polish
    time is not below `margin` x the default's, an updated item record ships the default.
    Returns the keys changed."""
    cache = ResultCache(cache_path)
    _, done = cache.load()
    polish: dict[str, dict[KernelConfig, float]] = {}
    for _, r in cache._records():
        if r.get("t") == "eval" and r.get("phase") == "polish" and r.get("ok"):
            cfg = KernelConfig.from_dict(r["cfg"])
            best = polish.setdefault(r["item"], {})
            best[cfg] = min(best.get(cfg, math.inf), _inf(r.get("us")))
    changed = []
    for key, res in done.items():
        if not res.item.engine or res.engine_best is None:
            continue
        default = default_config(res.item.kind, res.item.engine)
        times = polish.get(key, {})
        win, dflt = times.get(res.engine_best), times.get(default)
        if res.engine_best == default or win is None or dflt is None or win < margin * dflt:
            continue
        updated = replace(
            res, best=default, best_us=dflt, engine_best=default, engine_best_us=dflt
        )
        cache.append(updated.to_record(), sync=True)
        changed.append(key)
    return changed


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
    driver = _Driver(ResultCache(cache_path), log)
    by_shape: dict[tuple[str, int, int, str], list[ItemResult]] = {}
    for r in driver.done.values():
        by_shape.setdefault(r.item.shape_key, []).append(r)
    for rs in by_shape.values():
        rs.sort(key=lambda r: r.item.m)
    skipped: list[WorkItem] = []
    touched: dict[str, ItemResult] = {}
    for item in items:
        res = driver.done.get(item.key())
        if res is None or res.best is None:
            continue
        if deadline_s is not None and time.monotonic() - t0 > deadline_s:
            skipped.append(item)
            continue
        rs = by_shape[item.shape_key]
        i = next(j for j, r in enumerate(rs) if r.item.m == item.m)
        pool: list[KernelConfig] = []
        cands: list[KernelConfig | None] = []
        for r in [res, *rs[max(0, i - 1) : i], *rs[i + 1 : i + 2]]:
            cands += [r.engine_best, r.best]
        default = default_config(item.kind, item.engine)
        if item.engine:  # confirmed side by side against the release's own default
            cands.append(default)
        for before in (prior or {}).get(item.key(), ()):
            olds = [c for c in (before.engine_best, before.best) if c is not None]
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
        # (one candidate is enough when it is the ordered form of an atomic winner: it has no
        # time of its own yet)
        if len(pool) < 2 and not (deterministic and res.best.ATOMIC_REDUCE):
            continue
        t_item = time.perf_counter()
        objective = factory(item)
        record = _recorder(driver.cache, item)
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
        updated = ItemResult(
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
        driver.finish(updated)
        touched[item.key()] = updated
    return TuneSummary(
        touched,
        time.monotonic() - t0,
        sum(r.phases.get("polish", 0) for r in touched.values()),
        skipped,
    )


def write_outputs(
    results: Iterable[ItemResult],
    out_dir: Path,
    device_name: str,
    provenance: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Group results by (kind, N, K) and merge-write the engine and our own files."""
    from kernels_tuning import output as O

    groups: dict[tuple[str, int, int, str], list[ItemResult]] = {}
    engine_groups: dict[tuple[str, int, int], list[ItemResult]] = {}
    for r in results:
        if r.best is not None and r.item.engine:
            engine_groups.setdefault((r.item.engine, r.item.n, r.item.k), []).append(r)
        elif r.best is not None:
            groups.setdefault(r.item.shape_key, []).append(r)
    written: list[Path] = [
        write_engine_file(rs, out_dir, device_name, provenance)
        for _key, rs in sorted(engine_groups.items())
    ]
    for (kind, n, k, packing), rs in sorted(groups.items()):
        rs.sort(key=lambda r: r.item.m)
        base = dict(provenance) if provenance is not None else O.current_provenance(kind).to_json()
        base["kernel"] = kind
        base["kernel_sha256"] = O.kernel_source_sha256(kind)

        def prov(entries: dict[str, dict[str, Any]], base: dict[str, Any] = base) -> O.Provenance:
            p = O.Provenance.from_json(base)
            p.entries = entries
            return p

        own_entries = _entries(rs, engine=False)
        if kind == "fp8":
            eng = {
                r.item.m: r.engine_best.as_dict(engine=True)
                for r in rs
                if r.engine_best is not None
            }
            eng_entries = _entries(rs, engine=True)
            for sub, name in (
                ("sglang", O.sglang_filename(n, k, device_name)),
                ("vllm", O.vllm_filename(n, k, device_name)),
            ):
                path = out_dir / sub / name
                O.merge_write(path, eng)
                O.write_provenance(path, prov(eng_entries))
                written.append(path)
            own = out_dir / "autotune" / O.fp8_splitk_filename(n, k, device_name)
        else:
            own = out_dir / "autotune" / O.int4_filename(n, k, device_name, 128, packing)
        O.merge_write(own, {r.item.m: r.best.as_dict() for r in rs if r.best is not None})
        O.write_provenance(own, prov(own_entries))
        written.append(own)
    return written


def _entries(rs: Iterable[ItemResult], *, engine: bool) -> dict[str, dict[str, Any]]:
    """The sidecar's per-M figures of one file: the engine winner's (`engine`) or our own."""
    return {
        str(r.item.m): {
            "us": _num(r.engine_best_us if engine else r.best_us),
            "evaluations": r.evaluations,
            "space": r.space_size,
            "default_us": r.default_us,
        }
        for r in rs
        if not engine or r.engine_best is not None
    }


def write_engine_file(
    rs: list[ItemResult],
    out_dir: Path,
    device_name: str,
    provenance: Mapping[str, Any] | None = None,
) -> Path:
    """One shape's results on an engine release's own kernel: the file that release reads, named
    and keyed as it reads it (only the keys it honours on this architecture), under
    OUT/ENGINE/VERSION/, with a sidecar naming the release and its kernel fingerprint."""
    from kernels_tuning import output as O
    from kernels_tuning.engine_kernel import honoured_config
    from kernels_tuning.engine_space import EngineTarget

    rs = sorted(rs, key=lambda r: r.item.m)
    target = EngineTarget.parse(rs[0].item.engine)
    facts = target.facts()
    base = dict(provenance) if provenance is not None else O.current_provenance("fp8").to_json()
    arch = str(base.get("arch") or "")
    base.update(
        kernel="fp8",
        kernel_sha256="",
        engine=facts.engine,
        engine_version=facts.version,
        engine_kernel_fingerprint=facts.kernel_fingerprint,
    )
    prov = O.Provenance.from_json(base)
    prov.entries = _entries(rs, engine=True)
    table = {
        r.item.m: honoured_config(r.engine_best.as_dict(), facts, arch)
        for r in rs
        if r.engine_best is not None
    }
    path = out_dir / facts.engine / facts.version
    path = path / facts.file_name_for(rs[0].item.n, rs[0].item.k, device_name)
    O.merge_write(path, table)
    O.write_provenance(path, prov)
    return path


class GpuObjectiveFactory:
    """Builds the GPU benchmark for an item (kernels_tuning.bench), on our kernel or on an
    engine release's own (loaded once per process)."""

    def __init__(self, *, reject_ratio: float = 1.5) -> None:
        self.reject_ratio = reject_ratio
        self._engines: dict[str, Any] = {}

    def __call__(self, item: WorkItem) -> Objective:
        from kernels_tuning import bench

        engine = None
        arch = ""
        if item.engine:
            from kernels_tuning.engine_kernel import load_engine_kernel
            from kernels_tuning.engine_space import EngineTarget
            from kernels_tuning.space import DeviceLimits

            if item.engine not in self._engines:
                t = EngineTarget.parse(item.engine)
                self._engines[item.engine] = load_engine_kernel(t.engine, t.version)
            engine = self._engines[item.engine]
            arch = DeviceLimits.from_torch().arch
        problem = bench.make_problem(
            item.kind,
            item.m,
            item.n,
            item.k,
            packing=item.packing,
            engine=engine,
            engine_arch=arch,
        )
        # No early rejection on an engine's launcher: its eager estimate is mostly the Python
        # launcher's own CPU time (torch allocations, asserts, the config lookup), up to 250 us
        # on an H200 host against a 70 us kernel, so it rejected fast configs with inflated
        # figures (engine-kernel call 2); SGLang replays these GEMMs in CUDA graphs, as timed.
        ratio = None if item.engine else self.reject_ratio
        return bench.Evaluator(problem, reject_ratio=ratio)
