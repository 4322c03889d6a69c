# mypy: disable-error-code="no-untyped-def,untyped-decorator"
"""Baseline for the report: the algorithm of vLLM's Triton AWQ GEMM with its fixed defaults.

vLLM (`awq_triton.py`, used when VLLM_USE_TRITON_AWQ=1, always on ROCm) runs a fixed
32 x 32 x 32 tile with split_k_iters=8 and Triton's default warps/stages; it accumulates in the
output dtype (fp16), splits K by interleaving K tiles across 8 programs, writes them to a zeroed
[8, M, N] buffer and reduces with `.sum(0)` (three kernels per call), and dequantizes with an
int -> fp16 convert. This is our own implementation of that algorithm (written from its
description, not copied), so the comparison measures the algorithm and its defaults; it runs in
fp16 because vLLM's AWQ path supports only fp16 activations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton
import triton.language as tl

from kernels_tuning.kernels._interpret import patch_interpreter

if TYPE_CHECKING:
    import torch

patch_interpreter()


@triton.jit
def _awq_fp16acc_splitk_kernel(
    A,
    QW,
    QZ,
    S,
    C,
    M,
    N,
    K,
    group_size,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    pid_z = tl.program_id(axis=1)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_pn = pid_n * (BLOCK_SIZE_N // 8) + tl.arange(0, BLOCK_SIZE_N // 8)
    j = tl.arange(0, BLOCK_SIZE_N) % 8
    shift = ((j % 2) * 4 + j // 2) * 4
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=C.dtype.element_ty)
    for kk in range(tl.cdiv(K, BLOCK_SIZE_K * SPLIT_K)):
        tile = kk * SPLIT_K + pid_z
        offs_k = tile * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
        k_ok = offs_k < K
        a = tl.load(
            A + offs_m[:, None] * K + offs_k[None, :],
            mask=(offs_m[:, None] < M) & k_ok[None, :],
            other=0.0,
        )
        qp = tl.load(
            QW + offs_k[:, None] * (N // 8) + offs_pn[None, :],
            mask=k_ok[:, None] & (offs_pn[None, :] < N // 8),
            other=0,
        )
        qp = tl.interleave(qp, qp)
        qp = tl.interleave(qp, qp)
        qp = tl.interleave(qp, qp)
        g = (tile * BLOCK_SIZE_K) // group_size
        zp = tl.load(QZ + g * (N // 8) + offs_pn, mask=offs_pn < N // 8, other=0)
        zp = tl.interleave(zp, zp)
        zp = tl.interleave(zp, zp)
        zp = tl.interleave(zp, zp)
        s = tl.load(S + g * N + offs_n, mask=offs_n < N, other=0.0)
        w = (((qp >> shift[None, :]) & 0xF) - ((zp >> shift) & 0xF)[None, :]) * s[None, :]
        acc = tl.dot(a, w.to(C.dtype.element_ty), acc, out_dtype=C.dtype.element_ty)
    c_ptrs = C + pid_z * M * N + offs_m[:, None] * N + offs_n[None, :]
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def awq_gemm_vllm_defaults(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    qzeros: torch.Tensor,
    *,
    split_k: int = 8,
    block_m: int = 32,
    block_n: int = 32,
    block_k: int = 32,
) -> torch.Tensor:
    """x [M, K] fp16 @ AWQ(qweight [K, N/8], scales [K/G, N] fp16, qzeros [K/G, N/8])."""
    import torch

    m, k = x.shape
    n = qweight.shape[1] * 8
    group_size = k // qzeros.shape[0]
    result = torch.zeros((split_k, m, n), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n), split_k)
    _awq_fp16acc_splitk_kernel[grid](
        x,
        qweight,
        qzeros,
        scales,
        result,
        m,
        n,
        k,
        group_size,
        BLOCK_SIZE_M=block_m,
        BLOCK_SIZE_N=block_n,
        BLOCK_SIZE_K=block_k,
        SPLIT_K=split_k,
    )
    return result.sum(0)
