"""The config space: SGLang's grid as the superset, plus split-K, pre-filtered before any compile.

A `KernelConfig` (kernels_tuning/kernel_config.py) is one Triton launch config. `build_space`
lists the configs worth timing for one (kernel, M, N, K) on one GPU, after three filters that
need no compile:

- legality: BLOCK_SIZE_K divides the quantization group along K (one scale per K tile; a tile
  that straddles two groups gives silently wrong results, SGLang PR #20819 / issue #39626);
- shared memory: the operand tiles the software pipeline keeps, against the GPU's opt-in limit
  per block. SGLang PR #28038's rule `(stages-1) * (BM+BN) * BK * bytes` matches Triton's figure
  for mma.sync kernels; on Hopper, Triton 3.6's wgmma path (BLOCK_SIZE_M >= 64) keeps `stages`
  buffers of the operands it feeds from shared memory, and the INT4 kernel stages the dequantized
  [BK, BN] tile once more. `smem_bytes` (kernels_tuning/resources.py) models both; it matched
  the `shared` figure of 28 sm_90 compiles of our two kernels to within 1 KiB (the margin
  added);
- registers: the fp32 accumulator tile BM*BN spread over 32*num_warps threads must fit in half
  of the 255 registers a thread has;
- waste: a BLOCK_SIZE_M above M (rounded up to a power of two, at least 16) only multiplies
  zeros; GROUP_SIZE_M values that give the same program order as a smaller one (when there are
  fewer M tiles than the group size) are duplicates; split-K only where the output tiles leave
  the GPU under-filled; SWAP_AB only at small M (see below).

SWAP_AB (0/1, ours only, like SPLIT_K: the engines' kernels do not read it, so an engine file
cannot hold SWAP_AB=1) computes the transposed tile C^T = W^T A^T: the weight rows go on the
MMA's M side and the tokens on its N side. On Hopper, Triton emits wgmma only when the MMA's M
side is a multiple of 64 (one warpgroup), so at decode sizes (M <= 16) the plain kernel runs
mma.sync padded to 16 rows, while the swapped one runs wgmma with N = BLOCK_SIZE_M tokens (8,
16 or 32; Triton 3.6 emits wgmma from N = 16, so BM 8 stays on mma.sync). The INT4 AWQ planes
are BLOCK_SIZE_N/8 rows, so swapped AWQ runs mma.sync too, fed from registers. Swapped configs take BLOCK_SIZE_M from
SWAP_BLOCK_M, need BLOCK_SIZE_N >= 64 (FP8: the wgmma M side) or >= 128 with BLOCK_SIZE_K = 128
(INT4: each nibble plane is a BLOCK_SIZE_N/8 x BLOCK_SIZE_K or BLOCK_SIZE_N x BLOCK_SIZE_K/8
MMA operand, and tl.dot wants 16 per side), and are kept only for M <= SWAP_MAX_M.

FOLD_SCALES (0/1, FP8, ours only): the kernels rescale the accumulator after every K tile, and
that waits for the tile's MMA, so its length is exposed once per K tile. SGLang's and vLLM's
kernels do it as `acc += dot * a_s[:, None] * b_s[None, :]` (two multiplies and an add per
element). Where BLOCK_SIZE_N divides the weight block (group_n), the tile's weight scale is one
number and folds into the token scales: `acc += dot * (a_s * b_s)[:, None]`, one multiply-add
(1.20x at M >= 1024 on an H200, reports/kernels/README.md, call 8). The engine files are read by
kernels that rescale the SGLang way, so they are tuned with FOLD_SCALES=0 and cannot hold it.

TMA (0/1, FP8, ours only; sm_90 and newer): the A and B tiles are copied by Hopper's tensor
memory accelerator from host tensor descriptors instead of per-thread pointer loads (own-file
time at M >= 1024 before / after the re-tune with it: 1.08x, cuBLAS's 1.02x in the same runs;
reports/kernels/README.md, calls 19-23). The engines' kernels load with pointers, so the engine
files cannot hold it.

ATOMIC_REDUCE (0/1, INT4, ours only; SPLIT_K > 1): the splits add their fp32 partials into one
zeroed tile with atomic adds and the last to arrive writes C, instead of the last loading every
split's partial (kernels/_atomic.py; 1.03-1.25x at N = 5120, M <= 16 on an H200, call 25). The
sum's order then depends on arrival, so outputs can differ from run to run in the last bits:
`build_space(atomic=False)` (`autotune kernels tune --deterministic`) leaves it out. A runtime
argument, like SPLIT_K: no extra binaries.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable

from autotune.errors import ConfigError
from kernels_tuning.kernel_config import (
    DEFAULT_INT4,
    DIMENSIONS,
    FLAGS,
    GRID,
    SGLANG_DEFAULT_FP8,
    SPLIT_K_VALUES,
    VLLM_AWQ_DEFAULT,
    KernelConfig,
    KernelKind,
    foreign_flag,
)
from kernels_tuning.resources import (
    H200_LIMITS,
    MAX_ACC_REGISTERS,
    DeviceLimits,
    acc_registers,
    sm_version,
    smem_bytes,
)

# The space's own names, and (re-exported) the config and GPU names the autotune CLI, plugins and
# benchmarks import from here.
__all__ = [
    "DEFAULT_INT4",
    "FLAGS",
    "GROUP_N",
    "H200_LIMITS",
    "SGLANG_DEFAULT_FP8",
    "SWAP_BLOCK_M",
    "SWAP_INT4_MAX_TILE",
    "SWAP_MAX_M",
    "VLLM_AWQ_DEFAULT",
    "DeviceLimits",
    "KernelConfig",
    "KernelKind",
    "build_space",
    "candidate_grid",
    "canonical_group",
    "cdiv",
    "compile_set",
    "dimension_values",
    "legal_configs",
    "legality",
    "next_pow2",
    "waste",
]

GROUP_N = 128  # the weight block's rows (block_shape [128, 128] in every FP8 model we tune)
# BLOCK_SIZE_M (tokens, the MMA's N side) of swapped configs. Triton 3.6 runs BM 8 on mma.sync
# (wgmma from 16 tokens), still half the padded rows of an unswapped BM 16 tile at M <= 8.
SWAP_BLOCK_M: tuple[int, ...] = (8, 16, 32)
SWAP_MAX_M = 32  # above this, swapped tiles re-read the weights for every 32 tokens
# Every swapped AWQ BM32 x BN256 sm_90 compile (Triton 3.6, cuobjdump -res-usage) spilled
# (255 registers + 470-840 B of stack, warps 4 or 8); BM*BN <= 4096 used 120-255 registers.
SWAP_INT4_MAX_TILE = 4096


def next_pow2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def legality(
    cfg: KernelConfig,
    kind: KernelKind,
    group_k: int,
    limits: DeviceLimits,
    n: int | None = None,
    k: int | None = None,
) -> str | None:
    """Why `cfg` cannot run at all (None: it can). Independent of M."""
    if group_k % cfg.BLOCK_SIZE_K:
        return f"BLOCK_SIZE_K={cfg.BLOCK_SIZE_K} does not divide the quant group {group_k}"
    need = smem_bytes(cfg, kind, limits.arch)
    if need > limits.smem_per_block_bytes:
        return f"shared memory {need} B > limit {limits.smem_per_block_bytes} B"
    regs = acc_registers(cfg)
    if regs > MAX_ACC_REGISTERS:
        return (
            f"fp32 accumulator takes {regs} registers per thread (> {MAX_ACC_REGISTERS}): spills"
        )
    if k is not None and k % cfg.BLOCK_SIZE_K:
        return f"K={k} is not a multiple of BLOCK_SIZE_K={cfg.BLOCK_SIZE_K}"
    if k is not None and cfg.SPLIT_K > 1 and cdiv(k, cfg.BLOCK_SIZE_K) < 2 * cfg.SPLIT_K:
        return f"SPLIT_K={cfg.SPLIT_K} leaves under 2 K tiles per split"
    if kind == "int4" and cfg.BLOCK_SIZE_N % 8:
        return "BLOCK_SIZE_N must be a multiple of the int4 pack factor 8"
    foreign = foreign_flag(cfg, kind)
    if foreign is not None:
        return foreign[1]
    if cfg.FOLD_SCALES:
        if GROUP_N % cfg.BLOCK_SIZE_N:
            return (
                f"FOLD_SCALES needs BLOCK_SIZE_N to divide the weight block's {GROUP_N} rows "
                f"(one weight scale per tile), got {cfg.BLOCK_SIZE_N}"
            )
    if cfg.TMA and limits.arch and sm_version(limits.arch) < 90:
        return f"TMA needs Hopper or newer (sm_90+), this GPU is {limits.arch}"
    if cfg.ATOMIC_REDUCE and cfg.SPLIT_K == 1:
        return "ATOMIC_REDUCE needs SPLIT_K > 1 (it is how the splits are summed)"
    if cfg.SWAP_AB:
        if cfg.BLOCK_SIZE_M not in SWAP_BLOCK_M:
            return (
                f"SWAP_AB needs BLOCK_SIZE_M in {list(SWAP_BLOCK_M)} (tokens on the MMA's N side)"
            )
        if kind == "fp8" and cfg.BLOCK_SIZE_N < 64:
            return "SWAP_AB needs BLOCK_SIZE_N >= 64 (the MMA's M side; wgmma takes 64 rows)"
        if kind == "int4" and (cfg.BLOCK_SIZE_N < 128 or cfg.BLOCK_SIZE_K != 128):
            return (
                "SWAP_AB (nibble planes) needs BLOCK_SIZE_N >= 128 and BLOCK_SIZE_K = 128: each "
                "plane is a BN/8 x BK (AWQ) or BN x BK/8 (GPTQ) operand, tl.dot wants >= 16"
            )
        if kind == "int4" and cfg.BLOCK_SIZE_M * cfg.BLOCK_SIZE_N > SWAP_INT4_MAX_TILE:
            return (
                f"SWAP_AB INT4 tile BM*BN > {SWAP_INT4_MAX_TILE}: the eight AWQ plane "
                "accumulators and planes spill registers"
            )
    elif cfg.BLOCK_SIZE_M < 16:
        return f"BLOCK_SIZE_M={cfg.BLOCK_SIZE_M} < 16 needs SWAP_AB (tl.dot pads M to 16)"
    return None


def waste(cfg: KernelConfig, m: int, n: int, limits: DeviceLimits) -> str | None:
    """Why `cfg` is an obviously wasteful or duplicate choice for this M (None: keep it)."""
    if cfg.SWAP_AB and m > SWAP_MAX_M:
        return f"SWAP_AB at M={m} > {SWAP_MAX_M}"
    # At least 16 also when swapped: BM 8 runs mma.sync, BM 16 gets wgmma (see SWAP_BLOCK_M).
    bm_cap = max(16, next_pow2(m))
    if cfg.BLOCK_SIZE_M > bm_cap:
        return f"BLOCK_SIZE_M={cfg.BLOCK_SIZE_M} > {bm_cap} for M={m}"
    m_tiles = cdiv(m, cfg.BLOCK_SIZE_M)
    if cfg.GROUP_SIZE_M > 1:
        # The grouped order only depends on min(GROUP_SIZE_M, m_tiles): a larger group value that
        # does not change it duplicates a smaller one (with one M tile all orders are equal).
        eff = min(cfg.GROUP_SIZE_M, m_tiles)
        for g in GRID["GROUP_SIZE_M"]:
            if g >= cfg.GROUP_SIZE_M:
                break
            if min(g, m_tiles) == eff:
                return f"GROUP_SIZE_M={cfg.GROUP_SIZE_M} duplicates {g} at {m_tiles} M tiles"
    if cfg.SPLIT_K > 1:
        tiles = m_tiles * cdiv(n, cfg.BLOCK_SIZE_N)
        if tiles >= 4 * limits.sm_count:
            return f"split-K with {tiles} output tiles (>= 4 waves already)"
    return None


def canonical_group(cfg: KernelConfig, m: int) -> KernelConfig:
    """`cfg` with the smallest GROUP_SIZE_M giving the same program order at this M (the one
    `waste` keeps): the engine default's G32 at 16 M tiles is G16 in the space."""
    m_tiles = cdiv(m, cfg.BLOCK_SIZE_M)
    eff = min(cfg.GROUP_SIZE_M, m_tiles)
    for g in GRID["GROUP_SIZE_M"]:
        if min(g, m_tiles) == eff:
            return cfg.with_(GROUP_SIZE_M=g)
    return cfg


