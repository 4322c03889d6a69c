"""Probe (call 34): what the FP8 split-K epilogue's time is made of (N = 5120, the own-file decode
tile 16/64/128 w4 s4 SWAP_AB TMA, SPLIT_K 4, M = 1 and 16, K = 128 x 4 x tiles).

Variants of `store_tile_t` (a second triton.jit of the kernel with the helper swapped in its
globals, as in splitk_red_probe.py); all but `ordered` give wrong results by design and are only
timed, to split the cost:
- ordered: the shipped epilogue (store partial, barrier, acq_rel counter, last arriver loads all
  partials, writes C);
- no_sync: store the partial and write C from the program's own partial (no barrier, counter or
  loads);
- counter_only: the barrier and the acq_rel counter, the last arriver writes C from its own
  partial (no loads);
- relaxed: `ordered` with a relaxed counter (no fences);
- two_kernels: the GEMM stores its partials only, a second kernel sums them in split order and
  writes C (deterministic, like `ordered`; vLLM's AWQ path does this with zeros + sum);
- last_waits: the other splits store their partial and bump the counter with a release add
  whose result nobody waits for; the last split (dispatched after them) waits for the counter,
  then sums in split order (the same order and result as `ordered`).
Median of 5 rounds, variants interleaved; cuBLAS per-tensor FP8 on the same problem.
Run from the repository root: python3 reports/kernels/data/call25/fp8_epilogue_probe.py
"""

import json
import os
import statistics
import sys
import types

sys.path.insert(0, ".")
import torch
import triton
import triton.language as tl

from kernels_tuning import bench
from kernels_tuning.kernels import fp8_block
from kernels_tuning.space import KernelConfig as C

OUT = os.environ.get("OUT", ".")
MODE: dict[str, str] = {"v": "ordered"}


@triton.jit
def _t_no_sync(acc, C, WS, LOCKS, offs_cn, offs_cm, tile, pid_k, M, N, stride_cm, stride_cn,
               SPLIT_K, ROWS: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    mask = (offs_cn[:, None] < N) & (offs_cm[None, :] < M)
    c_ptrs = C + offs_cm[None, :] * stride_cm + offs_cn[:, None] * stride_cn
    ws_ptrs = WS + offs_cm[None, :] * N + offs_cn[:, None]
    tl.store(ws_ptrs + pid_k * M * N, acc, mask=mask)
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask)


