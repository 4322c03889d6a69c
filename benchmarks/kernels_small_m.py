"""A/B of SWAP_AB at decode sizes on one GPU: our FP8 block and INT4 W4A16 kernels with and
without SWAP_AB against cuBLAS per-tensor FP8 and bf16 torch.matmul (issue 5, "Misses").

    python3 benchmarks/kernels_small_m.py --out $OUT/small_m.json        # ~2 min on one H200
    python3 benchmarks/kernels_small_m.py --list                         # no GPU needed

For the Qwen3.8-27B shapes at TP1 and TP2 (kernels_tuning.shapes) and M in {1, 2, 4, 8, 16},
each variant is a SMALL hand-picked config set (tiles x SPLIT_K, minus what the space filters
reject): `plain` (SWAP_AB=0, the tiles the H200 search picked), `swap` (SWAP_AB=1) and `shipped`
(the config the committed files give for this shape and M). Every config passes the
correctness gate (kernels_tuning.bench) before it is timed; all timing is bench.time_graph
(CUDA graph of back-to-back launches, inputs rotated over >= 3x L2, median of 5 replays).
Round 1 times every config; round 2 re-times each variant's winner and the baselines side by
side, and the faster of the two rounds is kept. The binaries are compiled first, in parallel.

Output: a table per kind (us, TB/s of all bytes moved, FP8: time / cuBLAS, INT4: speed-up over
bf16) and JSON at --out, rewritten after every (shape, M) so a run cut short keeps its rows.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels_tuning.space import (  # noqa: E402
    H200_LIMITS,
    DeviceLimits,
    KernelConfig,
    KernelKind,
    legality,
    waste,
)

T0 = time.monotonic()
MS: tuple[int, ...] = (1, 2, 4, 8, 16)
SPLITS: tuple[int, ...] = (1, 2, 4, 8)
CARDS: dict[str, str] = {"fp8": "qwen3.8-27b-fp8", "int4": "qwen3.8-27b-awq-int4"}
VARIANTS: tuple[str, ...] = ("plain", "swap", "shipped")

# (BLOCK_SIZE_N, BLOCK_SIZE_K, num_warps, num_stages); BLOCK_SIZE_M is 16 for `plain`. `plain`
# tiles: the H200 search winners at M <= 16 (reports/kernels/README.md). `swap` tiles: FP8 with
# BM 16 (Triton 3.6 emits wgmma from 16 tokens, on 64+ weight rows); INT4 with the smallest BM
# covering M (8 or 16): its AWQ nibble planes run mma.sync, whose native N is 8.
TILES: dict[tuple[str, str], tuple[tuple[int, int, int, int], ...]] = {
    ("fp8", "plain"): ((64, 128, 4, 4), (64, 128, 4, 5), (128, 128, 4, 4), (32, 128, 4, 3)),
    ("fp8", "swap"): ((64, 128, 4, 4), (64, 128, 4, 5), (128, 128, 4, 4), (128, 128, 8, 4)),
    ("int4", "plain"): ((64, 128, 4, 3), (64, 64, 4, 3), (128, 128, 4, 3), (64, 128, 4, 4)),
    ("int4", "swap"): ((128, 128, 4, 3), (128, 128, 4, 4), (256, 128, 4, 3), (256, 128, 8, 3)),
}


@dataclass(frozen=True)
class Shape:
    kind: KernelKind
    n: int
    k: int
    tp: int
    label: str


def shapes(kinds: Sequence[str], tps: Sequence[int]) -> list[Shape]:
    from autotune.models import BUILTIN_CARDS
    from kernels_tuning import shapes as S

    out: list[Shape] = []
    for kind in kinds:
        kk: KernelKind = "fp8" if kind == "fp8" else "int4"
        for tp in tps:
            for s in S.gemm_shapes(BUILTIN_CARDS[CARDS[kind]], tp, kk):
                out.append(Shape(kk, s.n, s.k, tp, s.label))
    return out


def swap_bm(kind: str, m: int) -> int:
    return 8 if kind == "int4" and m <= 8 else 16


def config_set(
    kind: KernelKind, variant: str, m: int, n: int, k: int, limits: DeviceLimits
) -> list[KernelConfig]:
    """The hand-picked configs of one variant that the space's filters accept for (M, N, K)."""
    swap = variant == "swap"
    bm = swap_bm(kind, m) if swap else 16
    out: list[KernelConfig] = []
    for bn, bk, w, s in TILES[(kind, variant)]:
        for sk in SPLITS:
            c = KernelConfig(bm, bn, bk, 1, w, s, SPLIT_K=sk, SWAP_AB=int(swap))
            if legality(c, kind, 128, limits, n, k) is None and waste(c, m, n, limits) is None:
                out.append(c)
    return out


