# mypy: disable-error-code="no-untyped-def,untyped-decorator"
"""The Triton code of the INT4 W4A16 GEMM (kernels/int4_w4a16.py: the packings, the host wrapper
that checks and launches, the reference). AWQ_ORDER there is the nibble order the AWQ paths read.

Dequantization without int->float converts (16 per clock per SM on Hopper, a bottleneck at small
M): OR-ing the nibble into the mantissa of 128.0 (bf16 0x4300) or 1024.0 (fp16 0x6400) and
bitcasting gives 128 + q exactly; subtracting 128 + z is exact, so w = (v - (128 + z)) * s has one
rounding, the same as rounding the fp32 product (the reference does exactly that).

Triton's CPU interpreter (3.6) stores bf16 as raw uint16 and cannot do bf16 arithmetic or dots,
so CPU tests run this kernel with fp16 activations; the bf16 path is checked on the GPU (the
correctness gate runs every candidate config in bf16, and the GPU tests).

SPLIT_K and GROUP_SIZE_M are tunable runtime arguments (kernels/_common.py), and so is
ATOMIC_REDUCE, the split-K sum by fp32 atomic adds (kernels/_atomic.py). BLOCK_SIZE_K must divide
the group size (one zero/scale row per K tile).

SWAP_AB (constexpr, ours only) selects a second path for small M: the transposed tile
C^T = W^T A^T with the dequantized weights on the MMA's M side (on Hopper the side wgmma can
take from registers, and from 64 rows, where the tokens alone would pad to 16 rows of mma.sync),
decoded by nibble plane instead of the interleave (AWQ) / broadcast+reshape (GPTQ) relayout of
the SWAP_AB=0 path (`_w4a16_swapped`). It needs BLOCK_SIZE_K = 128 and BLOCK_SIZE_N >= 128
on the GPU (each plane operand is at least 16 deep/wide; kernels_tuning/space.py).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels_tuning.kernels._atomic import store_tile_split, store_tile_t_split
from kernels_tuning.kernels._common import grouped_pid, k_tile_range


@triton.jit
def _biased(x, DTYPE: tl.constexpr):
    """int32 in 0..255 -> DTYPE holding 128 + x (bf16) or 1024 + x (fp16), no convert."""
    if DTYPE == tl.bfloat16:
        return (x | 0x4300).to(tl.int16).to(tl.bfloat16, bitcast=True)
    else:
        return (x | 0x6400).to(tl.int16).to(tl.float16, bitcast=True)


@triton.jit
def _awq_plane(qp, zp, sw, P: tl.constexpr, DTYPE: tl.constexpr):
    """Nibble plane P of a transposed AWQ tile: qp [BN/8, BK] packed words -> the dequantized
    weights of output columns 8c + AWQ_ORDER[P], as [BN/8, BK] (one shift and mask, no
    relayout). zp [BN/8]: the packed zeros of the group. sw [BN/8]: 32-bit words of the scales
    row, word 4c + P % 4, whose low half is column 8c + 2 (P % 4) and high half the next
    column: AWQ_ORDER[P] = 2 (P % 4) + P // 4."""
    q = (qp >> (4 * P)) & 0xF
    z = (zp >> (4 * P)) & 0xF
    if P >= 4:
        s = (sw >> 16).to(tl.int16).to(DTYPE, bitcast=True)
    else:
        s = sw.to(tl.int16).to(DTYPE, bitcast=True)
    return (_biased(q, DTYPE) - _biased(z, DTYPE)[:, None]) * s[:, None]


@triton.jit
def _gptq_plane(qp, zb, s, P: tl.constexpr, DTYPE: tl.constexpr):
    """Nibble plane P of a transposed GPTQ tile: qp [BN, BK/8] packed words -> the dequantized
    weights of rows k0 + 8r + P, as [BN, BK/8]; zb, s [BN, 1] biased zeros and scales."""
    return (_biased((qp >> (4 * P)) & 0xF, DTYPE) - zb) * s


@triton.jit
def _split8(x, R: tl.constexpr, C: tl.constexpr):
    """x [R, C, 8] -> x[:, :, 0], ..., x[:, :, 7] (register splits, no memory)."""
    e, o = tl.split(tl.reshape(x, (R, C, 4, 2)))  # e: 0 2 4 6, o: 1 3 5 7
    ee, eo = tl.split(tl.reshape(e, (R, C, 2, 2)))  # ee: 0 4, eo: 2 6
    oe, oo = tl.split(tl.reshape(o, (R, C, 2, 2)))  # oe: 1 5, oo: 3 7
    x0, x4 = tl.split(ee)
    x2, x6 = tl.split(eo)
    x1, x5 = tl.split(oe)
    x3, x7 = tl.split(oo)
    return x0, x1, x2, x3, x4, x5, x6, x7