def candidate_grid(
    kind: KernelKind,
    *,
    split_k: bool,
    swap_ab: bool = False,
    fold: bool = False,
    tma: bool = False,
    atomic: bool = False,
) -> list[KernelConfig]:
    """The unfiltered Cartesian product (with SPLIT_K values when `split_k`), plus, with
    `swap_ab`, the swapped configs (BLOCK_SIZE_M from SWAP_BLOCK_M), with `fold` a
    FOLD_SCALES=1 copy of each, with `tma` a TMA=1 copy of each and with `atomic` an
    ATOMIC_REDUCE=1 copy of each split one (legality then drops the ones they do not apply
    to)."""
    sks = SPLIT_K_VALUES if split_k else (1,)
    out = []
    for bm, bn, bk, g, w, s, sk in itertools.product(*GRID.values(), sks):
        out.append(KernelConfig(bm, bn, bk, g, w, s, sk))
    if swap_ab:
        rest = [GRID[d] for d in list(GRID)[1:]]
        for bm, bn, bk, g, w, s, sk in itertools.product(SWAP_BLOCK_M, *rest, sks):
            out.append(KernelConfig(bm, bn, bk, g, w, s, sk, SWAP_AB=1))
    if fold:
        out += [c.with_(FOLD_SCALES=1) for c in out]
    if tma:
        out += [c.with_(TMA=1) for c in out]
    if atomic:
        out += [c.with_(ATOMIC_REDUCE=1) for c in out if c.SPLIT_K > 1]
    return out


