# mypy: disable-error-code="no-untyped-def,untyped-decorator"
"""The INT4 kernels' split-K epilogue with an atomic reduction (ATOMIC_REDUCE=1).

`_common.store_tile` reduces in a fixed order: each split stores its fp32 partial, and the last
to arrive loads all SPLIT_K of them. That last program's loads are the kernel's serial tail: at
M = 1 they are SPLIT_K dependent round trips to L2, at M = 16 SPLIT_K tiles of 16 KB through one
SM. Here each split adds its partial into one zeroed fp32 [M, N] tile of the workspace with
relaxed atomics (performed in L2, by all splits at once); the last arriver (the same counter
protocol) loads that one tile, writes C and zeroes it for the next launch. On an H200 that took
0.9-2.4 us off the plane kernel at N = 5120, M = 1 and 16 (reports/kernels/README.md, call 25).

The order of the additions then depends on arrival, so the fp32 sum (and rarely the last bit of
the bf16 output) can differ from run to run: `autotune kernels tune --deterministic` and
`shim.get_config(deterministic=True)` leave it out. ATOMIC is a runtime argument (configs that
differ only in it share one binary). Not used by the FP8 kernel: an H200 probe of the same change
there gained nothing measurable (call 25).

Not a triton.jit module of its own: kernels import these helpers and Triton inlines them.
"""

import triton
import triton.language as tl

from kernels_tuning.kernels._common import store_tile, store_tile_t


@triton.jit
def _add_and_finish(acc, c_ptrs, ws_ptrs, mask, counter, SPLIT_K, C_DTYPE: tl.constexpr):
    """Add `acc` into the zeroed workspace tile; the last of SPLIT_K arrivals writes C from it
    and zeroes it and its counter again."""
    tl.atomic_add(ws_ptrs, acc, mask=mask, sem="relaxed")
    # As in store_tile: every thread's adds are ordered before the single release increment.
    tl.debug_barrier()
    arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        total = tl.load(ws_ptrs, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(c_ptrs, total.to(C_DTYPE), mask=mask)
        tl.store(ws_ptrs, tl.zeros_like(total), mask=mask)
        tl.atomic_xchg(counter, 0)


@triton.jit
def store_tile_split(
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
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
):
    """store_tile, with the atomic reduction when ATOMIC (workspace: zeroed fp32 [M, N])."""
    if ATOMIC != 0:
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        c_ptrs = C + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
        ws_ptrs = WS + offs_cm[:, None] * N + offs_cn[None, :]
        counter = LOCKS + pid_m * tl.cdiv(N, BLOCK_SIZE_N) + pid_n
        _add_and_finish(acc, c_ptrs, ws_ptrs, mask, counter, SPLIT_K, C.dtype.element_ty)
    else:
        store_tile(
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
            BLOCK_SIZE_M,
            BLOCK_SIZE_N,
        )


@triton.jit
def store_tile_t_split(
    acc,
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
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """store_tile_t (a transposed tile, SWAP_AB), with the atomic reduction when ATOMIC."""
    if ATOMIC != 0:
        mask = (offs_cn[:, None] < N) & (offs_cm[None, :] < M)
        c_ptrs = C + offs_cm[None, :] * stride_cm + offs_cn[:, None] * stride_cn
        ws_ptrs = WS + offs_cm[None, :] * N + offs_cn[:, None]
        _add_and_finish(acc, c_ptrs, ws_ptrs, mask, LOCKS + tile, SPLIT_K, C.dtype.element_ty)
    else:
        store_tile_t(
            acc,
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
            ROWS,
            COLS,
        )