def shipped_config(kind: KernelKind, m: int, n: int, k: int, device_name: str) -> KernelConfig:
    """What the committed files give (our split-K file first for FP8; defaults without one)."""
    from kernels_tuning import shim

    return shim.get_config(kind, n, k, m, device_name=device_name, check_provenance=False)


def plan(
    kinds: Sequence[str], tps: Sequence[int], ms: Sequence[int], limits: DeviceLimits, dev: str
) -> list[tuple[Shape, int, dict[str, list[KernelConfig]]]]:
    out = []
    for sh in shapes(kinds, tps):
        for m in ms:
            sets = {v: config_set(sh.kind, v, m, sh.n, sh.k, limits) for v in VARIANTS[:2]}
            sets["shipped"] = [shipped_config(sh.kind, m, sh.n, sh.k, dev)]
            out.append((sh, m, sets))
    return out


def parse_ints(text: str, flag: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"{flag} {text!r}: expected comma-separated integers, e.g. 1,2,4")
    if not vals or any(v < 1 for v in vals):
        sys.exit(f"{flag} {text!r}: expected positive integers")
    return vals


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=None, help="JSON results (required unless --list)")
    ap.add_argument("--kinds", default="fp8,int4")
    ap.add_argument("--tps", default="1,2")
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--packing", choices=("awq", "gptq"), default="awq")
    ap.add_argument("--budget-s", type=float, default=160.0, help="start no new row after this")
    ap.add_argument("--workers", type=int, default=0, help="compile processes (0: cores - 1)")
    ap.add_argument("--list", action="store_true", help="print the config sets and exit (no GPU)")
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    bad = [k for k in kinds if k not in ("fp8", "int4")]
    if bad or not kinds:
        ap.error(f"--kinds {args.kinds!r}: valid kinds are fp8, int4")
    args.kinds = kinds
    args.tps = parse_ints(args.tps, "--tps")
    args.ms = parse_ints(args.ms, "--ms")
    if not args.list and args.out is None:
        ap.error("--out is required (or pass --list)")
    return args


def list_plan(args: argparse.Namespace) -> None:
    rows = plan(args.kinds, args.tps, args.ms, H200_LIMITS, "NVIDIA_H200")
    total = 0
    for sh, m, sets in rows:
        n_cfg = sum(len(v) for v in sets.values())
        total += n_cfg
        desc = "  ".join(f"{v}:{len(c)}" for v, c in sets.items())
        print(f"{sh.kind} TP{sh.tp} {sh.label:24s} N={sh.n:5d} K={sh.k:5d} M={m:2d}  {desc}")
    binaries = {
        (sh.kind, c.compile_key()) for sh, _, sets in rows for v in sets.values() for c in v
    }
    print(f"{len(rows)} rows, {total} gated timings, {len(binaries)} binaries")


def _time(fn: Callable[[int], Any], n_sets: int) -> float:
    from kernels_tuning import bench

    return bench.time_graph(fn, n_sets)[0]


