"""Probe (not shipped as is): the split-K epilogue with fp32 atomic adds.

Today (kernels/_common.py) each of the SPLIT_K programs of a tile stores its fp32 partial, then
bumps the tile's counter; the last to arrive loads all SPLIT_K partials, sums them in a fixed
order and writes C. `red` below has each program add its partial into one zeroed fp32 tile with
relaxed atomics; the last arriver loads that one tile, writes C and zeroes it again (the counter
protocol is unchanged). Fewer bytes for the last arriver (1 tile instead of SPLIT_K), but the sum
order is no longer fixed.

Both variants run the same kernel source: the variant is a second triton.jit of the same function
with `store_tile` / `store_tile_t` swapped in its globals. Per (kind, shape, M): the shipped config
and its SPLIT_K neighbours, every config gated in both variants, then the best of each re-timed
side by side twice (the faster kept). Also the launch floor (an empty kernel on the shipped grid)
and our INT4 kernel at K = 128 x SPLIT_K (one K tile per program: the fixed cost).
Run from the repository root: python3 reports/kernels/data/call25/splitk_red_probe.py

Ran in calls 25 and 27-31 on the kernels of commit 32e2db6 (before ATOMIC_REDUCE joined the INT4
kernels and bench.Problem._workspace took its flag); to run it again, check out that commit's
kernels_tuning/ first.
"""

import json
import os
import sys
import time
import types

sys.path.insert(0, ".")
import torch
import triton
import triton.language as tl

from kernels_tuning import bench, shim
from kernels_tuning.kernels import fp8_block, int4_awq_planes, int4_w4a16
from kernels_tuning.space import KernelConfig as C

OUT = os.environ.get("OUT", ".")
DEADLINE = time.monotonic() + float(os.environ.get("PROBE_BUDGET_S", "500"))
VARIANT = {"v": "base"}
VARIANTS = ("base", "red", "u4")