@triton.jit
def _cat_rows(a, b, R: tl.constexpr, COLS: tl.constexpr):
    """[R, COLS] and [R, COLS] -> [2R, COLS], a's rows first (epilogue only)."""
    return tl.reshape(tl.permute(tl.join(a, b), (2, 0, 1)), (2 * R, COLS))


@triton.jit(do_not_specialize=["M", "GROUP_SIZE_M", "SPLIT_K", "ATOMIC", "zero_offset"])
def _w4a16_kernel(
    A,
    QW,
    QZ,
    S,
    C,
    WS,
    LOCKS,
    M,
    N,
    K,
    group_size,
    zero_offset,
    stride_am,
    stride_ak,
    stride_qk,
    stride_qn,
    stride_zg,
    stride_zn,
    stride_sg,
    stride_sn,
    stride_cm,
    stride_cn,
    GROUP_SIZE_M,
    SPLIT_K,
    ATOMIC,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    AWQ: tl.constexpr,
    SWAP_AB: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    pid_k = tl.program_id(axis=1)
    pid_m, pid_n = grouped_pid(pid, M, N, GROUP_SIZE_M, BLOCK_SIZE_M, BLOCK_SIZE_N)
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    k_first, k_last = k_tile_range(K, pid_k, SPLIT_K, BLOCK_SIZE_K)
    k0 = k_first * BLOCK_SIZE_K
    if SWAP_AB:
        _w4a16_swapped(
            A,
            QW,
            QZ,
            S,
            C,
            WS,
            LOCKS,
            M,
            N,
            group_size,
            zero_offset,
            stride_am,
            stride_ak,
            stride_qk,
            stride_qn,
            stride_zg,
            stride_zn,
            stride_sg,
            stride_sn,
            stride_cm,
            stride_cn,
            SPLIT_K,
            ATOMIC,
            pid_m,
            pid_n,
            pid_k,
            offs_am,
            offs_bn,
            k_first,
            k_last,
            BLOCK_SIZE_M,
            BLOCK_SIZE_N,
            BLOCK_SIZE_K,
            AWQ,
        )
    else:
        a_ptrs = A + offs_am[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak
        s_ptrs = S + offs_bn * stride_sn
        j = tl.arange(0, BLOCK_SIZE_N) % 8
        if AWQ:
            # Packed columns of this tile; each word expands to 8 adjacent columns.
            offs_pn = (pid_n * (BLOCK_SIZE_N // 8) + tl.arange(0, BLOCK_SIZE_N // 8)) % (N // 8)
            q_ptrs = QW + (k0 + offs_k)[:, None] * stride_qk + offs_pn[None, :] * stride_qn
            z_ptrs = QZ + offs_pn * stride_zn
            # Column 8c + j sits in nibble p with AWQ_ORDER[p] == j: p = (j % 2) * 4 + j // 2.
            n_shift = ((j % 2) * 4 + j // 2) * 4
        else:
            # Load each packed row once ([BK/8, BN]) and widen in registers: loading [BK, BN] with
            # row k // 8 would also work but pipelines 8x the bytes through shared memory.
            offs_pk = k0 // 8 + tl.arange(0, BLOCK_SIZE_K // 8)
            q_ptrs = QW + offs_pk[:, None] * stride_qk + offs_bn[None, :] * stride_qn
            z_ptrs = QZ + (offs_bn // 8) * stride_zn
            n_shift = j * 4
            k_shift = (offs_k % 8) * 4
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for kt in range(k_first, k_last):
            a = tl.load(a_ptrs)
            g = (kt * BLOCK_SIZE_K) // group_size
            if AWQ:
                qp = tl.load(q_ptrs)
                qp = tl.interleave(qp, qp)
                qp = tl.interleave(qp, qp)
                qp = tl.interleave(qp, qp)
                q = (qp >> n_shift[None, :]) & 0xF
                zp = tl.load(z_ptrs + g * stride_zg)
                zp = tl.interleave(zp, zp)
                zp = tl.interleave(zp, zp)
                zp = tl.interleave(zp, zp)
                z = (zp >> n_shift) & 0xF
            else:
                qp = tl.load(q_ptrs)
                qp = tl.broadcast_to(qp[:, None, :], (BLOCK_SIZE_K // 8, 8, BLOCK_SIZE_N))
                qp = tl.reshape(qp, (BLOCK_SIZE_K, BLOCK_SIZE_N))
                q = (qp >> k_shift[:, None]) & 0xF
                z = ((tl.load(z_ptrs + g * stride_zg) >> n_shift) & 0xF) + zero_offset
            s = tl.load(s_ptrs + g * stride_sg)
            # (128 + q) - (128 + z) is exact; one rounding in the product with the scale.
            w = (_biased(q, A.dtype.element_ty) - _biased(z, A.dtype.element_ty)[None, :]) * s[
                None, :
            ]
            acc = tl.dot(a, w, acc)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            if AWQ:
                q_ptrs += BLOCK_SIZE_K * stride_qk
            else:
                q_ptrs += (BLOCK_SIZE_K // 8) * stride_qk
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
            stride_cn,
            SPLIT_K,
            ATOMIC,
            BLOCK_SIZE_M,
            BLOCK_SIZE_N,
        )


@triton.jit
def _w4a16_swapped(
    A,
    QW,
    QZ,
    S,
    C,
    WS,
    LOCKS,
    M,
    N,
    group_size,
    zero_offset,
    stride_am,
    stride_ak,
    stride_qk,
    stride_qn,
    stride_zg,
    stride_zn,
    stride_sg,
    stride_sn,
    stride_cm,
    stride_cn,
    SPLIT_K,
    ATOMIC,
    pid_m,
    pid_n,
    pid_k,
    offs_am,
    offs_bn,
    k_first,
    k_last,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    AWQ: tl.constexpr,
):
    """SWAP_AB: C^T tile = W^T [BN, BK] @ A^T [BK, BM], the dequantized weights on the MMA's M
    side (the operand wgmma can take from registers) and the tokens on its N side. Weights are
    decoded by nibble plane: plane p of a packed tile is a plain tile of the packed shape (one
    shift and mask), so no interleave/reshape relayout is needed.

    - GPTQ (packed along K, nibble p = row 8r + p): acc += sum_p W_p^T [BN, BK/8] @ A_p^T, where
      A_p^T [BK/8, BM] holds activation columns k0 + 8r + p (a strided load of a tiny tile).
    - AWQ (packed along N, nibble p = column 8c + AWQ_ORDER[p]): one accumulator per plane,
      acc_p [BN/8, BM] += W_p^T [BN/8, BK] @ A^T; the epilogue stacks the planes and stores row
      p * BN/8 + c to column 8c + AWQ_ORDER[p].
    """
    k0 = k_first * BLOCK_SIZE_K
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    tile = pid_m * tl.cdiv(N, BLOCK_SIZE_N) + pid_n
    if AWQ:
        PN: tl.constexpr = BLOCK_SIZE_N // 8
        offs_c = tl.arange(0, PN)
        offs_pn = (pid_n * PN + offs_c) % (N // 8)
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        q_ptrs = QW + offs_pn[:, None] * stride_qn + (k0 + offs_k)[None, :] * stride_qk
        a_ptrs = A + (k0 + offs_k)[:, None] * stride_ak + offs_am[None, :] * stride_am
        z_ptrs = QZ + offs_pn * stride_zn
        # The scales row read as 32-bit words (two bf16/fp16 columns each; stride_sn == 1 and
        # stride_sg even, checked by the wrapper): 4-byte loads can be cp.async-pipelined, the
        # 2-byte loads at a 16-byte stride of one column per plane cannot.
        sw_ptrs = S.to(tl.pointer_type(tl.int32), bitcast=True) + offs_pn * 4
        acc0 = tl.zeros((PN, BLOCK_SIZE_M), dtype=tl.float32)
        acc1 = tl.zeros((PN, BLOCK_SIZE_M), dtype=tl.float32)
        acc2 = tl.zeros((PN, BLOCK_SIZE_M), dtype=tl.float32)
        acc3 = tl.zeros((PN, BLOCK_SIZE_M), dtype=tl.float32)
        acc4 = tl.zeros((PN, BLOCK_SIZE_M), dtype=tl.float32)
        acc5 = tl.zeros((PN, BLOCK_SIZE_M), dtype=tl.float32)
        acc6 = tl.zeros((PN, BLOCK_SIZE_M), dtype=tl.float32)
        acc7 = tl.zeros((PN, BLOCK_SIZE_M), dtype=tl.float32)
        for kt in range(k_first, k_last):
            g = (kt * BLOCK_SIZE_K) // group_size
            a = tl.load(a_ptrs)
            qp = tl.load(q_ptrs)
            zp = tl.load(z_ptrs + g * stride_zg)
            sw_row = sw_ptrs + g * (stride_sg // 2)
            sw0 = tl.load(sw_row)
            sw1 = tl.load(sw_row + 1)
            sw2 = tl.load(sw_row + 2)
            sw3 = tl.load(sw_row + 3)
            dt = A.dtype.element_ty
            acc0 = tl.dot(_awq_plane(qp, zp, sw0, 0, dt), a, acc0)
            acc1 = tl.dot(_awq_plane(qp, zp, sw1, 1, dt), a, acc1)
            acc2 = tl.dot(_awq_plane(qp, zp, sw2, 2, dt), a, acc2)
            acc3 = tl.dot(_awq_plane(qp, zp, sw3, 3, dt), a, acc3)
            acc4 = tl.dot(_awq_plane(qp, zp, sw0, 4, dt), a, acc4)
            acc5 = tl.dot(_awq_plane(qp, zp, sw1, 5, dt), a, acc5)
            acc6 = tl.dot(_awq_plane(qp, zp, sw2, 6, dt), a, acc6)
            acc7 = tl.dot(_awq_plane(qp, zp, sw3, 7, dt), a, acc7)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            q_ptrs += BLOCK_SIZE_K * stride_qk
        acc01 = _cat_rows(acc0, acc1, PN, BLOCK_SIZE_M)
        acc23 = _cat_rows(acc2, acc3, PN, BLOCK_SIZE_M)
        acc45 = _cat_rows(acc4, acc5, PN, BLOCK_SIZE_M)
        acc67 = _cat_rows(acc6, acc7, PN, BLOCK_SIZE_M)
        acc_t = _cat_rows(
            _cat_rows(acc01, acc23, 2 * PN, BLOCK_SIZE_M),
            _cat_rows(acc45, acc67, 2 * PN, BLOCK_SIZE_M),
            4 * PN,
            BLOCK_SIZE_M,
        )
        r = tl.arange(0, BLOCK_SIZE_N)
        p = r // PN
        offs_cn = pid_n * BLOCK_SIZE_N + 8 * (r % PN) + (p % 4) * 2 + p // 4
    else:
        PK: tl.constexpr = BLOCK_SIZE_K // 8
        offs_r = tl.arange(0, PK)
        q_ptrs = QW + offs_bn[:, None] * stride_qn + (k0 // 8 + offs_r)[None, :] * stride_qk
        # Activations as [BK/8, BM, 8] (element [r, m, p] = A[m, k0 + 8r + p]): contiguous along
        # p, so the load is pipelined; _split8 then gives the 8 planes A_p^T [BK/8, BM].
        offs_p = tl.arange(0, 8)
        a_ptrs = (
            A
            + (k0 + 8 * offs_r)[:, None, None] * stride_ak
            + offs_am[None, :, None] * stride_am
            + offs_p[None, None, :] * stride_ak
        )
        z_ptrs = QZ + (offs_bn // 8) * stride_zn
        z_shift = (offs_bn % 8) * 4
        s_ptrs = S + offs_bn * stride_sn
        acc_t = tl.zeros((BLOCK_SIZE_N, BLOCK_SIZE_M), dtype=tl.float32)
        for kt in range(k_first, k_last):
            g = (kt * BLOCK_SIZE_K) // group_size
            qp = tl.load(q_ptrs)
            a0, a1, a2, a3, a4, a5, a6, a7 = _split8(tl.load(a_ptrs), PK, BLOCK_SIZE_M)
            z = ((tl.load(z_ptrs + g * stride_zg) >> z_shift) & 0xF) + zero_offset
            dt = A.dtype.element_ty
            zb = _biased(z, dt)[:, None]
            s = tl.load(s_ptrs + g * stride_sg)[:, None]
            acc_t = tl.dot(_gptq_plane(qp, zb, s, 0, dt), a0, acc_t)
            acc_t = tl.dot(_gptq_plane(qp, zb, s, 1, dt), a1, acc_t)
            acc_t = tl.dot(_gptq_plane(qp, zb, s, 2, dt), a2, acc_t)
            acc_t = tl.dot(_gptq_plane(qp, zb, s, 3, dt), a3, acc_t)
            acc_t = tl.dot(_gptq_plane(qp, zb, s, 4, dt), a4, acc_t)
            acc_t = tl.dot(_gptq_plane(qp, zb, s, 5, dt), a5, acc_t)
            acc_t = tl.dot(_gptq_plane(qp, zb, s, 6, dt), a6, acc_t)
            acc_t = tl.dot(_gptq_plane(qp, zb, s, 7, dt), a7, acc_t)
            a_ptrs += BLOCK_SIZE_K * stride_ak
            q_ptrs += PK * stride_qk
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    store_tile_t_split(
        acc_t,
        C,
        WS,
        LOCKS,
        offs_cn,
        offs_cm,
        tile,
        pid_k,
        M,
        N,
        stride_cm,
        stride_cn,
        SPLIT_K,
        ATOMIC,
        BLOCK_SIZE_N,
        BLOCK_SIZE_M,
    )


KERNEL = _w4a16_kernel
