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

This module is the host side: `w4a16_matmul` checks the arguments and launches the kernel of
kernels/int4_w4a16_jit.py (dequantization, the SWAP_AB path), or for AWQ decode tiles the plane
kernel of kernels/int4_awq_planes.py; `warmup` compiles without launching; below them the
quantization, packing and the fp32 reference (torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from autotune.errors import ConfigError
from kernels_tuning.kernel_config import DEFAULT_INT4, KernelConfig, as_config
from kernels_tuning.kernels import int4_awq_planes as planes
from kernels_tuning.kernels._buffers import split_k_buffers
from kernels_tuning.kernels._interpret import patch_interpreter
from kernels_tuning.kernels.int4_w4a16_jit import KERNEL
from kernels_tuning.space import cdiv

if TYPE_CHECKING:
    import torch

patch_interpreter()

Packing = Literal["awq", "gptq"]
PACKINGS: tuple[Packing, ...] = ("awq", "gptq")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def w4a16_matmul(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    *,
    group_size: int = 128,
    packing: Packing = "awq",
    zero_offset: int | None = None,
    config: KernelConfig | Mapping[str, int] | None = None,
    out: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
) -> torch.Tensor:
    """x [..., K] (bf16/fp16) @ dequant(qweight, qzeros, scales) -> [..., N] in x's dtype.

    `zero_offset` defaults to 0 for AWQ and 1 for GPTQ (v1 stores zero - 1). `workspace`: the
    split-K partials, fp32 [SPLIT_K, M, N] (default: allocated per call); ATOMIC_REDUCE configs
    do not use it but sum into a zeroed buffer cached per device (kernels/_buffers.py).
    """
    import torch

    cfg = _checked_config(x, packing, config, group_size)
    K, N = _checked_shapes(x, qweight, qzeros, scales, packing, group_size)
    scales = _scales_as_read(scales, x.dtype, cfg, packing)
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
    _launch(
        (a2, qweight, qzeros, scales, c, ws, locks),
        cfg,
        (tiles, cfg.SPLIT_K),
        N=N,
        group_size=group_size,
        zero_offset=zo,
        awq=packing == "awq",
        atomic=atomic,
    )
    return c.reshape(*x.shape[:-1], N)


def _checked_config(
    x: torch.Tensor,
    packing: Packing,
    config: KernelConfig | Mapping[str, int] | None,
    group_size: int,
) -> KernelConfig:
    """The launch config, after the checks that need no shapes: the packing, the activations'
    dtype, and BLOCK_SIZE_K / BLOCK_SIZE_N against the group and the pack factor."""
    import torch

    if packing not in PACKINGS:
        raise ConfigError(f"unknown packing {packing!r}; valid: {list(PACKINGS)}", field="packing")
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise ConfigError(f"activations must be bf16 or fp16, got {x.dtype}", field="x")
    cfg = as_config(config, DEFAULT_INT4)
    if group_size % cfg.BLOCK_SIZE_K or cfg.BLOCK_SIZE_K % 8 or cfg.BLOCK_SIZE_N % 8:
        raise ConfigError(
            f"BLOCK_SIZE_K={cfg.BLOCK_SIZE_K} must divide group_size={group_size} and be a "
            f"multiple of 8; BLOCK_SIZE_N={cfg.BLOCK_SIZE_N} a multiple of 8",
            field="config",
        )
    return cfg


def _checked_shapes(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    packing: Packing,
    group_size: int,
) -> tuple[int, int]:
    """(K, N), after checking that the weights, zeros and scales fit the activations."""
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
    return K, N


def _scales_as_read(
    scales: torch.Tensor, act_dtype: torch.dtype, cfg: KernelConfig, packing: Packing
) -> torch.Tensor:
    """`scales` in the activations' dtype, and laid out as the swapped AWQ path reads them:
    pairs of scales as 4-byte words."""
    import torch

    if scales.dtype != act_dtype:
        scales = scales.to(act_dtype)
    if (
        cfg.SWAP_AB
        and packing == "awq"
        and (scales.stride(-1) != 1 or scales.stride(0) % 2 or scales.storage_offset() % 2)
    ):
        scales = scales.clone(memory_format=torch.contiguous_format)
    return scales


def _launch(
    operands: tuple[torch.Tensor, ...],
    cfg: KernelConfig,
    grid: tuple[int, int],
    *,
    N: int,
    group_size: int,
    zero_offset: int,
    awq: bool,
    atomic: bool,
) -> None:
    """Launch the kernel on (a2 [M, K], qweight, qzeros, scales, c [M, N], workspace, counters)."""
    a2, qweight, qzeros, scales, c, ws, locks = operands
    M, K = a2.shape
    KERNEL[grid](
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
        zero_offset,
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
        AWQ=awq,
        SWAP_AB=bool(cfg.SWAP_AB),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def warmup(
    cfg: KernelConfig,
    act_dtype: torch.dtype,
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
    KERNEL.warmup(
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


def quantize_int4(
    w: torch.Tensor, group_size: int = 128
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


def _to_int32(v: torch.Tensor) -> torch.Tensor:
    """int64 holding an unsigned 32-bit pattern -> int32 with the same bits."""
    import torch

    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


def pack_awq(q: torch.Tensor) -> torch.Tensor:
    """[R, N] ints 0..15 -> int32 [R, N/8] in AWQ's interleaved nibble order."""
    import torch

    r, n = q.shape
    cols = q.to(torch.int64).reshape(r, n // 8, 8)
    out = torch.zeros((r, n // 8), dtype=torch.int64, device=q.device)
    for i, col in enumerate(AWQ_ORDER):
        out |= cols[:, :, col] << (4 * i)
    return _to_int32(out)


def unpack_awq(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_awq: int32 [R, N/8] -> int32 [R, N]."""
    import torch

    r, c = packed.shape
    p = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.empty((r, c, 8), dtype=torch.int32, device=packed.device)
    for i, col in enumerate(AWQ_ORDER):
        out[:, :, col] = ((p >> (4 * i)) & 0xF).to(torch.int32)
    return out.reshape(r, c * 8)


def pack_gptq(q: torch.Tensor) -> torch.Tensor:
    """[K, N] ints 0..15 -> int32 [K/8, N] packed along K (nibble i = row 8r + i)."""
    import torch

    k, n = q.shape
    rows = q.to(torch.int64).reshape(k // 8, 8, n)
    out = torch.zeros((k // 8, n), dtype=torch.int64, device=q.device)
    for i in range(8):
        out |= rows[:, i, :] << (4 * i)
    return _to_int32(out)


def unpack_gptq(packed: torch.Tensor) -> torch.Tensor:
    import torch

    r, n = packed.shape
    p = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.stack([((p >> (4 * i)) & 0xF) for i in range(8)], dim=1)
    return out.reshape(r * 8, n).to(torch.int32)


def pack_zeros_sequential(z: torch.Tensor) -> torch.Tensor:
    """[G, N] -> int32 [G, N/8] packed along N in plain order (GPTQ qzeros)."""
    import torch

    g, n = z.shape
    cols = z.to(torch.int64).reshape(g, n // 8, 8)
    out = torch.zeros((g, n // 8), dtype=torch.int64, device=z.device)
    for i in range(8):
        out |= cols[:, :, i] << (4 * i)
    return _to_int32(out)


def unpack_zeros_sequential(packed: torch.Tensor) -> torch.Tensor:
    import torch

    g, c = packed.shape
    p = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.stack([((p >> (4 * i)) & 0xF) for i in range(8)], dim=-1)
    return out.reshape(g, c * 8).to(torch.int32)


def pack(
    q: torch.Tensor, z: torch.Tensor, packing: Packing, zero_offset: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q [K, N], z [K/G, N]) -> (qweight, qzeros) in `packing`'s layout."""
    if packing == "awq":
        return pack_awq(q), pack_awq(z)
    zo = 1 if zero_offset is None else zero_offset
    return pack_gptq(q), pack_zeros_sequential((z - zo).clamp(min=0) if zo else z)


def dequantize(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    *,
    group_size: int = 128,
    packing: Packing = "awq",
    zero_offset: int | None = None,
) -> torch.Tensor:
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
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    *,
    group_size: int = 128,
    packing: Packing = "awq",
    zero_offset: int | None = None,
) -> torch.Tensor:
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