@functools.lru_cache(maxsize=256)
def legal_configs(
    kind: KernelKind,
    n: int,
    k: int,
    limits: DeviceLimits,
    group_k: int = 128,
    split_k: bool = False,
    swap_ab: bool = False,
    fold: bool = False,
    tma: bool = False,
    atomic: bool = False,
) -> tuple[KernelConfig, ...]:
    """Every config that can run for (N, K) on this GPU, any M (cached: M only adds `waste`)."""
    grid = candidate_grid(
        kind, split_k=split_k, swap_ab=swap_ab, fold=fold, tma=tma, atomic=atomic
    )
    return tuple(c for c in grid if legality(c, kind, group_k, limits, n, k) is None)


def build_space(
    kind: KernelKind,
    m: int,
    n: int,
    k: int,
    limits: DeviceLimits,
    *,
    group_k: int = 128,
    split_k: bool | None = None,
    swap_ab: bool | None = None,
    fold: bool = False,
    tma: bool = False,
    atomic: bool | None = None,
) -> list[KernelConfig]:
    """Every config worth timing for one (M, N, K). `split_k=None` / `swap_ab=None` enable
    split-K / SWAP_AB for INT4 (our own kernel and files) and disable them for FP8 (the engine
    files cannot hold them); `fold` adds FOLD_SCALES and `tma` TMA (FP8 own files);
    `atomic=None` adds ATOMIC_REDUCE to INT4's split configs (False: deterministic output)."""
    if m < 1 or n < 1 or k < 1:
        raise ConfigError(f"M, N, K must be positive, got M={m} N={n} K={k}")
    use_sk = (kind == "int4") if split_k is None else split_k
    use_swap = (kind == "int4") if swap_ab is None else swap_ab
    use_atomic = (kind == "int4" and use_sk) if atomic is None else atomic
    return [
        c
        for c in legal_configs(
            kind, n, k, limits, group_k, use_sk, use_swap, fold, tma, use_atomic
        )
        if waste(c, m, n, limits) is None
    ]


