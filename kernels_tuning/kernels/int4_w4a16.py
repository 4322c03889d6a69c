# mypy: disable-error-code="no-untyped-def,untyped-decorator"
"""INT4 W4A16 group-quantized GEMM (Triton): C[M, N] = A[M, K] @ W[K, N], with
W[k, n] = (q[k, n] - z[k // G, n]) * s[k // G, n], group size G (128), asymmetric (zero points).

Two packings of q and z into int32:

- AWQ (AutoAWQ / compressed-tensors "pack-quantized" as loaded by AWQ kernels):
  qweight [K, N/8], qzeros [K/G, N/8], packed along N in AWQ's interleaved order: nibble i of
  word c holds column 8c + AWQ_ORDER[i], AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7].
- GPTQ (v1 checkpoints, act-order off): qweight [K/8, N] packed along K, nibble i of row r
  holding k = 8r + i; qzeros [K/G, N/8] packed along N in plain order, stored as zero - 1
  (pass zero_offset=1; 0 for checkpoints that store the zero itself).

scales [K/G, N] in the activation dtype (the wrapper converts fp16 checkpoint scales once).

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

from collections.abc import Mapping
from typing import Any, Literal

import triton
import triton.language as tl

from autotune.errors import ConfigError
from kernels_tuning.kernels import int4_awq_planes as planes
from kernels_tuning.kernels._atomic import store_tile_split, store_tile_t_split
from kernels_tuning.kernels._buffers import split_k_buffers
from kernels_tuning.kernels._common import grouped_pid, k_tile_range
from kernels_tuning.kernels._interpret import patch_interpreter
from kernels_tuning.space import DEFAULT_INT4, KernelConfig, cdiv

patch_interpreter()

Packing = Literal["awq", "gptq"]
PACKINGS: tuple[Packing, ...] = ("awq", "gptq")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


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


def w4a16_matmul(
    x: Any,
    qweight: Any,
    qzeros: Any,
    scales: Any,
    *,
    group_size: int = 128,
    packing: Packing = "awq",
    zero_offset: int | None = None,
    config: KernelConfig | Mapping[str, int] | None = None,
    out: Any = None,
    workspace: Any = None,
) -> Any:
    """x [..., K] (bf16/fp16) @ dequant(qweight, qzeros, scales) -> [..., N] in x's dtype.

    `zero_offset` defaults to 0 for AWQ and 1 for GPTQ (v1 stores zero - 1). `workspace`: the
    split-K partials, fp32 [SPLIT_K, M, N] (default: allocated per call); ATOMIC_REDUCE configs
    do not use it but sum into a zeroed buffer cached per device (kernels/_buffers.py).
    """
    import torch

    if packing not in PACKINGS:
        raise ConfigError(f"unknown packing {packing!r}; valid: {list(PACKINGS)}", field="packing")
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise ConfigError(f"activations must be bf16 or fp16, got {x.dtype}", field="x")
    cfg = (
        config
        if isinstance(config, KernelConfig)
        else (KernelConfig.from_dict(config) if config is not None else DEFAULT_INT4)
    )
    if group_size % cfg.BLOCK_SIZE_K or cfg.BLOCK_SIZE_K % 8 or cfg.BLOCK_SIZE_N % 8:
        raise ConfigError(
            f"BLOCK_SIZE_K={cfg.BLOCK_SIZE_K} must divide group_size={group_size} and be a "
            f"multiple of 8; BLOCK_SIZE_N={cfg.BLOCK_SIZE_N} a multiple of 8",
            field="config",
        )
    K = x.shape[-1]
    if packing == "awq":
        if qweight.shape[0] != K:
            raise ConfigError(f"AWQ qweight {tuple(qweight.shape)}: expected [K={K}, N/8]")
        N = qweight.shape[1] * 8
    else:
        if qweight.shape[0] * 8 != K:
            raise ConfigError(f"GPTQ qweight {tuple(qweight.shape)}: expected [K/8={K // 8}, N]")
        N = qweight.shape[1]
    if K % group_size:
        raise ConfigError(f"K={K} must be a multiple of group_size={group_size}", field="K")
    if tuple(scales.shape) != (K // group_size, N) or tuple(qzeros.shape) != (
        K // group_size,
        N // 8,
    ):
        raise ConfigError(
            f"scales {tuple(scales.shape)} / qzeros {tuple(qzeros.shape)}: expected "
            f"[{K // group_size}, {N}] / [{K // group_size}, {N // 8}]"
        )
    if scales.dtype != x.dtype:
        scales = scales.to(x.dtype)
    if (
        cfg.SWAP_AB
        and packing == "awq"
        and (scales.stride(-1) != 1 or scales.stride(0) % 2 or scales.storage_offset() % 2)
    ):
        # The swapped AWQ path reads pairs of scales as 4-byte words.
        scales = scales.clone(memory_format=torch.contiguous_format)
    zo = (1 if packing == "gptq" else 0) if zero_offset is None else zero_offset
    a2 = x.reshape(-1, K)
    M = a2.shape[0]
    c = out if out is not None else torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M == 0:
        return c.reshape(*x.shape[:-1], N)
    tiles = cdiv(M, cfg.BLOCK_SIZE_M) * cdiv(N, cfg.BLOCK_SIZE_N)
    atomic = bool(cfg.ATOMIC_REDUCE) and cfg.SPLIT_K > 1
    ws, locks = split_k_buffers(x.device, cfg.SPLIT_K, M, N, tiles, workspace, atomic=atomic)
    if (
        planes.uses_planes(cfg, packing)
        and c.stride(1) == 1
        and planes.available(x.dtype, x.device)
    ):
        planes.launch(a2, qweight, qzeros, scales, c, ws, locks, cfg, group_size)
        return c.reshape(*x.shape[:-1], N)
    _w4a16_kernel[(tiles, cfg.SPLIT_K)](
        a2,
        qweight,
        qzeros,
        scales,
        c,
        ws,
        locks,
        M,
        N,
        K,
        group_size,
        zo,
        a2.stride(0),
        a2.stride(1),
        qweight.stride(0),
        qweight.stride(1),
        qzeros.stride(0),
        qzeros.stride(1),
        scales.stride(0),
        scales.stride(1),
        c.stride(0),
        c.stride(1),
        cfg.GROUP_SIZE_M,
        cfg.SPLIT_K,
        int(atomic),
        BLOCK_SIZE_M=cfg.BLOCK_SIZE_M,
        BLOCK_SIZE_N=cfg.BLOCK_SIZE_N,
        BLOCK_SIZE_K=cfg.BLOCK_SIZE_K,
        AWQ=packing == "awq",
        SWAP_AB=bool(cfg.SWAP_AB),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return c.reshape(*x.shape[:-1], N)


def warmup(
    cfg: KernelConfig,
    act_dtype: Any,
    packing: Packing = "awq",
    n: int = 5120,
    k: int = 5120,
    group_size: int = 128,
) -> None:
    """Compile `cfg` without launching; arguments mirror a real launch (same cache key)."""
    import torch

    if planes.uses_planes(cfg, packing) and planes.available(act_dtype, "cuda"):
        planes.warmup(cfg, act_dtype, n, k, group_size)
        return
    qk, qn = (n // 8, 1) if packing == "awq" else (n, 1)
    i32 = torch.int32
    _w4a16_kernel.warmup(
        act_dtype,
        i32,
        i32,
        act_dtype,
        act_dtype,
        torch.float32,
        i32,
        16,
        n,
        k,
        group_size,
        0,
        k,
        1,
        qk,
        qn,
        n // 8,
        1,
        n,
        1,
        n,
        1,
        1,
        1,
        0,
        BLOCK_SIZE_M=cfg.BLOCK_SIZE_M,
        BLOCK_SIZE_N=cfg.BLOCK_SIZE_N,
        BLOCK_SIZE_K=cfg.BLOCK_SIZE_K,
        AWQ=packing == "awq",
        SWAP_AB=bool(cfg.SWAP_AB),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
        grid=(1,),
    )


# ---------------------------------------------------------------------------------------------
# Quantization, packing and the reference (torch).


def quantize_int4(w: Any, group_size: int = 128) -> tuple[Any, Any, Any]:
    """w [K, N] float -> (q [K, N] int32 in 0..15, z [K/G, N] int32, s [K/G, N] float32):
    asymmetric min/max per group of G rows (input channels) of each column."""
    import torch

    k, n = w.shape
    wg = w.float().reshape(k // group_size, group_size, n)
    lo = wg.amin(1)
    hi = wg.amax(1)
    s = ((hi - lo) / 15).clamp(min=1e-8)
    z = torch.round(-lo / s).clamp(0, 15)
    q = torch.round(wg / s[:, None, :] + z[:, None, :]).clamp(0, 15)
    return q.reshape(k, n).to(torch.int32), z.to(torch.int32), s


def _to_int32(v: Any) -> Any:
    """int64 holding an unsigned 32-bit pattern -> int32 with the same bits."""
    import torch

    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


def pack_awq(q: Any) -> Any:
    """[R, N] ints 0..15 -> int32 [R, N/8] in AWQ's interleaved nibble order."""
    import torch

    r, n = q.shape
    cols = q.to(torch.int64).reshape(r, n // 8, 8)
    out = torch.zeros((r, n // 8), dtype=torch.int64, device=q.device)
    for i, col in enumerate(AWQ_ORDER):
        out |= cols[:, :, col] << (4 * i)
    return _to_int32(out)


def unpack_awq(packed: Any) -> Any:
    """Inverse of pack_awq: int32 [R, N/8] -> int32 [R, N]."""
    import torch

    r, c = packed.shape
    p = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.empty((r, c, 8), dtype=torch.int32, device=packed.device)
    for i, col in enumerate(AWQ_ORDER):
        out[:, :, col] = ((p >> (4 * i)) & 0xF).to(torch.int32)
    return out.reshape(r, c * 8)


def pack_gptq(q: Any) -> Any:
    """[K, N] ints 0..15 -> int32 [K/8, N] packed along K (nibble i = row 8r + i)."""
    import torch

    k, n = q.shape
    rows = q.to(torch.int64).reshape(k // 8, 8, n)
    out = torch.zeros((k // 8, n), dtype=torch.int64, device=q.device)
    for i in range(8):
        out |= rows[:, i, :] << (4 * i)
    return _to_int32(out)


def unpack_gptq(packed: Any) -> Any:
    import torch

    r, n = packed.shape
    p = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.stack([((p >> (4 * i)) & 0xF) for i in range(8)], dim=1)
    return out.reshape(r * 8, n).to(torch.int32)


def pack_zeros_sequential(z: Any) -> Any:
    """[G, N] -> int32 [G, N/8] packed along N in plain order (GPTQ qzeros)."""
    import torch

    g, n = z.shape
    cols = z.to(torch.int64).reshape(g, n // 8, 8)
    out = torch.zeros((g, n // 8), dtype=torch.int64, device=z.device)
    for i in range(8):
        out |= cols[:, :, i] << (4 * i)
    return _to_int32(out)


def unpack_zeros_sequential(packed: Any) -> Any:
    import torch

    g, c = packed.shape
    p = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.stack([((p >> (4 * i)) & 0xF) for i in range(8)], dim=-1)
    return out.reshape(g, c * 8).to(torch.int32)


def pack(q: Any, z: Any, packing: Packing, zero_offset: int | None = None) -> tuple[Any, Any]:
    """(q [K, N], z [K/G, N]) -> (qweight, qzeros) in `packing`'s layout."""
    if packing == "awq":
        return pack_awq(q), pack_awq(z)
    zo = 1 if zero_offset is None else zero_offset
    return pack_gptq(q), pack_zeros_sequential((z - zo).clamp(min=0) if zo else z)


def dequantize(
    qweight: Any,
    qzeros: Any,
    scales: Any,
    *,
    group_size: int = 128,
    packing: Packing = "awq",
    zero_offset: int | None = None,
) -> Any:
    """W [K, N] fp32 = (q - z) * s."""
    if packing == "awq":
        q = unpack_awq(qweight)
        z = unpack_awq(qzeros)
    else:
        q = unpack_gptq(qweight)
        zo = 1 if zero_offset is None else zero_offset
        z = unpack_zeros_sequential(qzeros) + zo
    zr = z.repeat_interleave(group_size, 0).float()
    sr = scales.float().repeat_interleave(group_size, 0)
    return (q.float() - zr) * sr


def reference(
    x: Any,
    qweight: Any,
    qzeros: Any,
    scales: Any,
    *,
    group_size: int = 128,
    packing: Packing = "awq",
    zero_offset: int | None = None,
) -> Any:
    """Dequantize (rounded to x's dtype, as the kernel feeds the MMA), matmul in fp32."""
    import torch

    w = dequantize(
        qweight,
        qzeros,
        scales.to(x.dtype),
        group_size=group_size,
        packing=packing,
        zero_offset=zero_offset,
    )
    w = w.to(x.dtype).float()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        c = x.float() @ w
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return c.to(x.dtype)
