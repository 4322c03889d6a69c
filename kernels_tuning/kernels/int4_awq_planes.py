# mypy: disable-error-code="no-untyped-def,untyped-decorator"
"""AWQ W4A16 for decode-sized tiles (BLOCK_SIZE_M = 16): dequantization two weights per 32-bit
operation in inline PTX, one MMA per nibble plane. `int4_w4a16.w4a16_matmul` dispatches here
for the configs `uses_planes` accepts; the math is the same as the main kernel's.

Why: at M <= 16 the main kernel's dequantization (about 15 instructions per weight, plus the
interleave relayout) made it no faster than bf16 `torch.matmul` on an H200 (0.9x,
reports/kernels/README.md). AWQ's nibble order puts columns 2i and 2i+1 of a packed word in bits
4i and 16 + 4i, so one `lop3.b32 v, w >> 4i, 0x000F000F, MAGIC` yields the pair (B + q, B + q')
as bf16x2 (B = 128, MAGIC 0x43004300) or f16x2 (B = 1024, 0x64006400), exactly. Subtracting the
pair (B + z, B + z') is exact too, and one `mul.rn` by the scale pair rounds once, as the
reference does: the weights are bit-identical to the main kernel's. About 2.5 instructions per
weight. The 8 planes (columns 8c + j of the tile) each feed one tl.dot with N = BLOCK_SIZE_N / 8;
the 8 fp32 accumulators are interleaved back into column order once per output tile.

Under TRITON_INTERPRET (CPU tests) inline PTX cannot run: `_pair` computes the same pairs with
Triton integer and fp16 operations (the interpreter has no bf16 arithmetic; the bf16 PTX path is
checked by the GPU tests and compiled for sm_90 on the CPU by tests/kernels_tuning).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import triton
import triton.language as tl

from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.kernels._atomic import store_tile_split
from kernels_tuning.kernels._common import grouped_pid, k_tile_range

if TYPE_CHECKING:
    import torch


def _asm(op: str, magic: str) -> str:
    """One packed word ($4) -> 4 pairs ($0..$3, columns (0,1) (2,3) (4,5) (6,7)); zero pairs
    $5..$8 (B + z, already biased), scale pairs $9..$12."""
    lines = ["{", ".reg .b32 v, t;"]
    for i in range(4):
        src = "$4"
        if i:
            lines.append(f"shr.u32 t, $4, {4 * i};")
            src = "t"
        lines += [
            f"lop3.b32 v, {src}, 0x000F000F, {magic}, 0xEA;",  # (src & mask) | magic
            f"sub.rn.{op} v, v, ${5 + i};",
            f"mul.rn.{op} ${i}, v, ${9 + i};",
        ]
    lines.append("}")
    return "\n".join(lines)


ASM_BF16: tl.constexpr = tl.constexpr(_asm("bf16x2", "0x43004300"))
ASM_F16: tl.constexpr = tl.constexpr(_asm("f16x2", "0x64006400"))
CONSTRAINTS: tl.constexpr = tl.constexpr("=r,=r,=r,=r," + ",".join(["r"] * 9))


def uses_planes(cfg: KernelConfig, packing: str) -> bool:
    """Configs this path serves: AWQ, tokens on the MMA's M side in one 16-row tile, and planes
    at least 16 columns wide (tl.dot's minimum)."""
    return (
        packing == "awq"
        and not cfg.SWAP_AB
        and cfg.BLOCK_SIZE_M == 16
        and cfg.BLOCK_SIZE_N >= 128
        and cfg.BLOCK_SIZE_K >= 16
    )


def available(act_dtype: torch.dtype, device: torch.device | str) -> bool:
    """Whether this path can run: `sub/mul.rn.bf16x2` need sm_90 (Hopper), the f16x2 forms
    sm_53; the interpreter runs the Triton stand-in (fp16 only). Elsewhere the main kernel
    serves the same configs."""
    import torch

    if interpreting():
        return bool(act_dtype == torch.float16)
    if torch.device(device).type != "cuda":
        return False
    major, minor = torch.cuda.get_device_capability(device)
    return (major, minor) >= ((9, 0) if act_dtype == torch.bfloat16 else (5, 3))


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def _half(p, HI: tl.constexpr, DTYPE: tl.constexpr):
    """The low or high 16 bits of int32 `p` as DTYPE."""
    if HI:
        p = p >> 16
    return (p & 0xFFFF).to(tl.int16).to(DTYPE, bitcast=True)


@triton.jit
def _pair(qw, P: tl.constexpr, zb, sp, DTYPE: tl.constexpr):
    """Interpreter stand-in for one lop3/sub/mul pair of the PTX: columns (2P, 2P+1) -> two
    DTYPE tensors."""
    lo = _half((qw >> (4 * P)) & 0xF | 0x6400, False, tl.float16)
    hi = _half((qw >> (16 + 4 * P)) & 0xF | 0x6400, False, tl.float16)
    w_lo = (lo - _half(zb, False, tl.float16)) * _half(sp, False, tl.float16)
    w_hi = (hi - _half(zb, True, tl.float16)) * _half(sp, True, tl.float16)
    return w_lo.to(DTYPE), w_hi.to(DTYPE)


@triton.jit(do_not_specialize=["M", "GROUP_SIZE_M", "SPLIT_K", "ATOMIC"])
def _awq_planes_kernel(
    A,
    QW,
    QZ,
    S32,
    C,
    WS,
    LOCKS,
    M,
    N,
    K,
    group_size,
    stride_am,
    stride_qk,
    stride_zg,
    stride_sg,
    stride_cm,
    GROUP_SIZE_M,
    SPLIT_K,
    ATOMIC,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    USE_ASM: tl.constexpr,
):
    DTYPE: tl.constexpr = A.dtype.element_ty
    BW: tl.constexpr = BLOCK_SIZE_N // 8  # packed words (and columns of each plane) per tile
    MAGIC: tl.constexpr = 0x43004300 if DTYPE == tl.bfloat16 else 0x64006400
    pid = tl.program_id(axis=0)
    pid_k = tl.program_id(axis=1)
    pid_m, pid_n = grouped_pid(pid, M, N, GROUP_SIZE_M, BLOCK_SIZE_M, BLOCK_SIZE_N)
    offs_m = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_w = (pid_n * BW + tl.arange(0, BW)) % (N // 8)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    k_first, k_last = k_tile_range(K, pid_k, SPLIT_K, BLOCK_SIZE_K)
    k0 = k_first * BLOCK_SIZE_K
    a_ptrs = A + offs_m[:, None] * stride_am + (k0 + offs_k)[None, :]
    q_ptrs = QW + (k0 + offs_k)[:, None] * stride_qk + offs_w[None, :]
    acc0 = tl.zeros((BLOCK_SIZE_M, BW), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_SIZE_M, BW), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_SIZE_M, BW), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_SIZE_M, BW), dtype=tl.float32)
    acc4 = tl.zeros((BLOCK_SIZE_M, BW), dtype=tl.float32)
    acc5 = tl.zeros((BLOCK_SIZE_M, BW), dtype=tl.float32)
    acc6 = tl.zeros((BLOCK_SIZE_M, BW), dtype=tl.float32)
    acc7 = tl.zeros((BLOCK_SIZE_M, BW), dtype=tl.float32)
    for kt in range(k_first, k_last):
        a = tl.load(a_ptrs)
        qw = tl.load(q_ptrs)
        g = (kt * BLOCK_SIZE_K) // group_size
        zw = tl.load(QZ + g * stride_zg + offs_w)
        sp = S32 + g * stride_sg + offs_w * 4  # scale pairs (8c + 2i, 8c + 2i + 1) at 4c + i
        # Biased zero pairs, once per K tile and column (not per weight).
        z0 = tl.broadcast_to(((zw & 0x000F000F) | MAGIC)[None, :], (BLOCK_SIZE_K, BW))
        z1 = tl.broadcast_to((((zw >> 4) & 0x000F000F) | MAGIC)[None, :], (BLOCK_SIZE_K, BW))
        z2 = tl.broadcast_to((((zw >> 8) & 0x000F000F) | MAGIC)[None, :], (BLOCK_SIZE_K, BW))
        z3 = tl.broadcast_to((((zw >> 12) & 0x000F000F) | MAGIC)[None, :], (BLOCK_SIZE_K, BW))
        s0 = tl.broadcast_to(tl.load(sp)[None, :], (BLOCK_SIZE_K, BW))
        s1 = tl.broadcast_to(tl.load(sp + 1)[None, :], (BLOCK_SIZE_K, BW))
        s2 = tl.broadcast_to(tl.load(sp + 2)[None, :], (BLOCK_SIZE_K, BW))
        s3 = tl.broadcast_to(tl.load(sp + 3)[None, :], (BLOCK_SIZE_K, BW))
        if USE_ASM:
            if DTYPE == tl.bfloat16:
                p0, p1, p2, p3 = tl.inline_asm_elementwise(
                    ASM_BF16,
                    CONSTRAINTS,
                    [qw, z0, z1, z2, z3, s0, s1, s2, s3],
                    dtype=(tl.int32, tl.int32, tl.int32, tl.int32),
                    is_pure=True,
                    pack=1,
                )
            else:
                p0, p1, p2, p3 = tl.inline_asm_elementwise(
                    ASM_F16,
                    CONSTRAINTS,
                    [qw, z0, z1, z2, z3, s0, s1, s2, s3],
                    dtype=(tl.int32, tl.int32, tl.int32, tl.int32),
                    is_pure=True,
                    pack=1,
                )
            w0, w1 = _half(p0, False, DTYPE), _half(p0, True, DTYPE)
            w2, w3 = _half(p1, False, DTYPE), _half(p1, True, DTYPE)
            w4, w5 = _half(p2, False, DTYPE), _half(p2, True, DTYPE)
            w6, w7 = _half(p3, False, DTYPE), _half(p3, True, DTYPE)
        else:
            w0, w1 = _pair(qw, 0, z0, s0, DTYPE)
            w2, w3 = _pair(qw, 1, z1, s1, DTYPE)
            w4, w5 = _pair(qw, 2, z2, s2, DTYPE)
            w6, w7 = _pair(qw, 3, z3, s3, DTYPE)
        acc0 = tl.dot(a, w0, acc0)
        acc1 = tl.dot(a, w1, acc1)
        acc2 = tl.dot(a, w2, acc2)
        acc3 = tl.dot(a, w3, acc3)
        acc4 = tl.dot(a, w4, acc4)
        acc5 = tl.dot(a, w5, acc5)
        acc6 = tl.dot(a, w6, acc6)
        acc7 = tl.dot(a, w7, acc7)
        a_ptrs += BLOCK_SIZE_K
        q_ptrs += BLOCK_SIZE_K * stride_qk
    # Plane j holds columns 8c + j. Interleaving (0,4) (2,6) (1,5) (3,7), then (04,26) and
    # (15,37), then the two halves, puts plane j's column c at 8c + 4t + 2u + v where
    # j = v + 2u + 4t: column order.
    m02 = tl.interleave(tl.interleave(acc0, acc4), tl.interleave(acc2, acc6))
    m13 = tl.interleave(tl.interleave(acc1, acc5), tl.interleave(acc3, acc7))
    acc = tl.interleave(m02, m13)
    store_tile_split(
        acc,
        C,
        WS,
        LOCKS,
        pid_m,
        pid_n,
        pid_k,
        M,
        N,
        stride_cm,
        1,
        SPLIT_K,
        ATOMIC,
        BLOCK_SIZE_M,
        BLOCK_SIZE_N,
    )


