"""The H200 run behind the engine-kernel files: tune SGLang's own block-FP8 kernel of one or more
releases and time the result side by side in one process.

    python3 benchmarks/engine_kernels_gpu_run.py --out $OUT --versions 0.5.23 --budget-s 540

Per release (`--versions`, catalogued in autotune/data/kernel_facts.json): precompile the
release's kernel for the whole space in parallel, `kernels_tuning.runner.tune_and_polish` on
its own kernel (the default config confirmed side by side in the cross-check), then for the
items of `--compare-tps`: the tuned entry, the release's default, the entry the previous
shipped file (`--previous DIR`, tuned on autotune's mirror of the old kernel) holds for that
M, cuBLAS per-tensor FP8 (`torch._scaled_mm`) and bf16 `torch.matmul`, timed interleaved
(bench.time_graph: CUDA graphs, L2-cold input rotation), every kernel output gated first.

The release's kernel module comes from an installed engine or its wheel; a machine without a
registry reads it from $AUTOTUNE_ENGINE_KERNEL_CACHE/<engine>-<version>/ (copy it there from a
machine that has the wheel: `python -m kernels_tuning.engine_kernel ENGINE VERSION DIR`).

Writes under --out as it goes (a run stopped at its time limit still returns data): progress.log,
summary.json, configs.tar.gz (configs/ENGINE/VERSION/<file the release reads> + provenance
sidecars) and data.tar.gz (cache-<version>.jsonl: every evaluation; compare-<version>.jsonl);
the working files stay in --work.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

T0 = time.monotonic()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/engine-kernels-run"))
    ap.add_argument("--engine", default="sglang")
    ap.add_argument("--versions", default="0.5.23")
    ap.add_argument("--model", default="qwen3.8-27b-fp8")
    ap.add_argument("--tps", default="1,2")
    ap.add_argument("--compare-tps", default="1")
    ap.add_argument("--batch-sizes", default="")
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--reserve-compare-s", type=float, default=80.0)
    ap.add_argument("--max-evals", type=int, default=32)
    ap.add_argument("--compare-rounds", type=int, default=3)
    ap.add_argument("--previous", type=Path, default=Path("kernels_tuning/configs/sglang"))
    ap.add_argument("--phases", default="precompile,tune,compare")
    ap.add_argument(
        "--resume", type=Path, default=None, help="folder with earlier cache-<version>.jsonl"
    )
    args = ap.parse_args()

    from autotune.models import load_card
    from kernels_tuning import runner, shapes
    from kernels_tuning.compile import precompile_engine
    from kernels_tuning.engine_kernel import load_engine_kernel
    from kernels_tuning.engine_space import EngineTarget, engine_compile_set
    from kernels_tuning.space import DeviceLimits

    final: Path = args.out
    final.mkdir(parents=True, exist_ok=True)
    out: Path = args.work
    out.mkdir(parents=True, exist_ok=True)
    log_f = (final / "progress.log").open("a")

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - T0:6.0f}s] {msg}"
        print(line, flush=True)
        log_f.write(line + "\n")
        log_f.flush()

    def left() -> float:
        return args.budget_s - (time.monotonic() - T0)

    limits = DeviceLimits.from_torch()
    card = load_card(args.model)
    ms = shapes.parse_batch_sizes(args.batch_sizes) if args.batch_sizes else shapes.batch_sizes()
    tps = [int(t) for t in args.tps.split(",")]
    compare_tps = {int(t) for t in args.compare_tps.split(",") if t}
    phases = set(args.phases.split(","))
    versions = args.versions.split(",")
    summary: dict[str, Any] = {"gpu": limits.name, "arch": limits.arch, "releases": {}}
    for vi, version in enumerate(versions):
        target = EngineTarget(args.engine, version)
        share = left() / (len(versions) - vi)  # this release's share of what is left
        t_rel = time.monotonic()
        engine = load_engine_kernel(target.engine, target.version)
        log(f"{target.tag}: kernel from {engine.origin} ({engine.source_path})")
        by_tp = {t: shapes.gemm_shapes(card, t, "fp8") for t in tps}
        items = []
        for t in tps:
            items += runner.make_items("fp8", by_tp[t], ms, engine=target.tag)
        items = list({i.key(): i for i in items}.values())
        splits, swap = target.options(limits.arch)
        cache = out / f"cache-{version}.jsonl"
        earlier = args.resume / cache.name if args.resume else None
        if earlier is not None and earlier.is_file() and not cache.exists():
            shutil.copy(earlier, cache)
            log(f"{target.tag}: resuming from {earlier}")
        done = runner.ResultCache(cache).load()[1]
        todo = [i for i in items if i.key() not in done]
        if "precompile" in phases:
            by_shape = engine_compile_set(
                sorted({i.m for i in todo}),
                sorted({(i.n, i.k) for i in todo}),
                limits,
                split_k_values=splits,
                swap_ab=swap,
            )
            # what the confirmation times for items already done: their entry and the default
            for mnk, cfgs in _shipped_set(done.values(), target).items():
                by_shape.setdefault(mnk, []).extend(cfgs)
            rep = precompile_engine(target.tag, by_shape, arch=limits.arch)
            log(
                f"{target.tag}: precompiled {rep.compiled} binaries in {rep.wall_s:.0f}s "
                f"({rep.cpu_s:.0f} CPU-s), {len(rep.failed)} failed"
                + (f"; e.g. {next(iter(rep.failed.items()))}" if rep.failed else "")
            )
        tune_s = share - (time.monotonic() - t_rel) - args.reserve_compare_s / len(versions)
        if todo and "tune" in phases:
            summ = runner.tune_and_polish(
                todo,
                cache_path=cache,
                limits=limits,
                out_dir=out / "configs",
                params=runner.TuneParams(max_evals=args.max_evals),
                deadline_s=max(10.0, tune_s),
                log=log,
                search_share=0.8,
            )
            log(
                f"{target.tag}: {len(summ.results)}/{len(todo)} items, {summ.evaluations} evals,"
                f" {summ.wall_s:.0f}s, {len(summ.skipped)} skipped"
            )
        done = runner.ResultCache(cache).load()[1]
        results = [done[i.key()] for i in items if i.key() in done]
        rel: dict[str, Any] = {"items": len(items), "tuned": len(results)}
        if "compare" in phases:
            rows = _compare(
                [r for r in results if _tp_of(r.item, by_tp) in compare_tps],
                engine,
                limits.arch,
                args.previous,
                limits.name.replace(" ", "_"),
                out / f"compare-{version}.jsonl",
                rounds=args.compare_rounds,
                deadline=time.monotonic() + max(5.0, share - (time.monotonic() - t_rel)),
                log=log,
            )
            rel["goals"] = _goals(rows)
            log(f"{target.tag}: {json.dumps(rel['goals'])}")
            if "confirm" in phases:
                switched = _confirm(rows, done, runner.ResultCache(cache), target)
                rel["switched_to_default"] = switched
                log(f"{target.tag}: {len(switched)} entries confirmed slower: default shipped")
                done = runner.ResultCache(cache).load()[1]
                results = [done[i.key()] for i in items if i.key() in done]
                rel["goals_shipped"] = _goals(_as_shipped(rows, switched))
                log(f"{target.tag}: as shipped {json.dumps(rel['goals_shipped'])}")
        runner.write_outputs(results, out / "configs", limits.name.replace(" ", "_"))
        summary["releases"][version] = rel
        (final / "summary.json").write_text(json.dumps(summary, indent=1))
        _pack(out, final)
    log("done")


CONFIRM_RATIO = 0.98  # default / tuned below this in the confirmation: the default is shipped


def _shipped_set(results: Any, target: Any) -> dict[tuple[int, int, int], list[Any]]:
    """Each finished item's entry and the release's default, per compile representative."""
    from kernels_tuning.engine_space import m_class, specialization

    reps: dict[tuple[int, ...], tuple[int, int, int]] = {}
    out: dict[tuple[int, int, int], dict[Any, None]] = {}
    default = target.default_config()
    for r in results:
        it = r.item
        rep = reps.setdefault(specialization(it.m, it.n, it.k), (m_class(it.m), it.n, it.k))
        for cfg in (r.engine_best, default):
            if cfg is not None:
                out.setdefault(rep, {})[cfg] = None
    return {k: list(v) for k, v in out.items()}


def _confirm(
    rows: list[dict[str, Any]], done: dict[str, Any], cache: Any, target: Any
) -> list[dict[str, Any]]:
    """Entries the side-by-side confirmation found slower than the default (CONFIRM_RATIO)
    ship the default: an updated item record in the cache."""
    from dataclasses import replace

    from kernels_tuning.runner import WorkItem

    switched = []
    default = target.default_config()
    for row in rows:
        t = row["times_us"]
        key = WorkItem.from_dict(row["item"]).key()
        res = done.get(key)
        if res is None or res.engine_best == default or not t.get("tuned") or not t.get("default"):
            continue
        if t["default"] / t["tuned"] < CONFIRM_RATIO:
            upd = replace(res, best=default, engine_best=default, engine_best_us=t["default"])
            upd = replace(upd, best_us=t["default"])
            cache.append(upd.to_record(), sync=True)
            switched.append(row["item"])
    return switched


def _as_shipped(
    rows: list[dict[str, Any]], switched: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The confirmation rows with switched entries as the default they now are (one config,
    one binary: the same time)."""
    keys = {json.dumps(s, sort_keys=True) for s in switched}
    out = []
    for row in rows:
        if json.dumps(row["item"], sort_keys=True) in keys:
            row = {**row, "times_us": {**row["times_us"], "tuned": row["times_us"]["default"]}}
        out.append(row)
    return out


