"""Probe (not shipped as is): two levers on the INT4 AWQ plane kernel, nothing else changed.

A. M <= 16: a register cap (Triton's `maxnreg` 128; the shipped 16/256/128 w4 tile takes 161
   registers, three 4-warp programs per SM; 16/256/64 w4 s3 fits 128 without spills, CPU sm_90
   compile) over BK 64/128, stages 2-6 and every split that leaves >= 2 K tiles per split.
B. M = 24-64: the plane kernel with BLOCK_SIZE_M 32 or 64 (`uses_planes` takes only 16, so the
   shipped winners at 24/32 run two 16-token tiles that each dequantize the whole weight, and
   above that the main kernel).

Every config gated, then timed (CUDA graph, L2 rotation); then the shipped config and the fastest
variant re-timed side by side twice (the faster kept), with bf16 `torch.matmul`.
Run from the repository root: python3 reports/kernels/data/call25/int4_probe.py [A|B|AB]

Ran in calls 25 and 27-31 on the kernels of commit 32e2db6 (before ATOMIC_REDUCE joined the INT4
kernels and bench.Problem._workspace took its flag); to run it again, check out that commit's
kernels_tuning/ first.
"""

import json
import os
import sys
import time

sys.path.insert(0, ".")
import torch

from kernels_tuning import bench, shim
from kernels_tuning.kernels import int4_awq_planes as planes
from kernels_tuning.space import KernelConfig as C

DEADLINE = time.monotonic() + float(os.environ.get("PROBE_BUDGET_S", "540"))
OUT = os.environ.get("OUT", ".")
MAXNREG: dict[str, int | None] = {"v": None}
_real = planes._awq_planes_kernel


class _Capped:
    """planes.launch looks the kernel up at call time: this adds maxnreg to its launch."""

    def __getitem__(self, grid):
        f = _real[grid]

        def run(*a, **kw):
            if MAXNREG["v"]:
                kw["maxnreg"] = MAXNREG["v"]
            return f(*a, **kw)

        return run


planes._awq_planes_kernel = _Capped()
planes.uses_planes = lambda cfg, packing: (
    packing == "awq"
    and not cfg.SWAP_AB
    and cfg.BLOCK_SIZE_M in (16, 32, 64)
    and cfg.BLOCK_SIZE_N >= 128
    and cfg.BLOCK_SIZE_K >= 16
)
SHAPES = [
    (34816, 5120), (5120, 17408), (16384, 5120), (14336, 5120), (5120, 6144),
    (17408, 5120), (5120, 8704), (8192, 5120), (7168, 5120), (5120, 3072),
]  # fmt: skip
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)


def cands_a(k):
    out = []
    for mr in (None, 128):
        for bk, stages in ((128, (2, 3, 4)), (64, (3, 4, 5, 6))):
            for s in stages:
                for sk in SPLITS:
                    if k // bk >= 2 * sk:
                        out.append((C(16, 256, bk, 1, 4, s, SPLIT_K=sk), mr))
    return out


def cands_b(k, m):
    tiles = [(64, 128, 64, 8, 3), (64, 128, 64, 8, 4), (64, 128, 128, 8, 3), (64, 256, 64, 8, 3),
             (64, 128, 64, 4, 3)]  # fmt: skip
    if m <= 32:
        tiles += [(32, 128, 64, 4, 3), (32, 128, 64, 4, 4), (32, 256, 64, 8, 3)]
    out = []
    for bm, bn, bk, w, s in tiles:
        for sk in (1, 2, 3, 4, 6, 8):
            if k // bk >= 2 * sk:
                out.append((C(bm, bn, bk, 1, w, s, SPLIT_K=sk), None))
    return out


def key(c, mr):
    return c.key() + (f" mr{mr}" if mr else "")


def run_item(n, k, m, cands, rows, log):
    p = bench.make_problem("int4", m, n, k, baselines=True)
    ev = bench.Evaluator(p, reject_ratio=1e9)
    shipped = shim.get_config("int4", n, k, m, check_provenance=False)
    allc = [(shipped, None)] + cands
    res, fails = {}, 0
    for c, mr in allc:
        MAXNREG["v"] = mr
        r = ev(c)
        res[key(c, mr)] = r.us if r.ok else None
        if not r.ok:
            fails += 1
            print("FAIL", n, k, m, key(c, mr), r.error, file=log, flush=True)
    MAXNREG["v"] = None
    ok = {kk: v for kk, v in res.items() if v is not None}
    sk0 = key(shipped, None)
    news = [kk for kk in ok if kk != sk0]
    if sk0 not in ok or not news:
        print("no comparison", n, k, m, file=log, flush=True)
        return
    best = min(news, key=lambda kk: ok[kk])
    cmap = {key(c, mr): (c, mr) for c, mr in allc}
    rt: dict[str, float] = {}
    bf = 1e9
    for _ in range(2):
        for kk in (sk0, best):
            c, mr = cmap[kk]
            MAXNREG["v"] = mr
            us, _ = bench.time_graph(lambda i, c=c: p.launch(c, i), p.n_sets)
            rt[kk] = min(rt.get(kk, 1e9), us)
        MAXNREG["v"] = None
        bf = min(bf, bench.time_callable(
            lambda i: torch.matmul(p.sets[i]["x"], p.sets[i]["w_bf16_t"].t()), p.n_sets))  # fmt: skip
    row = dict(n=n, k=k, m=m, shipped=sk0, shipped_us=rt[sk0], best=best, best_us=rt[best],
               bf16_us=bf, evaluated=len(allc), failed=fails, all=res)  # fmt: skip
    rows.append(row)
    msg = (f"{n}x{k} M={m}: shipped {sk0} {rt[sk0]:.1f} | best {best} {rt[best]:.1f} | "
           f"bf16 {bf:.1f} | x bf16 {bf / rt[sk0]:.2f} -> {bf / rt[best]:.2f} | "
           f"shipped/best {rt[sk0] / rt[best]:.3f}")  # fmt: skip
    print(msg, flush=True)
    print(msg, file=log, flush=True)


def main():
    parts = sys.argv[1] if len(sys.argv) > 1 else "AB"
    rows: list = []
    with open(os.path.join(OUT, f"int4_probe_{parts}.log"), "w") as log:
        work = []
        if "A" in parts:
            work += [(n, k, m, cands_a(k)) for m in (1, 16) for n, k in SHAPES]
        if "B" in parts:
            work += [(n, k, m, cands_b(k, m)) for m in (32, 64, 24, 48) for n, k in SHAPES]
        for n, k, m, cands in work:
            if time.monotonic() > DEADLINE:
                print("deadline: stopped before", n, k, m, file=log, flush=True)
                break
            t = time.monotonic()
            run_item(n, k, m, cands, rows, log)
            print(f"  {time.monotonic() - t:.1f} s", file=log, flush=True)
            with open(os.path.join(OUT, f"int4_probe_{parts}.json"), "w") as f:
                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
