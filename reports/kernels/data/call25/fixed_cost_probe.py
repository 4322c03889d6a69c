"""Probe: where the INT4 plane kernel's fixed cost goes (N = 5120, M = 1 and 16, 16/256/128 w4 s3).

K = 128 x SPLIT_K x tiles: each program runs `tiles` K tiles, so the time at 1 tile is mostly
fixed cost. Variants: the shipped split-K epilogue (base) and fp32 atomic adds (red, from
splitk_red_probe.py), SPLIT_K 1, 6 and 12, and an empty kernel on the same grid. Five rounds,
the variants interleaved in each; the median per variant.
Run from the repository root: python3 reports/kernels/data/call25/fixed_cost_probe.py

Ran in calls 25 and 27-31 on the kernels of commit 32e2db6 (before ATOMIC_REDUCE joined the INT4
kernels and bench.Problem._workspace took its flag); to run it again, check out that commit's
kernels_tuning/ first.
"""

import importlib.util
import json
import os
import statistics
import sys

sys.path.insert(0, ".")
import torch

spec = importlib.util.spec_from_file_location(
    "red_probe", os.path.join(os.path.dirname(__file__), "splitk_red_probe.py")
)
P = importlib.util.module_from_spec(spec)
spec.loader.exec_module(P)
bench = P.bench
C = P.C
OUT = os.environ.get("OUT", ".")


def main():
    rows = []
    with open(os.path.join(OUT, "fixed_cost_probe.log"), "w") as log:
        for m in (1, 16):
            for sk in (1, 6, 12):
                for tiles in (1, 2, 4):
                    k = 128 * sk * tiles
                    p = P.problem("int4", m, 5120, k)
                    cfg = C(16, 256, 128, 1, 4, 3, SPLIT_K=sk)
                    times = {v: [] for v in P.VARIANTS}
                    for v in times:  # gate each variant once
                        P.VARIANT["v"] = v
                        r = bench.Evaluator(p, reject_ratio=1e9)(cfg)
                        if not r.ok:
                            print("FAIL", m, sk, tiles, v, r.error, file=log, flush=True)
                    for _ in range(5):
                        for v in times:
                            P.VARIANT["v"] = v
                            us, _ = bench.time_graph(lambda i: p.launch(cfg, i), p.n_sets)
                            times[v].append(us)
                    P.VARIANT["v"] = "base"
                    x = torch.zeros(1, device="cuda")
                    progs = 20 * sk
                    empty = bench.time_callable(lambda i: P._empty[(progs,)](x, num_warps=4), 8)
                    row = dict(m=m, split_k=sk, k_tiles_per_program=tiles, k=k,
                               **{v: statistics.median(t) for v, t in times.items()}, empty=empty,
                               raw=times)  # fmt: skip
                    rows.append(row)
                    msg = (f"M={m} sk{sk} K={k} ({tiles} tiles/program, {progs} programs): "
                           " ".join(f"{v} {row[v]:.2f}" for v in times) + f" empty {empty:.2f} us")  # fmt: skip
                    print(msg, flush=True)
                    print(msg, file=log, flush=True)
    with open(os.path.join(OUT, "fixed_cost_probe.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