def _tp_of(item: Any, by_tp: dict[int, list[Any]]) -> int:
    for t, shs in by_tp.items():
        if any(s.n == item.n and s.k == item.k for s in shs):
            return t
    return 0


def _previous_entry(folder: Path, n: int, k: int, device: str, m: int) -> Any:
    from kernels_tuning import output
    from kernels_tuning.space import KernelConfig

    path = folder / output.sglang_filename(n, k, device)
    if not path.is_file():
        return None
    table = output.read_config_file(path)
    return KernelConfig.from_dict(output.nearest(table, m))


def _compare(
    results: list[Any],
    engine: Any,
    arch: str,
    previous: Path,
    device: str,
    path: Path,
    *,
    rounds: int,
    deadline: float,
    log: Any,
) -> list[dict[str, Any]]:
    from kernels_tuning.compare import compare_item

    rows: list[dict[str, Any]] = []
    with path.open("a") as f:
        for res in sorted(results, key=lambda r: (r.item.n, r.item.k, r.item.m)):
            if time.monotonic() > deadline:
                log(f"compare: out of time after {len(rows)} items")
                break
            prev = _previous_entry(previous, res.item.n, res.item.k, device, res.item.m)
            row = compare_item(
                res,
                rounds=rounds,
                extra={"previous": prev},
                engine=engine,
                engine_arch=arch,
            )
            rows.append(row)
            f.write(json.dumps(row) + "\n")
            f.flush()
    return rows


