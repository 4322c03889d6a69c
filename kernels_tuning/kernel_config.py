"""One launch config of our GEMM kernels (`KernelConfig`), the keys it has, which files may hold
them, and the engines' and our kernels' default configs.

The keys are SGLang's grid (`GRID`, what the engines' kernels read) plus our own: SPLIT_K and the
0/1 options SWAP_AB, FOLD_SCALES, TMA and ATOMIC_REDUCE, which only our kernels read, so only our
own files hold them (kernels_tuning/space.py says what each does and when it is worth timing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Literal

from autotune.errors import ConfigError

KernelKind = Literal["fp8", "int4"]
KERNEL_KINDS: tuple[KernelKind, ...] = ("fp8", "int4")

# SGLang's benchmark/kernels/quantization grid (and its MoE superset with BK 256).
GRID: dict[str, tuple[int, ...]] = {
    "BLOCK_SIZE_M": (16, 32, 64, 128, 256),
    "BLOCK_SIZE_N": (32, 64, 128, 256),
    "BLOCK_SIZE_K": (64, 128, 256),
    "GROUP_SIZE_M": (1, 16, 32, 64),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
}
# Not only powers of two: an N = 5120 shape has 20 column tiles of 256, so split-K 6 fills 120
# of an H200's 132 SMs where 4 fills 80 and 8 needs a second wave (INT4 M = 1, 5120x3072:
# 10.1 us at split 6 against 12.7 at 4, call 13 in reports/kernels/README.md).
SPLIT_K_VALUES: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)
DIMENSIONS: tuple[str, ...] = (
    *GRID,
    "SPLIT_K",
    "SWAP_AB",
    "FOLD_SCALES",
    "TMA",
    "ATOMIC_REDUCE",
)
# In our own files only.
OWN_KEYS: tuple[str, ...] = ("SPLIT_K", "SWAP_AB", "FOLD_SCALES", "TMA", "ATOMIC_REDUCE")
# 0/1 keys, written only where 1.
FLAGS: tuple[str, ...] = ("SWAP_AB", "FOLD_SCALES", "TMA", "ATOMIC_REDUCE")

# Keys SGLang's and vLLM's _w8a8_block_fp8_matmul accept (the engine files hold only these).
ENGINE_KEYS: tuple[str, ...] = tuple(GRID)


@dataclass(frozen=True, order=True)
class KernelConfig:
    """One launch config; `as_dict()` gives the engines' JSON value."""

    BLOCK_SIZE_M: int
    BLOCK_SIZE_N: int
    BLOCK_SIZE_K: int
    GROUP_SIZE_M: int
    num_warps: int
    num_stages: int
    SPLIT_K: int = 1
    SWAP_AB: int = 0
    FOLD_SCALES: int = 0
    TMA: int = 0
    ATOMIC_REDUCE: int = 0

    def as_dict(self, *, engine: bool = False) -> dict[str, int]:
        """The config dict; `engine=True` drops SPLIT_K (the engines' kernels do not read our
        keys). SWAP_AB=0, FOLD_SCALES=0, TMA=0 and ATOMIC_REDUCE=0 are left out of our own dicts
        too, so files and cache records written before they existed read back unchanged."""
        d = asdict(self)
        if engine:
            if self.SPLIT_K != 1:
                raise ConfigError(
                    f"SPLIT_K={self.SPLIT_K} cannot go into an engine file: SGLang's and vLLM's "
                    "w8a8 block kernels have no split-K",
                    field="SPLIT_K",
                )
            if self.SWAP_AB:
                raise ConfigError(
                    f"SWAP_AB={self.SWAP_AB} cannot go into an engine file: SGLang's and vLLM's "
                    "w8a8 block kernels have no swapped (C^T = B A^T) variant",
                    field="SWAP_AB",
                )
            if self.FOLD_SCALES:
                raise ConfigError(
                    f"FOLD_SCALES={self.FOLD_SCALES} cannot go into an engine file: SGLang's and "
                    "vLLM's w8a8 block kernels rescale with both scales per element",
                    field="FOLD_SCALES",
                )
            if self.TMA:
                raise ConfigError(
                    f"TMA={self.TMA} cannot go into an engine file: SGLang's and vLLM's w8a8 "
                    "block kernels load their tiles with plain loads",
                    field="TMA",
                )
            if self.ATOMIC_REDUCE:
                raise ConfigError(
                    f"ATOMIC_REDUCE={self.ATOMIC_REDUCE} cannot go into an engine file: SGLang's "
                    "and vLLM's kernels have no split-K to reduce",
                    field="ATOMIC_REDUCE",
                )
            d.pop("SPLIT_K")
        for flag in FLAGS:
            if not d[flag]:
                d.pop(flag)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, object], *, source: str | None = None) -> KernelConfig:
        unknown = set(d) - set(DIMENSIONS)
        if unknown:
            raise ConfigError(
                f"unknown config keys {sorted(unknown)}; valid: {list(DIMENSIONS)}", source=source
            )
        missing = set(ENGINE_KEYS) - set(d)
        if missing:
            raise ConfigError(f"config lacks keys {sorted(missing)}", source=source)
        vals: dict[str, int] = {}
        for key, v in d.items():
            if key in FLAGS:
                if isinstance(v, bool):  # SGLang's own files write "SWAP_AB": true
                    v = int(v)
                if not isinstance(v, int) or v not in (0, 1):
                    raise ConfigError(f"expected 0 or 1, got {v!r}", source=source, field=key)
                vals[key] = v
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(
                    f"expected a positive integer, got {v!r}", source=source, field=key
                )
            vals[key] = v
        return cls(**vals)

    def key(self) -> str:
        """Compact stable text key, e.g. 'm64n128k128g32w4s3k1' ('...k1t' when SWAP_AB, '...f'
        when FOLD_SCALES, '...x' when TMA, '...a' when ATOMIC_REDUCE)."""
        return (
            f"m{self.BLOCK_SIZE_M}n{self.BLOCK_SIZE_N}k{self.BLOCK_SIZE_K}g{self.GROUP_SIZE_M}"
            f"w{self.num_warps}s{self.num_stages}k{self.SPLIT_K}{'t' if self.SWAP_AB else ''}"
            f"{'f' if self.FOLD_SCALES else ''}{'x' if self.TMA else ''}"
            f"{'a' if self.ATOMIC_REDUCE else ''}"
        )

    def compile_key(self) -> tuple[int, ...]:
        """What a compiled binary depends on: GROUP_SIZE_M, SPLIT_K and ATOMIC_REDUCE are runtime
        arguments of our kernels, so configs differing only there share one binary; SWAP_AB,
        FOLD_SCALES and TMA are constexprs."""
        return (
            self.BLOCK_SIZE_M,
            self.BLOCK_SIZE_N,
            self.BLOCK_SIZE_K,
            self.num_warps,
            self.num_stages,
            self.SWAP_AB,
            self.FOLD_SCALES,
            self.TMA,
        )

    @property
    def engine_ok(self) -> bool:
        """Whether an engine file can hold this config (none of our own keys set)."""
        return (
            self.SPLIT_K == 1
            and not self.SWAP_AB
            and not self.FOLD_SCALES
            and not self.TMA
            and not self.ATOMIC_REDUCE
        )

    def with_(self, **changes: int) -> KernelConfig:
        return replace(self, **changes)


