"""Probe (call 16): do the persistent stream-K schedule (STREAM_K programs per SM) and a register
cap (maxnreg) beat the shipped FP8 own-file configs? Per (shape, M): the shipped config and its
variants (PROBE=streamk: STREAM_K 1-4, SPLIT_K dropped, and at M >= 256 128/128/128 w8 s3
folded with STREAM_K 1, 2; PROBE=maxnreg: maxnreg 168 on the shipped config, on its unfolded
form, and with STREAM_K 2, 3); every config gated, then timed (CUDA graph, L2 rotation); then
the shipped config and the fastest variant re-timed side by side twice (the faster kept), with
cuBLAS per-tensor FP8 as a control. STREAM_K and maxnreg were reverted: apply
streamk_maxnreg.patch (next to this file) to run it again."""

import json
import os
import sys
import time

sys.path.insert(0, ".")
import torch

from kernels_tuning import bench, shim
from kernels_tuning.space import KernelConfig as C

SHAPES = [
    (34816, 5120), (5120, 17408), (16384, 5120), (14336, 5120), (5120, 6144),
    (17408, 5120), (5120, 8704), (8192, 5120), (7168, 5120), (5120, 3072),
]  # fmt: skip
PROBE = os.environ.get("PROBE", "streamk")
MS = [int(x) for x in os.environ.get("PROBE_MS", "1,16,1024,3072").split(",")]
t_start = time.time()
out = []
for n, k in SHAPES:
    for m in MS:
        p = bench.make_problem("fp8", m, n, k, baselines=True)
        ev = bench.Evaluator(p, reject_ratio=1e9)
        shipped = shim.get_config("fp8", n, k, m, check_provenance=False)
        base = shipped.with_(SPLIT_K=1)
        if PROBE == "maxnreg":
            cands = [
                shipped,
                shipped.with_(maxnreg=168),
                shipped.with_(FOLD_SCALES=0, maxnreg=168),
            ]
            cands += [base.with_(STREAM_K=s, maxnreg=168) for s in (2, 3)]
        else:
            cands = [shipped] + [base.with_(STREAM_K=s) for s in (1, 2, 3, 4)]
        if m >= 256 and PROBE != "maxnreg":
            g = shipped.GROUP_SIZE_M
            cands += [C(128, 128, 128, g, 8, 3, FOLD_SCALES=1, STREAM_K=s) for s in (1, 2)]
        cands = list(dict.fromkeys(cands))
        res = {}
        for c in cands:
            r = ev(c)
            res[c.key()] = r.us if r.ok else None
            if not r.ok:
                print("FAIL", n, k, m, c.key(), r.error, flush=True)
        ok = {kk: v for kk, v in res.items() if v is not None}
        news = [kk for kk in ok if kk != shipped.key()]
        if not news or shipped.key() not in ok:
            print("no comparison", n, k, m, flush=True)
            continue
        best_new = min(news, key=lambda kk: ok[kk])
        cmap = {c.key(): c for c in cands}
        sets = p.sets

        def cublas(i: int, s: list = sets) -> None:
            torch._scaled_mm(
                s[i]["A_pt"], s[i]["B_pt"].t(), scale_a=s[i]["sa"], scale_b=s[i]["sb"],
                out_dtype=torch.bfloat16,
            )  # fmt: skip

        rt: dict[str, float] = {}
        cub = float("inf")
        for _rnd in range(2):
            for kk in (shipped.key(), best_new):
                us, _ = bench.time_graph(lambda i, c=cmap[kk]: p.launch(c, i), p.n_sets)
                rt[kk] = min(rt.get(kk, 1e9), us)
            cub = min(cub, bench.time_callable(cublas, p.n_sets))
        row = dict(n=n, k=k, m=m, shipped=shipped.key(), shipped_us=rt[shipped.key()],
                   best_new=best_new, best_new_us=rt[best_new], cublas_us=cub, all=res)  # fmt: skip
        out.append(row)
        print(
            f"[{time.time() - t_start:6.1f}s] {n}x{k} M={m}: shipped {shipped.key()} "
            f"{rt[shipped.key()]:.1f} us | best variant {best_new} {rt[best_new]:.1f} us | "
            f"shipped/new {rt[shipped.key()] / rt[best_new]:.3f} | cuBLAS {cub:.1f}",
            flush=True,
        )
        torch.cuda.empty_cache()
json.dump(
    out, open(os.path.join(os.environ.get("OUT", "."), f"{PROBE}_probe.json"), "w"), indent=1
)
