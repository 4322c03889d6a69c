"""Probe (call 33): where the FP8 decode kernel's fixed cost goes, next to cuBLAS.

N = 5120 with the tile our own FP8 files run at M <= 16 (16/64/128 w4 s4 SWAP_AB TMA), K = 128 x
SPLIT_K x tiles so each program runs `tiles` K tiles; SPLIT_K 1 and 4 (the ordered in-kernel
reduction of kernels/_common.py); cuBLAS per-tensor FP8 (`torch._scaled_mm`) on the same
problem; an empty kernel on the same grid. Median of 5 rounds, the timings interleaved.
Run from the repository root: python3 reports/kernels/data/call25/fp8_fixed_cost_probe.py
"""

import json
import os
import statistics
import sys

sys.path.insert(0, ".")
import torch
import triton

from kernels_tuning import bench
from kernels_tuning.space import KernelConfig as C

OUT = os.environ.get("OUT", ".")


@triton.jit
def _empty(X):
    pass


def main():
    rows = []
    x = torch.zeros(1, device="cuda")
    with open(os.path.join(OUT, "fp8_fixed_cost_probe.log"), "w") as log:
        for m in (1, 16):
            for sk in (1, 4):
                for tiles in (1, 2, 6):
                    k = 128 * sk * tiles
                    p = bench.make_problem("fp8", m, 5120, k, baselines=True)
                    cfg = C(16, 64, 128, 1, 4, 4, SPLIT_K=sk, SWAP_AB=1, TMA=1)
                    meas = bench.Evaluator(p, reject_ratio=1e9)(cfg)
                    if not meas.ok:
                        print("FAIL", m, sk, tiles, meas.error, file=log, flush=True)
                        continue
                    s = p.sets
                    progs = (5120 // 64) * sk

                    def cublas(i):
                        return torch._scaled_mm(
                            s[i]["A_pt"], s[i]["B_pt"].t(), scale_a=s[i]["sa"],
                            scale_b=s[i]["sb"], out_dtype=torch.bfloat16,
                        )  # fmt: skip

                    fns = {
                        "ours": lambda i: p.launch(cfg, i),
                        "cublas": cublas,
                        "empty": lambda i: _empty[(progs,)](x, num_warps=4),
                    }
                    for f in fns.values():
                        f(0)
                    times = {name: [] for name in fns}
                    for _ in range(5):
                        for name, f in fns.items():
                            times[name].append(bench.time_graph(f, p.n_sets)[0])
                    row = dict(m=m, split_k=sk, k_tiles_per_program=tiles, k=k, programs=progs,
                               **{n: statistics.median(t) for n, t in times.items()}, raw=times)  # fmt: skip
                    rows.append(row)
                    msg = (f"M={m} sk{sk} K={k} ({tiles} tiles/program, {progs} programs): "
                           + " ".join(f"{n} {row[n]:.2f}" for n in fns) + " us")  # fmt: skip
                    print(msg, flush=True)
                    print(msg, file=log, flush=True)
    with open(os.path.join(OUT, "fp8_fixed_cost_probe.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