# The engines' fallback when no file exists (SGLang fp8_kernel.py, block [128, 128]).
SGLANG_DEFAULT_FP8 = KernelConfig(64, 128, 128, 32, 4, 3)
# vLLM's Triton AWQ GEMM is hard-coded to 32/32/32 with split_k_iters=8 (pack factor).
VLLM_AWQ_DEFAULT = KernelConfig(32, 32, 32, 1, 4, 3, SPLIT_K=8)  # Triton's default warps/stages
# Our INT4 kernel's fallback when no tuned file matches.
DEFAULT_INT4 = KernelConfig(16, 64, 128, 1, 4, 4, SPLIT_K=1)


# The kernel each 0/1 option belongs to, and why the other kernel cannot take it.
FLAG_KINDS: dict[str, tuple[KernelKind, str]] = {
    "FOLD_SCALES": ("fp8", "the INT4 kernel has no per-K-tile rescale"),
    "TMA": ("fp8", "the INT4 kernels load their tiles with plain loads"),
    "ATOMIC_REDUCE": ("int4", "the FP8 kernel reduces split-K in a fixed order"),
}


def foreign_flag(cfg: KernelConfig, kind: KernelKind) -> tuple[str, str] | None:
    """(option, why) for the first option `cfg` sets that `kind`'s kernel does not have."""
    for flag, (owner, why) in FLAG_KINDS.items():
        if getattr(cfg, flag) and kind != owner:
            return flag, f"{flag} is an {owner.upper()} option ({why})"
    return None


def as_config(
    config: KernelConfig | Mapping[str, int] | None, default: KernelConfig
) -> KernelConfig:
    """`config` as a KernelConfig: a dict is read by `from_dict`, None gives `default`."""
    if config is None:
        return default
    if isinstance(config, KernelConfig):
        return config
    return KernelConfig.from_dict(config)
