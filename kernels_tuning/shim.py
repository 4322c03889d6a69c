"""Loader for our own tuned files (INT4 W4A16, and FP8 with split-K), picking configs the way
SGLang's `get_w8a8_block_fp8_configs` does: the file for (N, K, device), then the key nearest
to M by absolute distance (ties to the smaller key), else a default config.

Search order for a file: the folder in $AUTOTUNE_KERNEL_CONFIG_DIR, an explicit `config_dir`,
then the files shipped in kernels_tuning/configs/. For FP8 our split-K file is preferred and
the SGLang-named file is the fallback. A file's provenance sidecar is checked once, on first
load, and a ProvenanceWarning is issued when it was tuned on another GPU or software stack.

    from kernels_tuning.shim import int4_matmul
    y = int4_matmul(x, qweight, qzeros, scales)          # AWQ layout, group 128
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import ConfigError
from kernels_tuning import output
from kernels_tuning.kernel_config import (
    DEFAULT_INT4,
    SGLANG_DEFAULT_FP8,
    KernelConfig,
    KernelKind,
    foreign_flag,
)

if TYPE_CHECKING:
    import torch

CONFIG_DIR = Path(__file__).parent / "configs"
ENV_DIR = "AUTOTUNE_KERNEL_CONFIG_DIR"


def _dirs(config_dir: Path | str | None) -> list[Path]:
    out = []
    env = os.environ.get(ENV_DIR)
    if env:
        out.append(Path(env))
    if config_dir is not None:
        out.append(Path(config_dir))
    out.append(CONFIG_DIR)
    return out


def candidate_names(
    kind: KernelKind,
    n: int,
    k: int,
    device_name: str,
    *,
    group_size: int = 128,
    packing: str = "awq",
) -> list[str]:
    """Relative paths tried, in order."""
    if kind == "fp8":
        return [
            f"autotune/{output.fp8_splitk_filename(n, k, device_name)}",
            f"sglang/{output.sglang_filename(n, k, device_name)}",
            f"vllm/{output.vllm_filename(n, k, device_name)}",
        ]
    return [f"autotune/{output.int4_filename(n, k, device_name, group_size, packing)}"]


def find_config_file(
    kind: KernelKind,
    n: int,
    k: int,
    device_name: str,
    *,
    group_size: int = 128,
    packing: str = "awq",
    config_dir: Path | str | None = None,
) -> Path | None:
    for d in _dirs(config_dir):
        for rel in candidate_names(
            kind, n, k, device_name, group_size=group_size, packing=packing
        ):
            p = d / rel
            if p.is_file():
                return p
    return None


@functools.lru_cache(maxsize=256)
def _load(path: str, check: bool) -> dict[int, dict[str, int]]:
    return output.load_config_file(Path(path), check=check)


def get_config(
    kind: KernelKind,
    n: int,
    k: int,
    m: int,
    *,
    device_name: str | None = None,
    group_size: int = 128,
    packing: str = "awq",
    config_dir: Path | str | None = None,
    check_provenance: bool = True,
    deterministic: bool = False,
) -> KernelConfig:
    """The tuned config for (N, K) at batch size M, or the default when no file exists.

    `deterministic=True` gives an ATOMIC_REDUCE entry with the ordered split-K sum instead
    (bit-identical output from run to run; kernels_tuning/space.py)."""
    dev = device_name or _device_name()
    path = find_config_file(
        kind, n, k, dev, group_size=group_size, packing=packing, config_dir=config_dir
    )
    if path is None:
        return SGLANG_DEFAULT_FP8 if kind == "fp8" else DEFAULT_INT4
    table = _load(str(path), check_provenance)
    cfg = KernelConfig.from_dict(output.nearest(table, m), source=str(path))
    foreign = foreign_flag(cfg, kind)
    if foreign is not None:
        raise ConfigError(foreign[1], source=str(path), field=foreign[0])
    if deterministic and cfg.ATOMIC_REDUCE:
        cfg = cfg.with_(ATOMIC_REDUCE=0)
    return cfg


@functools.lru_cache(maxsize=8)
def _device_name(device: int = 0) -> str:
    return output.current_device_name(device)


def int4_matmul(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    *,
    group_size: int = 128,
    packing: str = "awq",
    config_dir: Path | str | None = None,
    deterministic: bool = False,
) -> torch.Tensor:
    """W4A16 GEMM with the tuned config for this shape and batch size (`deterministic`: the
    ordered split-K sum where the entry has ATOMIC_REDUCE; see `get_config`)."""
    from kernels_tuning.kernels.int4_w4a16 import Packing, w4a16_matmul

    k = x.shape[-1]
    n = qweight.shape[1] * 8 if packing == "awq" else qweight.shape[1]
    m = x.numel() // k
    cfg = get_config(
        "int4",
        n,
        k,
        m,
        group_size=group_size,
        packing=packing,
        config_dir=config_dir,
        deterministic=deterministic,
    )
    if packing not in ("awq", "gptq"):
        raise ConfigError(f"unknown packing {packing!r}; valid: awq, gptq", field="packing")
    pk: Packing = "awq" if packing == "awq" else "gptq"
    return w4a16_matmul(x, qweight, qzeros, scales, group_size=group_size, packing=pk, config=cfg)


def fp8_block_matmul(
    A: torch.Tensor,
    B: torch.Tensor,
    As: torch.Tensor,
    Bs: torch.Tensor,
    output_dtype: torch.dtype | None = None,
    *,
    config_dir: Path | str | None = None,
) -> torch.Tensor:
    """FP8 block GEMM with our tuned (split-K) config, falling back to the engine file."""
    from kernels_tuning.kernels.fp8_block import w8a8_block_fp8_matmul

    n, k = B.shape
    m = A.numel() // k
    cfg = get_config("fp8", n, k, m, config_dir=config_dir)
    return w8a8_block_fp8_matmul(A, B, As, Bs, (128, 128), output_dtype, config=cfg)