def launch(
    a2: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    c: torch.Tensor,
    ws: torch.Tensor,
    locks: torch.Tensor,
    cfg: KernelConfig,
    group_size: int,
) -> None:
    """a2 [M, K], c [M, N] (rows contiguous), scales [K/G, N] in a2's dtype; `ws` a zeroed fp32
    [M, N] workspace when cfg.ATOMIC_REDUCE (kernels/_atomic.py)."""
    import torch

    if not available(a2.dtype, a2.device):
        raise ValueError(f"the AWQ plane kernel cannot run {a2.dtype} on {a2.device}")
    if c.stride(1) != 1:
        raise ValueError("the AWQ plane kernel writes rows of C contiguously")
    a2, qweight, qzeros = a2.contiguous(), qweight.contiguous(), qzeros.contiguous()
    if scales.stride(-1) != 1 or scales.stride(0) % 2 or scales.storage_offset() % 2:
        scales = scales.clone(memory_format=torch.contiguous_format)
    s32 = scales.view(torch.int32)  # pairs of scales as 4-byte words
    m, k = a2.shape
    n = c.shape[1]
    grid = (triton.cdiv(m, cfg.BLOCK_SIZE_M) * triton.cdiv(n, cfg.BLOCK_SIZE_N), cfg.SPLIT_K)
    _awq_planes_kernel[grid](
        a2,
        qweight,
        qzeros,
        s32,
        c,
        ws,
        locks,
        m,
        n,
        k,
        group_size,
        a2.stride(0),
        qweight.stride(0),
        qzeros.stride(0),
        s32.stride(0),
        c.stride(0),
        cfg.GROUP_SIZE_M,
        cfg.SPLIT_K,
        int(cfg.ATOMIC_REDUCE and cfg.SPLIT_K > 1),
        BLOCK_SIZE_M=cfg.BLOCK_SIZE_M,
        BLOCK_SIZE_N=cfg.BLOCK_SIZE_N,
        BLOCK_SIZE_K=cfg.BLOCK_SIZE_K,
        USE_ASM=not interpreting(),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def warmup(cfg: KernelConfig, act_dtype: torch.dtype, n: int, k: int, group_size: int) -> None:
    """Compile without launching; arguments mirror `launch` (the same cache key)."""
    import torch

    i32 = torch.int32
    _awq_planes_kernel.warmup(
        act_dtype, i32, i32, i32, act_dtype, torch.float32, i32,
        16, n, k, group_size, k, n // 8, n // 8, n // 2, n, 1, 1, 0,
        BLOCK_SIZE_M=cfg.BLOCK_SIZE_M, BLOCK_SIZE_N=cfg.BLOCK_SIZE_N,
        BLOCK_SIZE_K=cfg.BLOCK_SIZE_K, USE_ASM=not interpreting(),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, grid=(1,),
    )  # fmt: skip