def compile_set(
    kind: KernelKind,
    limits: DeviceLimits,
    group_k: int = 128,
    *,
    swap_ab: bool = True,
    fold: bool = True,
    tma: bool = True,
) -> list[KernelConfig]:
    """One config per distinct compiled binary over all M (what a precompile pass builds),
    the SWAP_AB binaries included unless `swap_ab=False`, the FOLD_SCALES and TMA ones (FP8)
    unless `fold=False` / `tma=False`."""
    seen: dict[tuple[int, ...], KernelConfig] = {}
    fp8 = kind == "fp8"
    for c in candidate_grid(
        kind, split_k=False, swap_ab=swap_ab, fold=fold and fp8, tma=tma and fp8
    ):
        if c.GROUP_SIZE_M == 1 and legality(c, kind, group_k, limits) is None:
            seen.setdefault(c.compile_key(), c)
    return list(seen.values())


def dimension_values(space: Iterable[KernelConfig]) -> dict[str, list[int]]:
    """Sorted values each dimension takes in `space` (the ordinal axes of the search)."""
    vals: dict[str, set[int]] = {d: set() for d in DIMENSIONS}
    for c in space:
        for d in DIMENSIONS:
            vals[d].add(getattr(c, d))
    return {d: sorted(v) for d, v in vals.items()}
