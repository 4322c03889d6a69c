# mypy: disable-error-code="no-untyped-def,untyped-decorator"
"""Pieces shared by our GEMM kernels: the grouped (L2-swizzled) program order and the epilogue
with in-kernel split-K.

Split-K without a second launch: each of the SPLIT_K programs of an output tile stores its fp32
partial sum in a workspace [SPLIT_K, M, N], then increments the tile's arrival counter; the
program that arrives last adds the partials in a fixed order (deterministic), writes the output
in C's dtype and resets the counter to zero for the next launch. At M <= 16 a kernel runs for
about 10 us, so a separate reduction kernel (vLLM's AWQ path: zeros + `.sum(0)`) would cost a
third of that again. GROUP_SIZE_M and SPLIT_K are runtime arguments, so configs that differ only
in them share one compiled binary (the precompile pass builds 1/4 to 1/20 as many).

Not a triton.jit module of its own: kernels import these helpers and Triton inlines them.
"""

import triton
import triton.language as tl


@triton.jit
def grouped_pid(pid, M, N, GROUP_SIZE_M, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    """Program id -> (pid_m, pid_n) in groups of GROUP_SIZE_M rows of tiles (L2 reuse of B)."""
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def k_tile_range(K, pid_k, SPLIT_K, BLOCK_SIZE_K: tl.constexpr):
    """The K tiles [first, last) of split `pid_k` (K is a multiple of BLOCK_SIZE_K)."""
    k_tiles = K // BLOCK_SIZE_K
    per_split = tl.cdiv(k_tiles, SPLIT_K)
    first = pid_k * per_split
    last = first + per_split
    if last > k_tiles:  # not tl.minimum: the interpreter returns a 1-element array for it
        last = k_tiles
    return first, last


@triton.jit
def store_tile(
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
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
):
    """Write the fp32 tile `acc` to C (masked), reducing across splits when SPLIT_K > 1."""
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    c_ptrs = C + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask)
    else:
        ws_ptrs = WS + offs_cm[:, None] * N + offs_cn[None, :]
        tl.store(ws_ptrs + pid_k * M * N, acc, mask=mask)
        # Every thread's partial store must be ordered before the (single-thread) release
        # increment; the acquire side of the last arriver orders its loads after it.
        tl.debug_barrier()
        tile = pid_m * tl.cdiv(N, BLOCK_SIZE_N) + pid_n
        arrived = tl.atomic_add(LOCKS + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
            for s in range(SPLIT_K):
                # .cg: read through L2 only; another SM wrote these partials.
                total += tl.load(ws_ptrs + s * M * N, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(c_ptrs, total.to(C.dtype.element_ty), mask=mask)
            tl.atomic_xchg(LOCKS + tile, 0)


@triton.jit
def store_tile_t(
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
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    """store_tile for a transposed fp32 tile (SWAP_AB): acc[i, j] is C[offs_cm[j], offs_cn[i]].

    `offs_cn` [ROWS] are explicit output columns (any order: the INT4 AWQ nibble planes store a
    permutation of the tile's columns), `offs_cm` [COLS] output rows, `tile` the counter index.
    Same split-K protocol as store_tile (fixed-order reduction by the last arriver).
    """
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
            total = tl.zeros((ROWS, COLS), dtype=tl.float32)
            for s in range(SPLIT_K):
                total += tl.load(ws_ptrs + s * M * N, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(c_ptrs, total.to(C.dtype.element_ty), mask=mask)
            tl.atomic_xchg(LOCKS + tile, 0)
