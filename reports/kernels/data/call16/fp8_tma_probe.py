"""Probe (call 16, not shipped): the FP8 block-scaled GEMM at large M with TMA loads (host tensor
descriptors) and Triton's warp specialization (`tl.range(..., warp_specialize=True)`), against
the shipped own-file config of the same tile run by kernels/fp8_block.py. Same math as the
shipped FOLD_SCALES path (BN divides the 128-row weight block, one weight scale per tile)."""

import json
import os
import sys
import time

sys.path.insert(0, ".")
import torch
import triton
import triton.language as tl

from kernels_tuning import bench, shim
from kernels_tuning.kernels._common import grouped_pid


@triton.jit
def fp8_tma_kernel(
    a_desc, b_desc, C, As, Bs, M, N, K, stride_cm, stride_As_m, stride_Bs_n,
    GROUP_SIZE_M, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr, NUM_STAGES: tl.constexpr, WS: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(axis=0)
    pid_m, pid_n = grouped_pid(pid, M, N, GROUP_SIZE_M, BLOCK_SIZE_M, BLOCK_SIZE_N)
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    as_ptrs = As + offs_am * stride_As_m
    bs_ptr = Bs + ((pid_n * BLOCK_SIZE_N) // 128) * stride_Bs_n
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    k_tiles = K // BLOCK_SIZE_K
    for kt in tl.range(0, k_tiles, num_stages=NUM_STAGES, warp_specialize=WS):
        a = a_desc.load([pid_m * BLOCK_SIZE_M, kt * BLOCK_SIZE_K])
        b = b_desc.load([pid_n * BLOCK_SIZE_N, kt * BLOCK_SIZE_K])
        s = tl.load(as_ptrs + kt) * tl.load(bs_ptr + kt)
        acc += tl.dot(a, b.T) * s[:, None]
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(C + offs_cm[:, None] * stride_cm + offs_cn[None, :], acc.to(tl.bfloat16), mask=mask)


def launch(s, bm, bn, bk, g, warps, stages, ws):
    from triton.tools.tensor_descriptor import TensorDescriptor

    a, b, c = s["A"], s["B"], s["C"]
    m, k = a.shape
    n = b.shape[0]
    key = ("desc", bm, bn, bk)
    if key not in s:
        s[key] = (
            TensorDescriptor.from_tensor(a, [bm, bk]),
            TensorDescriptor.from_tensor(b, [bn, bk]),
        )
    ad, bd = s[key]
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    fp8_tma_kernel[grid](
        ad, bd, c, s["As"], s["Bs"], m, n, k, c.stride(0), s["As"].stride(0),
        s["Bs"].stride(0), g, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk,
        NUM_STAGES=stages, WS=ws, num_warps=warps, num_stages=stages,
    )  # fmt: skip


SHAPES = [(34816, 5120), (5120, 17408), (14336, 5120), (5120, 8704), (8192, 5120), (5120, 3072)]
MS = [int(x) for x in os.environ.get("PROBE_MS", "1024,3072").split(",")]
TILES = [(64, 128, 128, 4, 3), (64, 128, 128, 4, 4), (128, 128, 128, 8, 3), (128, 128, 128, 8, 4)]
t0 = time.time()
out = []
for n, k in SHAPES:
    for m in MS:
        p = bench.make_problem("fp8", m, n, k)
        shipped = shim.get_config("fp8", n, k, m, check_provenance=False)
        res = {}
        for bm, bn, bk, w, st in TILES:
            for ws in (False, True):
                name = f"tma m{bm}n{bn}k{bk}w{w}s{st}{' ws' if ws else ''}"
                try:
                    launch(p.sets[0], bm, bn, bk, shipped.GROUP_SIZE_M, w, st, ws)
                    torch.cuda.synchronize()
                    chk = bench.check_output(p.output(0), p.ref)
                    if not chk.ok:
                        res[name] = f"gate: {chk.detail}"
                        continue
                    us, _ = bench.time_graph(
                        lambda i, a=(bm, bn, bk, shipped.GROUP_SIZE_M, w, st, ws): launch(
                            p.sets[i], *a
                        ),
                        p.n_sets,
                    )
                    res[name] = us
                except Exception as exc:  # a config this Triton cannot build
                    res[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
        ship_us = min(
            bench.time_graph(lambda i: p.launch(shipped, i), p.n_sets)[0] for _ in range(2)
        )
        timed = {kk: v for kk, v in res.items() if isinstance(v, float)}
        best = min(timed, key=timed.get) if timed else None
        row = dict(n=n, k=k, m=m, shipped=shipped.key(), shipped_us=ship_us, all=res, best=best)
        out.append(row)
        tf = 2 * m * n * k / 1e6
        msg = f"best {best} {timed[best]:.1f} us ({tf / timed[best]:.0f} TF/s)" if best else "none"
        print(
            f"[{time.time() - t0:6.1f}s] {n}x{k} M={m}: shipped {shipped.key()} {ship_us:.1f} us "
            f"({tf / ship_us:.0f} TF/s) | {msg}",
            flush=True,
        )
        for kk, v in res.items():
            if not isinstance(v, float):
                print("   ", kk, v, flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "tma_probe.json"), "w"), indent=1)