def _geo(xs: list[float]) -> float | None:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def _goals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's figures: speedups over the default, ratio to cuBLAS per-tensor FP8."""

    def ratio(r: dict[str, Any], a: str, b: str) -> float | None:
        ta, tb = r["times_us"].get(a), r["times_us"].get(b)
        return ta / tb if ta and tb else None

    def sel(pred: Any, a: str, b: str) -> list[float]:
        return [x for r in rows if pred(r["item"]["m"]) for x in [ratio(r, a, b)] if x]

    small = lambda m: m <= 16  # noqa: E731
    upto128 = lambda m: m <= 128  # noqa: E731
    vs_cublas = sel(small, "tuned", "cublas_fp8_per_tensor")
    worst_default = min(sel(lambda m: True, "default", "tuned"), default=None)
    return {
        "rows": len(rows),
        "m<=16 speedup vs default (geomean)": _geo(sel(small, "default", "tuned")),
        "m<=128 speedup vs default (geomean)": _geo(sel(upto128, "default", "tuned")),
        "worst entry speedup vs default": worst_default,
        "m<=16 tuned/cublas (geomean)": _geo(vs_cublas),
        "m<=16 tuned/cublas (worst)": max(vs_cublas, default=None),
        "m<=128 speedup vs previous files (geomean)": _geo(sel(upto128, "previous", "tuned")),
        "gate errors": sum(len(r["errors"]) for r in rows),
    }


def _pack(work: Path, final: Path) -> None:
    cfg = work / "configs"
    if cfg.is_dir():
        with tarfile.open(final / "configs.tar.gz", "w:gz") as tar:
            tar.add(cfg, arcname="configs")
    with tarfile.open(final / "data.tar.gz", "w:gz") as tar:
        for f in sorted([*work.glob("cache-*.jsonl"), *work.glob("compare-*.jsonl")]):
            tar.add(f, arcname=f.name)


if __name__ == "__main__":
    main()