def run_row(
    sh: Shape, m: int, sets: dict[str, list[KernelConfig]], packing: str
) -> dict[str, Any]:
    import torch

    from kernels_tuning import bench

    p = bench.make_problem(sh.kind, m, sh.n, sh.k, packing=packing, baselines=True)
    s = p.sets
    row: dict[str, Any] = {
        "kind": sh.kind,
        "n": sh.n,
        "k": sh.k,
        "tp": sh.tp,
        "label": sh.label,
        "m": m,
        "bytes": p.bytes_moved,
        "variants": {},
    }
    base: dict[str, Callable[[int], Any]] = {}
    if sh.kind == "fp8":
        base["cublas_fp8"] = lambda i: torch._scaled_mm(
            s[i]["A_pt"],
            s[i]["B_pt"].t(),
            scale_a=s[i]["sa"],
            scale_b=s[i]["sb"],
            out_dtype=torch.bfloat16,
        )
        base["bf16"] = lambda i: torch.matmul(s[i]["x_bf16"], s[i]["w_bf16"].t())
    else:
        base["bf16"] = lambda i: torch.matmul(s[i]["x"], s[i]["w_bf16_t"].t())
    winners: dict[str, KernelConfig] = {}
    for variant, cfgs in sets.items():
        timed: dict[str, float] = {}
        errors: dict[str, str] = {}
        for cfg in cfgs:
            meas = bench.Evaluator(p, reject_ratio=math.inf)(cfg)  # gate, then graph timing
            if meas.ok and meas.us is not None:
                timed[cfg.key()] = meas.us
            else:
                errors[cfg.key()] = meas.error or "failed"
        best = min(cfgs, key=lambda c: timed.get(c.key(), math.inf)) if timed else None
        if best is not None:
            winners[variant] = best
        row["variants"][variant] = {
            "best": best.as_dict() if best is not None else None,
            "timed_us": timed,
            "errors": errors,
        }
    # Round 2: the winners and the baselines side by side; keep each one's faster round.
    final: dict[str, float] = {}
    for name, fn in base.items():
        fn(0)
        final[name] = _time(fn, p.n_sets)
    for variant, cfg in winners.items():
        r1 = row["variants"][variant]["timed_us"][cfg.key()]

        def launch(i: int, cfg: KernelConfig = cfg) -> None:
            p.launch(cfg, i)

        final[variant] = min(r1, _time(launch, p.n_sets))
    for name, fn in base.items():
        final[name] = min(final[name], _time(fn, p.n_sets))
    row["us"] = final
    row["tbs"] = {name: p.bytes_moved / (us * 1e-6) / 1e12 for name, us in final.items()}
    return row