@triton.jit
def _t_counter_only(acc, C, WS, LOCKS, offs_cn, offs_cm, tile, pid_k, M, N, stride_cm, stride_cn,
                    SPLIT_K, ROWS: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    mask = (offs_cn[:, None] < N) & (offs_cm[None, :] < M)
    c_ptrs = C + offs_cm[None, :] * stride_cm + offs_cn[:, None] * stride_cn
    ws_ptrs = WS + offs_cm[None, :] * N + offs_cn[:, None]
    tl.store(ws_ptrs + pid_k * M * N, acc, mask=mask)
    tl.debug_barrier()
    arrived = tl.atomic_add(LOCKS + tile, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask)
        tl.atomic_xchg(LOCKS + tile, 0)


@triton.jit
def _t_relaxed(acc, C, WS, LOCKS, offs_cn, offs_cm, tile, pid_k, M, N, stride_cm, stride_cn,
               SPLIT_K, ROWS: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    mask = (offs_cn[:, None] < N) & (offs_cm[None, :] < M)
    c_ptrs = C + offs_cm[None, :] * stride_cm + offs_cn[:, None] * stride_cn
    ws_ptrs = WS + offs_cm[None, :] * N + offs_cn[:, None]
    tl.store(ws_ptrs + pid_k * M * N, acc, mask=mask)
    tl.debug_barrier()
    arrived = tl.atomic_add(LOCKS + tile, 1, sem="relaxed", scope="gpu")
    if arrived == SPLIT_K - 1:
        total = tl.zeros((ROWS, COLS), dtype=tl.float32)
        for s in range(SPLIT_K):
            total += tl.load(ws_ptrs + s * M * N, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(c_ptrs, total.to(C.dtype.element_ty), mask=mask)
        tl.atomic_xchg(LOCKS + tile, 0)


@triton.jit
def _t_store_only(acc, C, WS, LOCKS, offs_cn, offs_cm, tile, pid_k, M, N, stride_cm, stride_cn,
                  SPLIT_K, ROWS: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    mask = (offs_cn[:, None] < N) & (offs_cm[None, :] < M)
    ws_ptrs = WS + offs_cm[None, :] * N + offs_cn[:, None]
    tl.store(ws_ptrs + pid_k * M * N, acc, mask=mask)


@triton.jit
def _t_last_waits(acc, C, WS, LOCKS, offs_cn, offs_cm, tile, pid_k, M, N, stride_cm, stride_cn,
                  SPLIT_K, ROWS: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    mask = (offs_cn[:, None] < N) & (offs_cm[None, :] < M)
    c_ptrs = C + offs_cm[None, :] * stride_cm + offs_cn[:, None] * stride_cn
    ws_ptrs = WS + offs_cm[None, :] * N + offs_cn[:, None]
    if pid_k < SPLIT_K - 1:
        tl.store(ws_ptrs + pid_k * M * N, acc, mask=mask)
        tl.debug_barrier()
        tl.atomic_add(LOCKS + tile, 1, sem="release", scope="gpu")
    else:
        while tl.atomic_add(LOCKS + tile, 0, sem="acquire", scope="gpu") < SPLIT_K - 1:
            pass
        total = tl.zeros((ROWS, COLS), dtype=tl.float32)
        for s in range(SPLIT_K - 1):
            total += tl.load(ws_ptrs + s * M * N, mask=mask, other=0.0, cache_modifier=".cg")
        total += acc
        tl.store(c_ptrs, total.to(C.dtype.element_ty), mask=mask)
        tl.atomic_xchg(LOCKS + tile, 0)


@triton.jit
def _sum_splits(WS, C, MN, SPLIT_K, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLIT_K):
        total += tl.load(WS + s * MN + offs, mask=mask, other=0.0)
    tl.store(C + offs, total.to(C.dtype.element_ty), mask=mask)


def clone(jitfn, **overrides):
    f = jitfn.fn
    g = dict(f.__globals__)
    g.update(overrides)
    nf = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
    nf.__module__, nf.__qualname__ = f.__module__, f.__qualname__
    nf.__annotations__ = dict(f.__annotations__)
    nf.__kwdefaults__ = f.__kwdefaults__
    return triton.jit(do_not_specialize=list(getattr(jitfn, "do_not_specialize", ())))(nf)


class Switch:
    def __init__(self, variants):
        self.variants = variants

    def __getitem__(self, grid):
        return self.variants[MODE["v"]][grid]

    def __getattr__(self, name):
        return getattr(self.variants[MODE["v"]], name)


_k = fp8_block._fp8_block_kernel
fp8_block._fp8_block_kernel = Switch({
    "ordered": _k,
    "no_sync": clone(_k, store_tile_t=_t_no_sync),
    "counter_only": clone(_k, store_tile_t=_t_counter_only),
    "relaxed": clone(_k, store_tile_t=_t_relaxed),
    "store_only": clone(_k, store_tile_t=_t_store_only),
    "last_waits": clone(_k, store_tile_t=_t_last_waits),
})  # fmt: skip
VARIANTS = ("ordered", "no_sync", "counter_only", "relaxed", "two_kernels", "last_waits")


def launch(p, cfg, i, v):
    if v != "two_kernels":
        MODE["v"] = v
        p.launch(cfg, i)
        return
    MODE["v"] = "store_only"
    p.launch(cfg, i)
    mn = p.m * p.n
    ws = p._workspace(cfg.SPLIT_K)
    _sum_splits[(triton.cdiv(mn, 1024),)](ws, p.sets[i]["C"], mn, cfg.SPLIT_K, BLOCK=1024)


def main():
    rows = []
    with open(os.path.join(OUT, "fp8_epilogue_probe.log"), "w") as log:
        for m in (1, 16):
            for tiles in (1, 6):
                k = 128 * 4 * tiles
                p = bench.make_problem("fp8", m, 5120, k, baselines=True)
                cfg = C(16, 64, 128, 1, 4, 4, SPLIT_K=4, SWAP_AB=1, TMA=1)
                ok = {}
                for v in VARIANTS:
                    p.output(0).fill_(float("nan"))
                    launch(p, cfg, 0, v)
                    torch.cuda.synchronize()
                    ok[v] = bench.check_output(p.output(0), p.ref).ok
                s = p.sets

                def cublas(i):
                    return torch._scaled_mm(
                        s[i]["A_pt"], s[i]["B_pt"].t(), scale_a=s[i]["sa"], scale_b=s[i]["sb"],
                        out_dtype=torch.bfloat16,
                    )  # fmt: skip

                names = [*VARIANTS, "cublas"]
                times = {n: [] for n in names}
                after: dict[str, bool] = {}
                for _ in range(5):
                    for n in names:
                        if n == "cublas":
                            us = bench.time_graph(cublas, p.n_sets)[0]
                        else:
                            p.output(0).fill_(float("nan"))
                            us = bench.time_graph(lambda i, n=n: launch(p, cfg, i, n), p.n_sets)[0]
                            # the output of the timed back-to-back replays (races show here)
                            after[n] = (
                                after.get(n, True) and bench.check_output(p.output(0), p.ref).ok
                            )
                        times[n].append(us)
                MODE["v"] = "ordered"
                row = dict(m=m, k=k, tiles=tiles, gate_ok=ok, gate_after_timing=after,
                           **{n: statistics.median(t) for n, t in times.items()}, raw=times)  # fmt: skip
                rows.append(row)
                msg = (
                    f"M={m} K={k} ({tiles} tiles/program): "
                    + " ".join(f"{n} {row[n]:.2f}" for n in names)
                    + f" | gate {ok}"
                )
                print(msg, flush=True)
                print(msg, file=log, flush=True)
    with open(os.path.join(OUT, "fp8_epilogue_probe.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
