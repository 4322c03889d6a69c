"""Probe (not shipped): the AWQ plane kernel with the zero point and scale applied after the
dot (planes_new.py: one lop3 per weight pair, no per-weight sub/mul) against the shipped plane
kernel, same configs, side by side, with bf16 matmul; every output checked against the
reference. `.cache/planes_new.py` was kernels_tuning/kernels/int4_awq_planes.py with
int4_postscale.patch (this folder) applied; the run: `python3 postscale_probe.py` from the
repository root on the H200 (call 15)."""

import importlib.util
import json
import os
import sys

sys.path.insert(0, ".")
import torch

from kernels_tuning import bench, shim
from kernels_tuning.kernels import int4_awq_planes as old
from kernels_tuning.kernels._buffers import split_k_buffers

spec = importlib.util.spec_from_file_location("planes_new", ".cache/planes_new.py")
new = importlib.util.module_from_spec(spec)
spec.loader.exec_module(new)

rows = []
shapes = [
    (5120, 3072),
    (5120, 6144),
    (7168, 5120),
    (8192, 5120),
    (17408, 5120),
    (5120, 8704),
    (14336, 5120),
    (16384, 5120),
    (5120, 17408),
    (34816, 5120),
]
for n, k in shapes:
    for m in (1, 4, 16):
        p = bench.make_problem("int4", m, n, k, baselines=True)
        cfg = shim.get_config("int4", n, k, m, check_provenance=False)
        cands = [cfg] + [
            cfg.with_(SPLIT_K=sk)
            for sk in (3, 4, 6, 8, 12)
            if sk != cfg.SPLIT_K and (k // 128) >= 2 * sk
        ]

        def fn(mod, c):
            def f(i):
                s = p.sets[i]
                ws, locks = split_k_buffers(
                    s["x"].device, c.SPLIT_K, m, n, 1 << 12, p._workspace(c.SPLIT_K)
                )
                mod.launch(
                    s["x"],
                    s["qweight"],
                    s["qzeros"],
                    s["scales"].to(s["x"].dtype),
                    s["C"],
                    ws,
                    locks,
                    c,
                    128,
                )

            return f

        res = {"n": n, "k": k, "m": m, "cfg": cfg.key()}
        # correctness of the new kernel on the shipped config
        p.sets[0]["C"].fill_(float("nan"))
        fn(new, cfg)(0)
        torch.cuda.synchronize()
        chk = bench.check_output(p.output(0), p.ref)
        res["new_ok"], res["new_rel_err"] = chk.ok, chk.rel_err
        t = {}
        for _rnd in range(2):
            for name, mod in (("old", old), ("new", new)):
                us, _ = bench.time_graph(fn(mod, cfg), p.n_sets)
                t[name] = min(t.get(name, 1e9), us)
            us = bench.time_callable(
                lambda i: torch.matmul(p.sets[i]["x"], p.sets[i]["w_bf16_t"].t()), p.n_sets
            )
            t["bf16"] = min(t.get("bf16", 1e9), us)
        # the new kernel's best split (gated)
        best = (cfg.key(), t["new"])
        for c in cands[1:]:
            p.sets[0]["C"].fill_(float("nan"))
            fn(new, c)(0)
            torch.cuda.synchronize()
            if not bench.check_output(p.output(0), p.ref).ok:
                continue
            us, _ = bench.time_graph(fn(new, c), p.n_sets)
            if us < best[1]:
                best = (c.key(), us)
        res.update(
            old_us=t["old"],
            new_us=t["new"],
            bf16_us=t["bf16"],
            new_best=best[0],
            new_best_us=best[1],
        )
        rows.append(res)
        print(
            f"{n}x{k} M={m} {cfg.key()}: old {t['old']:.1f} new {t['new']:.1f} ({t['old'] / t['new']:.2f}x) best-split {best[0]} {best[1]:.1f} | bf16 {t['bf16']:.1f}: x bf16 old {t['bf16'] / t['old']:.2f} new {t['bf16'] / best[1]:.2f} ok={chk.ok} err={chk.rel_err:.1e}",
            flush=True,
        )
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "postscale.json"), "w"), indent=1)
