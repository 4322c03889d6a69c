"""The config space of an engine's own block-FP8 kernel, for one release on one architecture.

What the release's kernel honours decides the dimensions (autotune.engines.kernel_facts):
every release takes the tile, group, warps and stages; SGLang >= 0.5.21 on sm_90 also takes
SWAP_AB (the weight tile on the MMA's M side: wgmma at decode sizes) and SPLIT_K (powers of two,
partials summed by a second kernel). Elsewhere a file holding those keys is an error at launch
(older releases) or ignored (other architectures), so they are never proposed there.

The grid is SGLang's own tuning grid (benchmark/kernels/quantization) narrowed where its span
buys nothing for this kernel, to keep the binaries to compile in the hundreds:
- BLOCK_SIZE_K = 128, the weight block: the kernel reads one scale per K tile and its lookup
  clamps smaller K tiles back up where they do not divide the block; SGLang's own H200 files for
  [128, 128] use 128 in all 342 entries (0.5.23 wheel);
- GROUP_SIZE_M 1, 16, 64 and the default's 32 (a constexpr: one binary each);
- stages 3-5;
- swapped tiles: BLOCK_SIZE_M (tokens, the MMA's N side) 16, 32, 64 (tl.dot wants >= 16),
  BLOCK_SIZE_N >= 64 (wgmma's M side), at M <= SWAP_MAX_M, program order fixed (GROUP_SIZE_M 1);
- SPLIT_K only where the output tiles leave the GPU under-filled (`space.waste`).
The engine's default config is always a candidate (runner), so a tuned entry can be no slower
than the default on the kernel that runs it.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import ConfigError
from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.resources import DeviceLimits
from kernels_tuning.space import cdiv, legality, waste

if TYPE_CHECKING:
    from autotune.engines.kernel_facts import KernelFacts

BLOCK_K = 128
PLAIN_M = (16, 32, 64, 128)
PLAIN_N = (32, 64, 128, 256)
GROUPS = (1, 16, 32, 64)
WARPS = (4, 8)
PLAIN_STAGES = (3, 4, 5)
SWAP_M = (16, 32, 64)
SWAP_N = (64, 128, 256)
SWAP_STAGES = (3, 4, 5)
SWAP_MAX_M = 64  # SGLang's own sm_90 files swap up to M = 64
# The launcher takes any power of two; SGLang's own sm_90 files split at most 16 ways, and at
# K = 5120 (40 K tiles) 32 splits would leave one or two tiles a split.
MAX_SPLIT_K = 16
SPLIT_MAX_M = 128  # beyond this the output tiles fill the GPU without splitting


def engine_grid(split_k_values: Sequence[int], swap_ab: bool) -> list[KernelConfig]:
    """The unfiltered candidates (module docstring)."""
    splits = tuple(v for v in split_k_values if 1 < v <= MAX_SPLIT_K)
    out = [
        KernelConfig(bm, bn, BLOCK_K, g, w, s)
        for bm, bn, g, w, s in itertools.product(PLAIN_M, PLAIN_N, GROUPS, WARPS, PLAIN_STAGES)
    ]
    # Split plain tiles (the sm_90 kernel without the swap) at small tiles only.
    out += [
        KernelConfig(bm, bn, BLOCK_K, 1, w, s, SPLIT_K=sk)
        for bm, bn, w, s, sk in itertools.product(
            (16, 32, 64), (64, 128), WARPS, PLAIN_STAGES, splits
        )
    ]
    if swap_ab:
        out += [
            KernelConfig(bm, bn, BLOCK_K, 1, w, s, SPLIT_K=sk, SWAP_AB=1)
            for bm, bn, w, s, sk in itertools.product(
                SWAP_M, SWAP_N, WARPS, SWAP_STAGES, (1, *splits)
            )
        ]
    return out


def engine_legality(
    cfg: KernelConfig, limits: DeviceLimits, n: int | None = None, k: int | None = None
) -> str | None:
    """Why `cfg` cannot run on the engine's kernel (None: it can). Shared memory, registers and
    K divisibility as for our kernel (`space.legality` on the unswapped form: the engine's
    swapped tile holds the same operands); the swap's own limits here."""
    why = legality(cfg.with_(SWAP_AB=0), "fp8", BLOCK_K, limits, n, k)
    if why is not None:
        return why
    if cfg.SWAP_AB:
        if cfg.BLOCK_SIZE_M < 16:
            return "SWAP_AB needs BLOCK_SIZE_M >= 16 (the MMA's N side; tl.dot wants >= 16)"
        if cfg.BLOCK_SIZE_N < 64:
            return "SWAP_AB needs BLOCK_SIZE_N >= 64 (the MMA's M side; wgmma takes 64 rows)"
    return None


def engine_waste(cfg: KernelConfig, m: int, n: int, limits: DeviceLimits) -> str | None:
    """Why `cfg` is wasteful or a duplicate at this M (None: keep it)."""
    if cfg.SWAP_AB and m > SWAP_MAX_M:
        return f"SWAP_AB at M={m} > {SWAP_MAX_M}"
    if cfg.SPLIT_K > 1 and m > SPLIT_MAX_M:
        return f"SPLIT_K at M={m} > {SPLIT_MAX_M}"
    if cfg.SPLIT_K > 1 and cdiv(m, cfg.BLOCK_SIZE_M) * cdiv(n, cfg.BLOCK_SIZE_N) * cfg.SPLIT_K > (
        8 * limits.sm_count
    ):
        return f"SPLIT_K={cfg.SPLIT_K} gives over 8 waves of programs"
    return waste(cfg.with_(SWAP_AB=0), m, n, limits)