@triton.jit
def store_tile_red(acc, C, WS, LOCKS, pid_m, pid_n, pid_k, M, N, stride_cm, stride_cn, SPLIT_K,
                   BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):  # fmt: skip
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    c_ptrs = C + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask)
    else:
        ws_ptrs = WS + offs_cm[:, None] * N + offs_cn[None, :]
        tl.atomic_add(ws_ptrs, acc, mask=mask, sem="relaxed")
        tl.debug_barrier()
        tile = pid_m * tl.cdiv(N, BLOCK_SIZE_N) + pid_n
        arrived = tl.atomic_add(LOCKS + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.load(ws_ptrs, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(c_ptrs, total.to(C.dtype.element_ty), mask=mask)
            tl.store(ws_ptrs, tl.zeros_like(total), mask=mask)
            tl.atomic_xchg(LOCKS + tile, 0)


@triton.jit
def store_tile_t_red(acc, C, WS, LOCKS, offs_cn, offs_cm, tile, pid_k, M, N, stride_cm, stride_cn,
                     SPLIT_K, ROWS: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    mask = (offs_cn[:, None] < N) & (offs_cm[None, :] < M)
    c_ptrs = C + offs_cm[None, :] * stride_cm + offs_cn[:, None] * stride_cn
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask)
    else:
        ws_ptrs = WS + offs_cm[None, :] * N + offs_cn[:, None]
        tl.atomic_add(ws_ptrs, acc, mask=mask, sem="relaxed")
        tl.debug_barrier()
        arrived = tl.atomic_add(LOCKS + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.load(ws_ptrs, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(c_ptrs, total.to(C.dtype.element_ty), mask=mask)
            tl.store(ws_ptrs, tl.zeros_like(total), mask=mask)
            tl.atomic_xchg(LOCKS + tile, 0)


@triton.jit
def _sum_partials(ws_ptrs, mask, M, N, SPLIT_K, ROWS: tl.constexpr, COLS: tl.constexpr):
    """The fixed-order sum of the current epilogue, four partials loaded at once (one L2 round
    trip per four instead of one per partial); masked-out partials add 0.0."""
    total = tl.zeros((ROWS, COLS), dtype=tl.float32)
    for s0 in range(0, SPLIT_K, 4):
        p0 = tl.load(ws_ptrs + s0 * M * N, mask=mask, other=0.0, cache_modifier=".cg")
        p1 = tl.load(ws_ptrs + (s0 + 1) * M * N, mask=mask & (s0 + 1 < SPLIT_K), other=0.0,
                     cache_modifier=".cg")  # fmt: skip
        p2 = tl.load(ws_ptrs + (s0 + 2) * M * N, mask=mask & (s0 + 2 < SPLIT_K), other=0.0,
                     cache_modifier=".cg")  # fmt: skip
        p3 = tl.load(ws_ptrs + (s0 + 3) * M * N, mask=mask & (s0 + 3 < SPLIT_K), other=0.0,
                     cache_modifier=".cg")  # fmt: skip
        total = total + p0 + p1 + p2 + p3
    return total


@triton.jit
def store_tile_u4(acc, C, WS, LOCKS, pid_m, pid_n, pid_k, M, N, stride_cm, stride_cn, SPLIT_K,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):  # fmt: skip
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    c_ptrs = C + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask)
    else:
        ws_ptrs = WS + offs_cm[:, None] * N + offs_cn[None, :]
        tl.store(ws_ptrs + pid_k * M * N, acc, mask=mask)
        tl.debug_barrier()
        tile = pid_m * tl.cdiv(N, BLOCK_SIZE_N) + pid_n
        arrived = tl.atomic_add(LOCKS + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = _sum_partials(ws_ptrs, mask, M, N, SPLIT_K, BLOCK_SIZE_M, BLOCK_SIZE_N)
            tl.store(c_ptrs, total.to(C.dtype.element_ty), mask=mask)
            tl.atomic_xchg(LOCKS + tile, 0)


@triton.jit
def store_tile_t_u4(acc, C, WS, LOCKS, offs_cn, offs_cm, tile, pid_k, M, N, stride_cm, stride_cn,
                    SPLIT_K, ROWS: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    mask = (offs_cn[:, None] < N) & (offs_cm[None, :] < M)
    c_ptrs = C + offs_cm[None, :] * stride_cm + offs_cn[:, None] * stride_cn
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask)
    else:
        ws_ptrs = WS + offs_cm[None, :] * N + offs_cn[:, None]
        tl.store(ws_ptrs + pid_k * M * N, acc, mask=mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(LOCKS + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = _sum_partials(ws_ptrs, mask, M, N, SPLIT_K, ROWS, COLS)
            tl.store(c_ptrs, total.to(C.dtype.element_ty), mask=mask)
            tl.atomic_xchg(LOCKS + tile, 0)


@triton.jit
def _empty(X):
    pass


def clone(jitfn, **overrides):
    f = jitfn.fn
    g = dict(f.__globals__)
    g.update(overrides)
    nf = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
    nf.__module__, nf.__qualname__ = f.__module__, f.__qualname__
    nf.__annotations__ = dict(f.__annotations__)  # tl.constexpr parameters
    nf.__kwdefaults__ = f.__kwdefaults__
    return triton.jit(do_not_specialize=list(getattr(jitfn, "do_not_specialize", ())))(nf)


class Switch:
    def __init__(self, variants):
        self.variants = variants

    def __getitem__(self, grid):
        return self.variants[VARIANT["v"]][grid]

    def __getattr__(self, name):
        return getattr(self.variants[VARIANT["v"]], name)


_fp8 = fp8_block._fp8_block_kernel
fp8_block._fp8_block_kernel = Switch({
    "base": _fp8,
    "red": clone(_fp8, store_tile=store_tile_red, store_tile_t=store_tile_t_red),
    "u4": clone(_fp8, store_tile=store_tile_u4, store_tile_t=store_tile_t_u4),
})  # fmt: skip
_pl = int4_awq_planes._awq_planes_kernel
int4_awq_planes._awq_planes_kernel = Switch({
    "base": _pl,
    "red": clone(_pl, store_tile=store_tile_red),
    "u4": clone(_pl, store_tile=store_tile_u4),
})  # fmt: skip
_w4 = int4_w4a16._w4a16_kernel
int4_w4a16._w4a16_kernel = Switch({
    "base": _w4,
    "red": clone(_w4, store_tile=store_tile_red, store_tile_t=store_tile_t_red),
    "u4": clone(_w4, store_tile=store_tile_u4, store_tile_t=store_tile_t_u4),
})  # fmt: skip


class ZeroWs(bench.Problem):
    """The red variant needs a zeroed workspace (each last arriver re-zeroes its tile)."""

    def _workspace(self, split_k):
        if split_k == 1:
            return None
        key = f"ws{split_k}-{VARIANT['v']}"  # base leaves partials in its own
        ws = self.extras.get(key)
        if ws is None:
            ws = torch.zeros((split_k, self.m, self.n), dtype=torch.float32,
                             device=self.sets[0]["C"].device)  # fmt: skip
            self.extras[key] = ws
        return ws


def problem(kind, m, n, k):
    p = bench.make_problem(kind, m, n, k, baselines=False)
    p.__class__ = ZeroWs
    return p


def variants(shipped):
    sks = sorted({shipped.SPLIT_K, 1, 2, 3, 4, 6, 8, 12})
    return [shipped] + [
        C(**{**shipped.__dict__, "SPLIT_K": sk}) for sk in sks if sk != shipped.SPLIT_K
    ]


def run_item(kind, n, k, m, log, rows):
    p = problem(kind, m, n, k)
    shipped = shim.get_config(kind, n, k, m, check_provenance=False)
    cands = [
        c for c in variants(shipped) if (k // c.BLOCK_SIZE_K) >= 2 * c.SPLIT_K or c == shipped
    ]
    res = {}
    for v in VARIANTS:
        VARIANT["v"] = v
        ev = bench.Evaluator(p, reject_ratio=1e9)
        for c in cands:
            r = ev(c)
            res[f"{v} {c.key()}"] = r.us if r.ok else None
            if not r.ok:
                print("FAIL", kind, n, k, m, v, c.key(), r.error, file=log, flush=True)
    best = {}
    for v in VARIANTS:
        ok = {kk: t for kk, t in res.items() if kk.startswith(v) and t is not None}
        if ok:
            best[v] = min(ok, key=ok.get)
    cmap = {c.key(): c for c in cands}
    rt = {}
    for _ in range(2):
        for v, kk in best.items():
            VARIANT["v"] = v
            c = cmap[kk.split(" ", 1)[1]]
            us, _ = bench.time_graph(lambda i, c=c: p.launch(c, i), p.n_sets)
            rt[v] = min(rt.get(v, 1e9), us)
    VARIANT["v"] = "base"
    sk0 = f"base {shipped.key()}"
    row = dict(kind=kind, n=n, k=k, m=m, shipped=shipped.key(), shipped_us=res.get(sk0),
               best=best, best_us=rt, all=res)  # fmt: skip
    rows.append(row)
    msg = f"{kind} {n}x{k} M={m}: " + " | ".join(f"{v} {best[v]} {rt[v]:.2f}" for v in best)
    for v in VARIANTS[1:]:
        if "base" in rt and v in rt:
            msg += f" | base/{v} {rt['base'] / rt[v]:.3f}"
    print(msg, flush=True)
    print(msg, file=log, flush=True)


def floors(log, rows):
    """Launch floor (empty kernel, shipped grid) and the INT4 plane kernel's fixed cost."""
    x = torch.zeros(1, device="cuda")
    for progs, warps in ((120, 4), (240, 4), (80, 4)):
        us = bench.time_callable(lambda i: _empty[(progs,)](x, num_warps=warps), 8)
        rows.append(dict(kind="floor", programs=progs, warps=warps, us=us))
        print(f"empty kernel {progs} programs w{warps}: {us:.2f} us", file=log, flush=True)
    cfg = C(16, 256, 128, 1, 4, 3, SPLIT_K=6)
    for m in (1, 16):
        for kt in (1, 2, 4, 8):
            p = problem("int4", m, 5120, 128 * 6 * kt)
            ev = bench.Evaluator(p, reject_ratio=1e9)
            r = ev(cfg)
            rows.append(dict(kind="fixed", m=m, n=5120, k=128 * 6 * kt, k_tiles=kt, us=r.us))
            print(f"int4 planes 5120x{128 * 6 * kt} M={m} sk6 ({kt} K tiles/program): {r.us} us",
                  file=log, flush=True)  # fmt: skip


SHAPES = [(5120, 3072), (5120, 6144), (7168, 5120), (8192, 5120), (5120, 8704), (34816, 5120)]


def main():
    rows = []
    with open(os.path.join(OUT, "splitk_red_probe.log"), "w") as log:
        floors(log, rows)
        for kind in ("int4", "fp8"):
            for m in (1, 16):
                for n, k in SHAPES:
                    if time.monotonic() > DEADLINE:
                        print("deadline", kind, n, k, m, file=log, flush=True)
                        continue
                    run_item(kind, n, k, m, log, rows)
                    with open(os.path.join(OUT, "splitk_red_probe.json"), "w") as f:
                        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
