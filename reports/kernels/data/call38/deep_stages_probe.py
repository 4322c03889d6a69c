"""Probe (call 45): FP8 at decode sizes with deep software pipelines instead of (or with fewer)
split-K programs. cuBLAS per-tensor FP8 runs these shapes with no split: 80 programs of 12 warps
and 164 KB of shared memory each (call 13's Nsight Compute), so each SM keeps many tiles in flight.
Our space stops at num_stages 5 (SGLang's grid); a stage of the own-file decode tile 16/64/128
SWAP_AB TMA is 10 KB, so 6-20 stages fit an H200's 227 KB. No kernel change: num_stages is a
compile option. Per (shape, M): every candidate gated against the reference, timed once; the
fastest deep config (stages >= 6) re-timed side by side with the shipped own-file config and
cuBLAS, median of 5 rounds, interleaved, gated again on the output of the timed replays.
Run from the repository root: python3 reports/kernels/data/call38/deep_stages_probe.py
"""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, ".")
import torch

from kernels_tuning import bench, shim
from kernels_tuning.space import KernelConfig as C

OUT = os.environ.get("OUT", ".")
SHAPES = [(5120, 3072), (5120, 6144), (7168, 5120), (8192, 5120), (5120, 8704), (14336, 5120),
          (16384, 5120), (5120, 17408), (17408, 5120), (34816, 5120)]  # fmt: skip


def candidates():
    out = []
    for st in (6, 8, 10, 12, 16, 20):
        for sk in (1, 2, 3, 4):
            out.append(C(16, 64, 128, 1, 4, st, SPLIT_K=sk, SWAP_AB=1, TMA=1))
    for st in (6, 8, 10):  # two warpgroups, 128 weight rows
        for sk in (1, 2, 3):
            out.append(C(16, 128, 128, 1, 8, st, SPLIT_K=sk, SWAP_AB=1, TMA=1))
    return out


def key(cfg):
    return json.dumps(cfg.as_dict(), sort_keys=True)


def probe(n, k, m, log):
    p = bench.make_problem("fp8", m, n, k, baselines=True)
    shipped = shim.get_config("fp8", n, k, m)
    s = p.sets

    def cublas(i):
        return torch._scaled_mm(s[i]["A_pt"], s[i]["B_pt"].t(), scale_a=s[i]["sa"],
                                scale_b=s[i]["sb"], out_dtype=torch.bfloat16)  # fmt: skip

    first, gates = {}, {}
    for cfg in candidates():
        p.output(0).fill_(float("nan"))
        try:
            p.launch(cfg, 0)
            torch.cuda.synchronize()
            ok = bench.check_output(p.output(0), p.ref)
            gates[key(cfg)] = "ok" if ok.ok else f"wrong: {ok.detail}"
        except Exception as e:  # noqa: BLE001 (out of shared memory: recorded, skipped)
            gates[key(cfg)] = f"error: {type(e).__name__}: {str(e)[:200]}"
        if gates[key(cfg)] != "ok":
            continue
        first[key(cfg)] = bench.time_graph(lambda i, c=cfg: p.launch(c, i), p.n_sets)[0]
    row = dict(n=n, k=k, m=m, shipped_cfg=shipped.as_dict(), gates=gates, first=first)
    if first:
        best_key = min(first, key=first.get)
        best = next(c for c in candidates() if key(c) == best_key)
        fns = {"shipped": lambda i: p.launch(shipped, i), "deep": lambda i: p.launch(best, i),
               "cublas": cublas}  # fmt: skip
        times = {n_: [] for n_ in fns}
        after = {"shipped": True, "deep": True}
        for _ in range(5):
            for n_, fn in fns.items():
                if n_ != "cublas":
                    p.output(0).fill_(float("nan"))
                times[n_].append(bench.time_graph(fn, p.n_sets)[0])
                if n_ != "cublas":
                    after[n_] = after[n_] and bench.check_output(p.output(0), p.ref).ok
        med = {n_: statistics.median(t) for n_, t in times.items()}
        row.update(best=best.as_dict(), gate_after_timing=after, raw=times, **med)
        msg = (f"{n}x{k} M={m}: shipped {med['shipped']:.2f} (sk{shipped.SPLIT_K} "
               f"s{shipped.num_stages}) deep {med['deep']:.2f} (BN{best.BLOCK_SIZE_N} "
               f"w{best.num_warps} sk{best.SPLIT_K} s{best.num_stages}) cublas {med['cublas']:.2f}"
               f" | shipped/deep {med['shipped'] / med['deep']:.3f} deep/cublas "
               f"{med['deep'] / med['cublas']:.3f} shipped/cublas "
               f"{med['shipped'] / med['cublas']:.3f} after {after}")  # fmt: skip
    else:
        msg = f"{n}x{k} M={m}: no candidate passed: {set(gates.values())}"
    print(msg, flush=True)
    print(json.dumps(row), file=log, flush=True)


def main():
    ms = [int(x) for x in os.environ.get("MS", "1,16").split(",")]
    nshapes = int(os.environ.get("NSHAPES", len(SHAPES)))
    t0 = time.time()
    with open(os.path.join(OUT, "deep_stages_probe.jsonl"), "w") as log:
        for n, k in SHAPES[:nshapes]:
            for m in ms:
                probe(n, k, m, log)
    print(f"done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