@functools.lru_cache(maxsize=256)
def _legal(
    n: int, k: int, limits: DeviceLimits, split_k_values: tuple[int, ...], swap_ab: bool
) -> tuple[KernelConfig, ...]:
    return tuple(
        c for c in engine_grid(split_k_values, swap_ab) if engine_legality(c, limits, n, k) is None
    )


def engine_space(
    m: int,
    n: int,
    k: int,
    limits: DeviceLimits,
    *,
    split_k_values: Sequence[int] = (),
    swap_ab: bool = False,
) -> list[KernelConfig]:
    """Every config worth timing for one (M, N, K) on the engine's kernel."""
    return [
        c
        for c in _legal(n, k, limits, tuple(split_k_values), swap_ab)
        if engine_waste(c, m, n, limits) is None
    ]


def engine_compile_set(
    ms: Sequence[int],
    n_k: Sequence[tuple[int, int]],
    limits: DeviceLimits,
    *,
    split_k_values: Sequence[int] = (),
    swap_ab: bool = False,
) -> dict[tuple[int, int, int], list[KernelConfig]]:
    """Configs to precompile, per representative (M, N, K) of each Triton specialization.

    The engine's kernels take GROUP_SIZE_M, SWAP_AB and SPLIT_K as compile-time values, and
    Triton specializes each integer argument on being 1 or a multiple of 16: M, N, K and the
    scale strides K / 128 (40 at K = 5120, 48 at K = 6144). One binary serves one
    specialization, so each config is compiled once per distinct pattern among the items."""
    out: dict[tuple[int, int, int], dict[KernelConfig, None]] = {}
    reps: dict[tuple[int, ...], tuple[int, int, int]] = {}
    for m in ms:
        for n, k in n_k:
            sig = specialization(m, n, k)
            rep = reps.setdefault(sig, (m_class(m), n, k))
            bucket = out.setdefault(rep, {})
            for c in engine_space(m, n, k, limits, split_k_values=split_k_values, swap_ab=swap_ab):
                bucket[c] = None
    return {rep: list(cs) for rep, cs in out.items()}


def _spec(x: int) -> int:
    return 1 if x == 1 else (16 if x % 16 == 0 else 0)


def specialization(m: int, n: int, k: int) -> tuple[int, ...]:
    """How Triton specializes the launch's integer arguments for this (M, N, K): M, N, K and
    the block-scale strides K / 128 (128-row weight blocks)."""
    return (_spec(m), _spec(n), _spec(k), _spec(cdiv(k, BLOCK_K)))


def m_class(m: int) -> int:
    """A representative M with the same Triton specialization as `m` (1, 16 or 2)."""
    if m == 1:
        return 1
    return 16 if m % 16 == 0 else 2


@dataclass(frozen=True)
class EngineTarget:
    """One engine release whose own kernel is tuned ("sglang==0.5.23"), on the GPU at hand;
    `site`: the site-packages folder of another environment that has it installed (`kernels
    tune --engine-python` / `--site-packages`), whose source is read, never imported. The tag
    carries the site ("vllm==0.34.1.dev5+gabc@/opt/vllm/lib/python3.12/site-packages": a
    version has no "@") so that work items name it wherever they run."""

    engine: str
    version: str
    site: str | None = None

    @classmethod
    def parse(cls, tag: str) -> EngineTarget:
        release, _, site = tag.partition("@")
        engine, sep, version = release.partition("==")
        if not sep or not engine or not version:
            raise ConfigError(f"expected ENGINE==VERSION[@SITE], got {tag!r}", field="engine")
        return cls(engine, version, site or None)

    @property
    def tag(self) -> str:
        return f"{self.engine}=={self.version}" + (f"@{self.site}" if self.site else "")

    @property
    def site_path(self) -> Path | None:
        return Path(self.site) if self.site else None

    def facts(self) -> KernelFacts:
        from autotune.engines.kernel_derive import facts_of  # a nightly: read where installed

        return facts_of(self.engine, self.version, site=self.site_path)

    def options(self, arch: str) -> tuple[tuple[int, ...], bool]:
        """(SPLIT_K values, SWAP_AB) this release honours on `arch`."""
        keys = self.facts().honoured_keys(arch)
        splits = self.facts().split_k_values if "SPLIT_K" in keys else ()
        return tuple(splits), "SWAP_AB" in keys

    def default_config(self) -> KernelConfig:
        return KernelConfig.from_dict(dict(self.facts().default_config))

    def space(self, m: int, n: int, k: int, limits: DeviceLimits) -> list[KernelConfig]:
        splits, swap = self.options(limits.arch)
        return engine_space(m, n, k, limits, split_k_values=splits, swap_ab=swap)

    def legality(
        self, cfg: KernelConfig, limits: DeviceLimits, n: int | None = None, k: int | None = None
    ) -> str | None:
        """`engine_legality`, and only keys this release honours on this GPU."""
        for flag in ("FOLD_SCALES", "TMA", "ATOMIC_REDUCE"):
            if getattr(cfg, flag):
                return f"{flag} is autotune's own kernel option; {self.tag} has none"
        splits, swap = self.options(limits.arch)
        if cfg.SWAP_AB and not swap:
            return f"{self.tag} does not honour SWAP_AB on {limits.arch or 'this GPU'}"
        if cfg.SPLIT_K != 1 and cfg.SPLIT_K not in splits:
            return (
                f"{self.tag} does not take SPLIT_K={cfg.SPLIT_K} on {limits.arch or 'this GPU'}"
                f" (takes {list(splits) or 'none'})"
            )
        return engine_legality(cfg, limits, n, k)