def fmt_table(rows: Sequence[dict[str, Any]], kind: str) -> str:
    rows = [r for r in rows if r["kind"] == kind]
    if not rows:
        return ""
    if kind == "fp8":
        head = "| TP | N x K | M | plain us | swap us | shipped us | cuBLAS us | bf16 us "
        head += "| best TB/s | cuBLAS TB/s | plain/cuBLAS | swap/cuBLAS | swap config |"
    else:
        head = "| TP | N x K | M | plain us | swap us | shipped us | bf16 us | best TB/s "
        head += "| bf16/plain | bf16/swap | swap config |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]

    def us(r: dict[str, Any], name: str) -> str:
        v = r["us"].get(name)
        return f"{v:.1f}" if v is not None else "-"

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}" if a and b else "-"

    for r in rows:
        t = r["us"]
        ours = [t[v] for v in VARIANTS if v in t]
        best_tbs = r["bytes"] / (min(ours) * 1e-6) / 1e12 if ours else None
        sw = r["variants"].get("swap", {}).get("best")
        sw_desc = KernelConfig.from_dict(sw).key() if sw else "-"
        cells = [str(r["tp"]), f"{r['n']}x{r['k']}", str(r["m"])]
        cells += [us(r, "plain"), us(r, "swap"), us(r, "shipped")]
        if kind == "fp8":
            cb = t.get("cublas_fp8")
            cells += [us(r, "cublas_fp8"), us(r, "bf16")]
            cells += [
                f"{best_tbs:.2f}" if best_tbs else "-",
                f"{r['tbs'].get('cublas_fp8', 0):.2f}",
            ]
            cells += [ratio(t.get("plain"), cb), ratio(t.get("swap"), cb), sw_desc]
        else:
            bf = t.get("bf16")
            cells += [us(r, "bf16"), f"{best_tbs:.2f}" if best_tbs else "-"]
            cells += [ratio(bf, t.get("plain")), ratio(bf, t.get("swap")), sw_desc]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per kind: geomean and worst of the goal ratios, for plain, swap and the better of both."""

    def geo(xs: list[float]) -> float | None:
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None

    out: dict[str, Any] = {}
    for kind in ("fp8", "int4"):
        rs = [r for r in rows if r["kind"] == kind]
        if not rs:
            continue
        ref = "cublas_fp8" if kind == "fp8" else "bf16"
        d: dict[str, Any] = {}
        for v in ("plain", "swap", "either"):
            xs = []
            for r in rs:
                t = r["us"]
                mine = min(t.get("plain", math.inf), t.get("swap", math.inf))
                mine = mine if v == "either" else t.get(v, math.inf)
                if math.isfinite(mine) and t.get(ref):
                    # FP8: time / cuBLAS (goal <= 1.1); INT4: bf16 time / ours (goal >= 2)
                    xs.append(mine / t[ref] if kind == "fp8" else t[ref] / mine)
            g = geo(xs)
            worst = (max(xs) if kind == "fp8" else min(xs)) if xs else None
            d[v] = {"geomean": g, "worst": worst, "rows": len(xs)}
        out[kind] = d
    return out


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.list:
        list_plan(args)
        return
    import torch

    if not torch.cuda.is_available():
        sys.exit(
            "kernels_small_m.py times kernels on a CUDA GPU and none is visible here; "
            "run it on the GPU machine (or pass --list to see the config sets)"
        )
    import os

    from kernels_tuning import output
    from kernels_tuning.compile import precompile

    limits = DeviceLimits.from_torch()
    dev = output.current_device_name()
    rows_plan = plan(args.kinds, args.tps, args.ms, limits, dev)
    workers = args.workers or max(1, (os.cpu_count() or 2) - 1)
    for kind in args.kinds:
        cfgs = {
            c for sh, _, sets in rows_plan if sh.kind == kind for v in sets.values() for c in v
        }
        rep = precompile(kind, sorted(cfgs), packing=args.packing, workers=workers)
        print(
            f"[{time.monotonic() - T0:5.1f}s] precompile {kind}: {rep.compiled} ok, "
            f"{len(rep.failed)} failed, {rep.wall_s:.1f}s",
            flush=True,
        )
        for key, err in list(rep.failed.items())[:5]:
            print(f"  compile failed {key}: {err}", flush=True)
    env = {
        "device": dev,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "limits": limits.__dict__,
        "packing": args.packing,
        "kernel_sha256": {k: output.kernel_source_sha256(k) for k in ("fp8", "int4")},
    }
    rows: list[dict[str, Any]] = []
    skipped = 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for sh, m, sets in rows_plan:
        if time.monotonic() - T0 > args.budget_s:
            skipped += 1
            continue
        row = run_row(sh, m, sets, args.packing)
        rows.append(row)
        t = row["us"]
        print(
            f"[{time.monotonic() - T0:5.1f}s] {sh.kind} TP{sh.tp} N={sh.n} K={sh.k} M={m}: "
            + " ".join(f"{k} {v:.1f}" for k, v in t.items()),
            flush=True,
        )
        doc = {"env": env, "rows": rows, "summary": summary(rows), "skipped_rows": skipped}
        args.out.write_text(json.dumps(doc, indent=1))
    doc = {"env": env, "rows": rows, "summary": summary(rows), "skipped_rows": skipped}
    args.out.write_text(json.dumps(doc, indent=1))
    for kind in args.kinds:
        print(f"\n## {kind}\n\n{fmt_table(rows, kind)}")
    print("\n" + json.dumps(summary(rows), indent=1))
    if skipped:
        print(f"{skipped} rows skipped: --budget-s {args.budget_s} reached")
    print(f"done in {time.monotonic() - T0:.1f}s; JSON: {args.out}")


if __name__ == "__main__":
    main()
