"""The GPU spec model the catalog's entries are made of (hardware/gpus.py,
hardware/launch_gpus.py)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class GPUSpec(BaseModel):
    """What the planner, simulator and kernel tuner need to know about one GPU model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="catalog key, e.g. rtx-4080-super-32g")
    label: str = Field(description="human name")
    vendor: Literal["nvidia", "amd"] = "nvidia"
    device_names: tuple[str, ...] = Field(
        default=(), description="substrings of the NVML / torch device name that identify it"
    )
    cuda_name: str | None = Field(
        default=None, description="torch.cuda.get_device_name(), used in kernel config file names"
    )
    memory_mib: int
    bandwidth_gbs: float = Field(description="datasheet memory bandwidth, GB/s")
    measured_bandwidth_gbs: float | None = None
    fp16_tflops: float = Field(description="dense fp16/bf16 tensor TFLOP/s (see module doc)")
    fp8_tflops: float | None = Field(default=None, description="dense fp8 TFLOP/s; None: no fp8")
    fp4_tflops: float | None = Field(
        default=None, description="dense fp4 TFLOP/s; None: no fp4, or not stated for this entry"
    )
    measured_fp16_tflops: float | None = None
    measured_fp8_tflops: float | None = None
    hbm: bool = Field(
        default=False,
        description="HBM memory (datacenter parts): without a measurement of its own, it is "
        "taken to reach the shares of its datasheet rates that F3's H200 reached",
    )
    sm_count: int
    smem_per_block_kib: int = Field(description="max opt-in shared memory per block, KiB")
    arch: str = Field(description="compute capability as sm_XY, or gfx for AMD")
    pcie_gbs: float = Field(description="effective host<->device copy bandwidth, GB/s")
    p2p: bool = Field(default=True, description="peer-to-peer between GPUs (Ada GeForce: no)")
    pcie_gen: int = Field(default=4, ge=1, le=6, description="PCIe generation of the GPU's slot")
    pcie_lanes: int = Field(default=16, ge=1, le=16, description="PCIe lanes of the GPU's slot")
    fabric_gbs: float | None = Field(
        default=None,
        gt=0,
        description="GPU-to-GPU fabric (NVLink, Infinity Fabric) per GPU, one direction, GB/s; "
        "None: peers are reached over PCIe",
    )
    fabric_mesh_links: int = Field(
        default=0, ge=0, description="links of a full-mesh fabric (AMD xGMI: 7); 0: a switch"
    )
    fabric_group: int = Field(
        default=0,
        ge=0,
        description="GPUs one fabric joins (an NVLink bridge: 2), beyond which peers are reached "
        "over PCIe; 0: every GPU of the node",
    )
    desktop_reserve_mib: int = Field(
        default=0, description="memory a desktop session takes on GPU0 (GeForce: ~80 MB)"
    )
    driver_reserved_mib: int | None = Field(
        default=None,
        description="nvidia-smi's 'Reserved' (the driver's share, outside what CUDA reports); "
        "None: the vendor default (DRIVER_RESERVED_MIB)",
    )
    nvml_memory: bool = Field(
        default=True,
        description="NVML reports a memory total (GB10's unified memory: no, so vLLM's batch "
        "defaults, which read NVML's total, fall back to the small pair)",
    )
    unified_memory: bool = Field(
        default=False,
        description="one memory pool shared with the host CPU (GB10, Jetson): CUDA's free memory "
        "is what the OS has free, so the host's own use, not a context, sets it at launch",
    )

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @property
    def runtime_memory_mib(self) -> int:
        """The total CUDA / HIP report (torch.cuda.mem_get_info()[1]): nvidia-smi's total less
        the driver's reserved share. vLLM's budget is a fraction of this total; SGLang's
        GPU-size rules read nvidia-smi's (memory_mib)."""
        reserved = self.driver_reserved_mib
        if reserved is None:
            reserved = DRIVER_RESERVED_MIB[self.vendor]
        return self.memory_mib - reserved

    @property
    def effective_bandwidth_gbs(self) -> float:
        share = HBM_SHARES["bandwidth"] if self.hbm else 1.0
        return self.measured_bandwidth_gbs or self.bandwidth_gbs * share

    @property
    def effective_fp16_tflops(self) -> float:
        share = HBM_SHARES["fp16"] if self.hbm else 1.0
        return self.measured_fp16_tflops or self.fp16_tflops * share

    @property
    def effective_fp8_tflops(self) -> float | None:
        if self.fp8_tflops is None:
            return None
        share = HBM_SHARES["fp8"] if self.hbm else 1.0
        return self.measured_fp8_tflops or self.fp8_tflops * share

    @property
    def effective_fp4_tflops(self) -> float | None:
        """No FP4 measurement of ours: an HBM part reaches the share its FP8 rate does."""
        if self.fp4_tflops is None:
            return None
        return self.fp4_tflops * (HBM_SHARES["fp8"] if self.hbm else 1.0)


# What a datacenter HBM part reaches of its datasheet rates where the catalog has no measurement
# of its own: FIELD-NOTES F3's H200 (4.2 of 4.8 TB/s in a copy; 790 of 989 bf16 and 1470 of 1979
# fp8 TFLOP/s in GEMMs). The roofline's calibration (planner/perf.py, C2 on a 4080 SUPER) runs a
# GeForce card at its datasheet rates, which public H100 / MI300X benchmark runs do not reach
# (tests/data/real_speeds, benchmarks/fidelity_speed.py).
HBM_SHARES: dict[str, float] = {"bandwidth": 4200 / 4800, "fp16": 790 / 989, "fp8": 1470 / 1979}


# The driver's reserved share when a catalog entry does not state one. NVIDIA: measured on the
# H200 (driver 580: Total 143771 MiB, Reserved 616 MiB, torch total 143156 MiB). AMD: ROCm
# reports the whole VRAM to HIP (MI300X: 196592 MiB in rocm-smi and in torch).
DRIVER_RESERVED_MIB: dict[str, int] = {"nvidia": 616, "amd": 0}


def spec(**kw: object) -> GPUSpec:
    """One catalog entry; its links come from hardware/link_facts.py when the catalog is built."""
    return GPUSpec.model_validate(kw)


# What every GA100 card shares (A100 40/80 GB, A800 SXM/PCIe): SMs, shared memory, compute
# capability, the dense fp16/bf16 peak (A100 datasheet: 312 TFLOP/s, no fp8) and the host link.
GA100: dict[str, object] = {
    "hbm": True,
    "fp16_tflops": 312.0,
    "sm_count": 108,
    "smem_per_block_kib": 163,
    "arch": "sm_80",
    "pcie_gbs": 25.0,
}


def device_capability(arch: str) -> tuple[int, int] | None:
    """(major, minor) as torch.cuda.get_device_capability reports it for a catalog arch: sm_90 ->
    (9, 0); on ROCm the gfx target's leading digits (gfx942 -> (9, 4), gfx1100 -> (11, 0))."""
    m = re.fullmatch(r"sm_(\d+)(\d)", arch) or re.fullmatch(r"gfx(\d+)(\d)\w", arch)
    return (int(m.group(1)), int(m.group(2))) if m else None
