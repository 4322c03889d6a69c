"""What a config needs of the GPU and what the GPU has: `DeviceLimits` (shared memory per block,
SMs, architecture), and the shared-memory and register models the space's filters check configs
against (kernels_tuning/space.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernels_tuning.kernel_config import KernelConfig, KernelKind

# Bytes per element of the A operand and the B operand as they sit in shared memory.
OPERAND_BYTES: dict[KernelKind, tuple[float, float]] = {
    "fp8": (1.0, 1.0),  # fp8 activations, fp8 weights
    "int4": (2.0, 0.5),  # bf16/fp16 activations, packed int4 weights
}


@dataclass(frozen=True)
class DeviceLimits:
    """What the filters need to know about the GPU."""

    smem_per_block_bytes: int
    sm_count: int
    name: str = ""
    arch: str = ""  # sm_90 etc.; selects the wgmma shared-memory model

    @classmethod
    def from_gpu_spec(cls, spec: object) -> DeviceLimits:
        """From an `autotune.hardware.GPUSpec` (catalog entry)."""
        smem_kib = int(getattr(spec, "smem_per_block_kib"))  # noqa: B009 - duck-typed
        return cls(
            smem_kib * 1024,
            int(getattr(spec, "sm_count")),  # noqa: B009
            str(getattr(spec, "cuda_name", "") or ""),
            str(getattr(spec, "arch", "")),
        )

    @classmethod
    def from_torch(cls, device: int = 0) -> DeviceLimits:
        """From the live CUDA device (needs torch with CUDA)."""
        import torch

        p = torch.cuda.get_device_properties(device)
        smem = int(getattr(p, "shared_memory_per_block_optin", 0) or 48 * 1024)
        return cls(smem, int(p.multi_processor_count), str(p.name), f"sm_{p.major}{p.minor}")


H200_LIMITS = DeviceLimits(227 * 1024, 132, "NVIDIA H200", "sm_90")


def sm_version(arch: str) -> int:
    """'sm_90' / 'sm_90a' -> 90; 0 when unknown."""
    digits = "".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit())
    return int(digits) if digits else 0


def uses_wgmma(cfg: KernelConfig, arch: str) -> bool:
    """Triton emits Hopper wgmma for tiles of at least one warpgroup's 64 rows on the MMA's M
    side: BLOCK_SIZE_M, or the weight rows BLOCK_SIZE_N when SWAP_AB, where the tokens
    (BLOCK_SIZE_M) are the MMA's N side and Triton 3.6 wants at least 16 of them (sm_90
    compiles of our kernels: BM 8 swapped runs mma.sync)."""
    if not arch.startswith("sm_90"):
        return False
    if cfg.SWAP_AB:
        return cfg.BLOCK_SIZE_N >= 64 and cfg.BLOCK_SIZE_M >= 16
    return cfg.BLOCK_SIZE_M >= 64


SMEM_MARGIN = 1024  # barriers and scratch Triton adds beyond the operand buffers


def smem_bytes(cfg: KernelConfig, kind: KernelKind, arch: str = "") -> int:
    """Shared memory of one program, in bytes (the model: kernels_tuning/space.py's docstring)."""
    a_bytes, b_bytes = OPERAND_BYTES[kind]
    a_tile = cfg.BLOCK_SIZE_M * cfg.BLOCK_SIZE_K * a_bytes
    b_tile = cfg.BLOCK_SIZE_K * cfg.BLOCK_SIZE_N * b_bytes
    s = cfg.num_stages
    if kind == "fp8":
        nbuf = s if uses_wgmma(cfg, arch) else s - 1  # TMA or not (sm_90 compiles)
        return int(nbuf * (a_tile + b_tile)) + SMEM_MARGIN
    if cfg.SWAP_AB:
        # Swapped INT4: the dequantized planes feed the MMA from registers (no staged tile);
        # bound: `s` buffers of activations, packed weights and a word per column for the
        # zeros/scales (above Triton's figure for every swapped config compiled for sm_90).
        return int(s * (a_tile + b_tile + 4 * cfg.BLOCK_SIZE_N)) + SMEM_MARGIN
    # INT4: packed weights go through registers (dequant), so wgmma keeps `s` A buffers but
    # s - 1 packed-B buffers; the dequantized tile is staged once for the MMA.
    w_tile = cfg.BLOCK_SIZE_K * cfg.BLOCK_SIZE_N * a_bytes
    a_buf = s if uses_wgmma(cfg, arch) else s - 1
    return int(a_buf * a_tile + (s - 1) * b_tile + w_tile) + SMEM_MARGIN


# A thread has 255 registers; a tile whose fp32 accumulator alone needs more than half of them
# spills (the BM128xBN256 4-warp and BM256xBN256 configs took 4-23 s each to compile for sm_90
# on the H200 and are never competitive).
MAX_ACC_REGISTERS = 128


def acc_registers(cfg: KernelConfig) -> int:
    return cfg.BLOCK_SIZE_M * cfg.BLOCK_SIZE_N // (32 * cfg.num_warps)
