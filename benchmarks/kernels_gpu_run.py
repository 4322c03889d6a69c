"""The H200 run behind reports/kernels/: precompile, tune, compare, budgeted-vs-exhaustive.

    python3 benchmarks/kernels_gpu_run.py --out $OUT --budget-s 520 [--phases ...]

Re-tune only some items with a changed space (e.g. SWAP_AB at small M), keeping the others:

    python3 benchmarks/kernels_gpu_run.py --out $OUT --budget-s 560 \
        --resume OLD_OUT/cache.jsonl --retune --batch-sizes 1,2,3,4,8,16 \
        --phases precompile,tune,compare

--resume copies an earlier cache (.jsonl or .jsonl.gz) to --out; --retune appends a "retune"
record for the selected items (--kinds x --tps x --batch-sizes), so they are searched afresh
while every other finished item is kept; the files in configs.tar.gz are then rebuilt from all
finished items of the cache, not only the re-tuned ones. A finished item is otherwise never
re-searched, even when the space changed.

Writes continuously under --out so a run stopped at its time limit still returns data:
cache.jsonl (every evaluation and finished item; pass it back with --resume to continue),
compare.jsonl, exhaustive.jsonl, env.json, progress.log; configs.tar.gz at the end (the files
as engines load them). Phases check the remaining time and stop handing out work in time.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tarfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

T0 = time.monotonic()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=520.0)
    ap.add_argument("--phases", default="precompile,tune,compare,exhaustive")
    ap.add_argument("--kinds", default="fp8,int4")
    ap.add_argument("--tps", default="1,2")
    ap.add_argument("--batch-sizes", default="")
    ap.add_argument("--max-shapes", type=int, default=0)
    ap.add_argument("--precompile-limit", type=int, default=0)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument(
        "--resume", type=Path, default=None, help="earlier cache.jsonl(.gz) to continue"
    )
    ap.add_argument(
        "--retune",
        action="store_true",
        help="search the selected items again even where the resumed cache has them finished",
    )
    ap.add_argument(
        "--polish-prior",
        action="store_true",
        help="polish also times each item's winners from before its last re-tune",
    )
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--reserve-compare-s", type=float, default=90.0)
    ap.add_argument("--reserve-exhaustive-s", type=float, default=90.0)
    ap.add_argument("--max-evals", type=int, default=48)
    ap.add_argument("--compare-rounds", type=int, default=2)
    args = ap.parse_args()

    import torch

    from autotune.models import BUILTIN_CARDS
    from kernels_tuning import compare, output, runner, shapes
    from kernels_tuning.compile import precompile
    from kernels_tuning.space import VLLM_AWQ_DEFAULT, DeviceLimits, compile_set, next_pow2

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    logf = (out / "progress.log").open("a")

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - T0:6.1f}s] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    def left() -> float:
        return args.budget_s - (time.monotonic() - T0)

    cache = out / "cache.jsonl"
    fresh_copy = False
    if args.resume is not None and not args.resume.exists():
        sys.exit(f"--resume {args.resume}: no such file")
    if args.resume and not cache.exists():
        if args.resume.suffix == ".gz":
            with gzip.open(args.resume, "rb") as src, cache.open("wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copy(args.resume, cache)
        fresh_copy = True
    limits = DeviceLimits.from_torch()
    dev = output.current_device_name()
    env = {k: output.current_provenance(k).to_json() for k in ("fp8", "int4")}
    env["limits"] = limits.__dict__
    env["device_name"] = dev
    (out / "env.json").write_text(json.dumps(env, indent=2))
    log(f"{dev} {limits} torch {torch.__version__} cuda {torch.version.cuda}")

    kinds = [k for k in args.kinds.split(",") if k]
    tps = [int(t) for t in args.tps.split(",") if t]
    bss = shapes.parse_batch_sizes(args.batch_sizes) if args.batch_sizes else shapes.batch_sizes()
    cards = {
        "fp8": BUILTIN_CARDS["qwen3.8-27b-fp8"],
        "int4": BUILTIN_CARDS["qwen3.8-27b-awq-int4"],
    }
    plan: list[tuple[str, int, list[runner.WorkItem]]] = []
    for tp in tps:
        for kind in kinds:
            shp = shapes.gemm_shapes(cards[kind], tp, kind)  # type: ignore[arg-type]
            if args.max_shapes:
                shp = shp[: args.max_shapes]
            plan.append((kind, tp, runner.make_items(kind, shp, bss)))  # type: ignore[arg-type]
    if args.retune and args.resume is None:
        sys.exit("--retune needs --resume (the earlier cache whose items are searched again)")
    if args.retune:
        if fresh_copy:
            n_marked = runner.ResultCache(cache).mark_retune(i for _, _, its in plan for i in its)
            log(f"retune: {n_marked} items will be searched afresh")
        else:
            # --out already holds a cache from an interrupted re-tune: marking again would
            # throw away what that run finished.
            log("retune: continuing the re-tune already recorded in the cache of --out")
    phases = set(args.phases.split(","))
    workers = args.workers or max(1, (os.cpu_count() or 2) - 1)

    def run_precompile(kind: str, n_workers: int) -> None:
        cs = compile_set(kind, limits)  # type: ignore[arg-type]
        # Tiles wider in M than the largest batch size are never in a space (space.waste):
        # a small-M re-tune skips compiling them.
        bm_cap = max(16, next_pow2(max(bss)))
        cs = [c for c in cs if c.BLOCK_SIZE_M <= bm_cap]
        cs += [runner.default_config(kind), VLLM_AWQ_DEFAULT]  # type: ignore[arg-type]
        if args.precompile_limit:
            cs = cs[: args.precompile_limit]
        rep = precompile(kind, cs, workers=n_workers)  # type: ignore[arg-type]
        log(
            f"precompile {kind}: {rep.compiled} ok, {len(rep.failed)} failed, "
            f"wall {rep.wall_s:.1f}s, cpu {rep.cpu_s:.1f}s"
        )
        for key, err in list(rep.failed.items())[:5]:
            log(f"  compile failed {key}: {err}")

    background: threading.Thread | None = None
    if "precompile" in phases and kinds:
        # The first kind blocks; the others compile in the background while it is tuned
        # (the tuning process needs one core; the GPU is idle during compiles anyway).
        run_precompile(kinds[0], workers)
        rest = kinds[1:]
        if rest:
            background = threading.Thread(
                target=lambda: [run_precompile(k, max(1, workers - 2)) for k in rest], daemon=True
            )
            background.start()

    if "precompile-results" in phases:
        # Only the configs an earlier run picked (plus the defaults), for a compare-only run.
        from kernels_tuning.space import DEFAULT_INT4, SGLANG_DEFAULT_FP8, VLLM_AWQ_DEFAULT

        _, prev = runner.ResultCache(cache).load()
        for kind in kinds:
            cfgs = {SGLANG_DEFAULT_FP8} if kind == "fp8" else {DEFAULT_INT4, VLLM_AWQ_DEFAULT}
            for r in prev.values():
                if r.item.kind == kind:
                    cfgs.update(c for c in (r.best, r.engine_best) if c is not None)
            rep = precompile(kind, sorted(cfgs), workers=workers)  # type: ignore[arg-type]
            log(
                f"precompile {kind} (results): {rep.compiled} ok, {len(rep.failed)} failed, "
                f"wall {rep.wall_s:.1f}s"
            )

    params = runner.TuneParams(max_evals=args.max_evals)
    reserve = (args.reserve_compare_s if "compare" in phases else 0) + (
        args.reserve_exhaustive_s if "exhaustive" in phases else 0
    )
    timings: dict[str, float] = {}
    if "tune" in phases:
        for kind, tp, items in plan:
            if background is not None and kind != kinds[0]:
                background.join()
                background = None
            t = time.monotonic()
            summ = runner.tune(
                items,
                cache_path=cache,
                limits=limits,
                params=params,
                deadline_s=max(0.0, left() - reserve),
                log=log,
                out_dir=out / "configs",
                device_name=dev,
                provenance=env[kind],
            )
            timings[f"{kind}_tp{tp}"] = time.monotonic() - t
            log(
                f"tuned {kind} TP{tp}: {len(summ.results)}/{len(items)} items, "
                f"{summ.evaluations} evaluations, {summ.wall_s:.1f}s, skipped {len(summ.skipped)}"
            )
        (out / "timings.json").write_text(json.dumps(timings, indent=2))
        if args.resume is not None:
            # The files must hold every batch size, not only the items tuned in this call.
            _, done_now = runner.ResultCache(cache).load()
            for kind in kinds:
                res = [r for r in done_now.values() if r.item.kind == kind]
                runner.write_outputs(res, out / "configs", dev, env[kind])

    all_items = [i for _, _, items in plan for i in items]
    if "polish" in phases:
        t = time.monotonic()
        summ = runner.polish(
            all_items,
            cache_path=cache,
            limits=limits,
            log=log,
            deadline_s=max(0.0, left() - args.reserve_compare_s),
            prior=runner.ResultCache(cache).superseded() if args.polish_prior else None,
        )
        changed = sum(1 for r in summ.results.values() if r.phases.get("polish"))
        log(
            f"polish: {len(summ.results)} items cross-checked, {summ.evaluations} timings, "
            f"{time.monotonic() - t:.1f}s, skipped {len(summ.skipped)} ({changed} touched)"
        )
        _, done_now = runner.ResultCache(cache).load()
        for kind in kinds:
            res = [r for r in done_now.values() if r.item.kind == kind]
            runner.write_outputs(res, out / "configs", dev, env[kind])
    _, done = runner.ResultCache(cache).load()
    done_items = [done[i.key()] for i in all_items if i.key() in done]
    if "compare" in phases:
        cmp_path = out / "compare.jsonl"
        seen = set()
        if cmp_path.exists():
            seen = {
                json.dumps(json.loads(line)["item"], sort_keys=True)
                for line in cmp_path.read_text().splitlines()
                if line.strip()
            }
        stop_at = args.reserve_exhaustive_s if "exhaustive" in phases else 5.0
        n = 0
        for r in done_items:
            if left() < stop_at:
                log("compare: out of time")
                break
            if json.dumps(r.item.to_dict(), sort_keys=True) in seen:
                continue
            row = compare.compare_item(r, rounds=args.compare_rounds)
            with cmp_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            n += 1
        log(f"compare: {n} items")

    if "exhaustive" in phases:
        ex_path = out / "exhaustive.jsonl"
        pool = [i for i in all_items if i.key() in done]
        for kind in kinds:
            sample = compare.sample_pairs(
                [i for i in pool if i.kind == kind], args.pairs // len(kinds), seed=1
            )
            for it in sample:
                if left() < 15:
                    log("exhaustive: out of time")
                    break
                row = compare.exhaustive_check(done[it.key()], limits)
                with ex_path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                log(
                    f"exhaustive {it.key()}: ratio {row['ratio']} evals "
                    f"{row['budgeted_evals']}/{row['exhaustive_evals']} ({row['wall_s']}s)"
                )

    if (out / "configs").exists():
        with tarfile.open(out / "configs.tar.gz", "w:gz") as tar:
            tar.add(out / "configs", arcname="configs")
        shutil.rmtree(out / "configs")
    log("done")


if __name__ == "__main__":
    main()
