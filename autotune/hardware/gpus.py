"""Built-in GPU specs (FIELD-NOTES F3) and `--gpu` name resolution.

Figures are dense tensor-core peaks. For GeForce cards we list the fp16-accumulate rate:
FIELD-NOTES C2 implies ~97 TFLOP/s achieved in W4A16 prefill on a 4080 SUPER, above its 52.2
TFLOP/s fp32-accumulate peak, so the engines' kernels there run at the fp16-accumulate rate.
`measured_*` fields hold figures seen on the device where we have them (F3: H200 4.2 TB/s copy,
790/1470 TFLOP/s); the simulator prefers a measured figure.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import UnknownNameError
from autotune.hardware.link_facts import LINK_FACTS


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
    measured_fp16_tflops: float | None = None
    measured_fp8_tflops: float | None = None
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
        return self.measured_bandwidth_gbs or self.bandwidth_gbs

    @property
    def effective_fp16_tflops(self) -> float:
        return self.measured_fp16_tflops or self.fp16_tflops


# The driver's reserved share when a catalog entry does not state one. NVIDIA: measured on the
# H200 (driver 580: Total 143771 MiB, Reserved 616 MiB, torch total 143156 MiB). AMD: ROCm
# reports the whole VRAM to HIP (MI300X: 196592 MiB in rocm-smi and in torch).
DRIVER_RESERVED_MIB: dict[str, int] = {"nvidia": 616, "amd": 0}


def _g(**kw: object) -> GPUSpec:
    return GPUSpec.model_validate(kw)


GPU_CATALOG: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        _g(
            name="rtx-4080-super-32g",
            label="RTX 4080 SUPER 32G (modded)",
            device_names=("RTX 4080 SUPER",),
            cuda_name="NVIDIA GeForce RTX 4080 SUPER",
            memory_mib=32760,
            bandwidth_gbs=736,
            fp16_tflops=104.4,
            fp8_tflops=208.9,
            sm_count=80,
            smem_per_block_kib=99,
            arch="sm_89",
            pcie_gbs=25.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        _g(
            name="rtx-pro-4500-32g",
            label="RTX PRO 4500 Blackwell 32G",
            device_names=("RTX PRO 4500",),
            cuda_name="NVIDIA RTX PRO 4500 Blackwell",
            memory_mib=32607,
            bandwidth_gbs=896,
            fp16_tflops=100.0,
            fp8_tflops=200.0,
            sm_count=82,
            smem_per_block_kib=99,
            arch="sm_120",
            pcie_gbs=50.0,
        ),
        _g(
            name="rtx-3080-20g",
            label="RTX 3080 20G (modded)",
            device_names=("RTX 3080",),
            cuda_name="NVIDIA GeForce RTX 3080",
            memory_mib=20480,
            bandwidth_gbs=760,
            fp16_tflops=119.0,
            sm_count=68,
            smem_per_block_kib=99,
            arch="sm_86",
            pcie_gbs=25.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        _g(
            name="rtx-3090-24g",
            label="RTX 3090 24G",
            device_names=("RTX 3090",),
            cuda_name="NVIDIA GeForce RTX 3090",
            memory_mib=24576,
            # CUDA total 23.58 GiB: vLLM's total_gpu_memory on RTX 3090 (vllm-project/vllm#10517,
            # 2024; 2022 drivers reported 23.70)
            driver_reserved_mib=430,
            bandwidth_gbs=936,
            fp16_tflops=142.0,
            sm_count=82,
            smem_per_block_kib=99,
            arch="sm_86",
            pcie_gbs=25.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        _g(
            name="rtx-2080ti-22g",
            label="RTX 2080 Ti 22G (modded)",
            device_names=("RTX 2080 Ti",),
            cuda_name="NVIDIA GeForce RTX 2080 Ti",
            memory_mib=22528,
            bandwidth_gbs=616,
            fp16_tflops=107.6,
            sm_count=68,
            smem_per_block_kib=64,
            arch="sm_75",
            pcie_gbs=12.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        _g(
            name="rx-7900xtx-24g",
            label="Radeon RX 7900 XTX 24G",
            vendor="amd",
            device_names=("7900 XTX",),
            cuda_name="AMD Radeon RX 7900 XTX",
            memory_mib=24560,
            bandwidth_gbs=960,
            fp16_tflops=122.8,
            sm_count=96,
            smem_per_block_kib=64,
            arch="gfx1100",
            pcie_gbs=25.0,
            p2p=False,
        ),
        _g(
            name="rtx-4090-24g",
            label="RTX 4090 24G",
            device_names=("RTX 4090",),
            cuda_name="NVIDIA GeForce RTX 4090",
            memory_mib=24564,
            # CUDA total 23.64 GiB: torch OOM on RTX 4090 (3DTopia/Phidias-Diffusion/issues/8)
            driver_reserved_mib=357,
            bandwidth_gbs=1008,
            fp16_tflops=330.3,
            fp8_tflops=660.6,
            sm_count=128,
            smem_per_block_kib=99,
            arch="sm_89",
            pcie_gbs=25.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        _g(
            name="rtx-4090-48g",
            label="RTX 4090D 48G (modded)",
            device_names=("RTX 4090",),
            cuda_name="NVIDIA GeForce RTX 4090 D",
            memory_mib=49140,
            bandwidth_gbs=1008,
            fp16_tflops=294.0,
            fp8_tflops=588.0,
            sm_count=114,
            smem_per_block_kib=99,
            arch="sm_89",
            pcie_gbs=25.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        _g(
            name="rtx-5090-32g",
            label="RTX 5090 32G",
            device_names=("RTX 5090",),
            cuda_name="NVIDIA GeForce RTX 5090",
            memory_mib=32607,
            # CUDA total 31.37 GiB: torch OOM on RTX 5090 (Wan-Video/Wan2.1/issues/465)
            driver_reserved_mib=484,
            bandwidth_gbs=1792,
            fp16_tflops=419.0,
            fp8_tflops=838.0,
            sm_count=170,
            smem_per_block_kib=99,
            arch="sm_120",
            pcie_gbs=50.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        _g(
            name="a100-80g",
            label="A100 80GB",
            device_names=("A100",),
            cuda_name="NVIDIA A100-SXM4-80GB",
            memory_mib=81920,
            # CUDA total 79.32 GiB: vLLM's startup check on A100 80GB (vllm-project/vllm-
            # omni/issues/276)
            driver_reserved_mib=696,
            bandwidth_gbs=2039,
            fp16_tflops=312.0,
            sm_count=108,
            smem_per_block_kib=163,
            arch="sm_80",
            pcie_gbs=25.0,
        ),
        _g(
            name="h100-80g",
            label="H100 SXM 80GB",
            device_names=("H100",),
            cuda_name="NVIDIA H100 80GB HBM3",
            memory_mib=81559,
            # CUDA total 79.19 GiB: torch on H100 80GB HBM3 and H100 PCIe; 81559 MiB nvidia-smi
            # (vllm-project/vllm#55169)
            driver_reserved_mib=468,
            bandwidth_gbs=3350,
            fp16_tflops=989.0,
            fp8_tflops=1979.0,
            sm_count=132,
            smem_per_block_kib=227,
            arch="sm_90",
            pcie_gbs=50.0,
        ),
        _g(
            name="h200-141g",
            label="H200 SXM 141GB",
            device_names=("H200",),
            cuda_name="NVIDIA H200",
            memory_mib=143771,
            # CUDA total 143156 MiB: torch.cuda.mem_get_info on our H200 (driver 580; nvidia-smi
            # Reserved 616 MiB)
            driver_reserved_mib=615,
            bandwidth_gbs=4800,
            measured_bandwidth_gbs=4200,
            fp16_tflops=989.0,
            fp8_tflops=1979.0,
            measured_fp16_tflops=790.0,
            measured_fp8_tflops=1470.0,
            sm_count=132,
            smem_per_block_kib=227,
            arch="sm_90",
            pcie_gbs=50.0,
        ),
    )
}


# Datacenter and workstation cards seen in public launch logs (tests/data/real_launches): datasheet
# capacity, bandwidth and dense tensor peaks (NVIDIA and AMD product pages).
GPU_CATALOG.update(
    {
        g.name: g
        for g in (
            _g(
                name="a100-40g",
                label="A100 40GB",
                device_names=("A100",),
                cuda_name="NVIDIA A100-SXM4-40GB",
                memory_mib=40960,
                # CUDA total 39.49 GiB: torch on A100-SXM4-40GB (driver 570)
                driver_reserved_mib=522,
                bandwidth_gbs=1555,
                fp16_tflops=312.0,
                sm_count=108,
                smem_per_block_kib=163,
                arch="sm_80",
                pcie_gbs=25.0,
            ),
            _g(
                name="h800-80g",
                label="H800 80GB",
                device_names=("H800",),
                cuda_name="NVIDIA H800",
                memory_mib=81559,
                bandwidth_gbs=3350,
                fp16_tflops=989.0,
                fp8_tflops=1979.0,
                sm_count=132,
                smem_per_block_kib=227,
                arch="sm_90",
                pcie_gbs=50.0,
            ),
            _g(
                name="h20-96g",
                label="H20 96GB",
                device_names=("H20",),
                cuda_name="NVIDIA H20",
                memory_mib=97871,
                bandwidth_gbs=4000,
                fp16_tflops=148.0,
                fp8_tflops=296.0,
                sm_count=78,
                smem_per_block_kib=227,
                arch="sm_90",
                pcie_gbs=50.0,
            ),
            _g(
                name="b200-180g",
                label="B200 180GB",
                device_names=("B200", "GB200"),
                cuda_name="NVIDIA B200",
                memory_mib=183359,
                # CUDA total 178.35 GiB: cudaGetDeviceProperties totalGlobalMem on B200
                # (pytorch/ao/pull/4002)
                driver_reserved_mib=729,
                bandwidth_gbs=8000,
                fp16_tflops=2250.0,
                fp8_tflops=4500.0,
                sm_count=148,
                smem_per_block_kib=227,
                arch="sm_100",
                pcie_gbs=50.0,
            ),
            _g(
                name="l40s-48g",
                label="L40S 48GB",
                device_names=("L40S",),
                cuda_name="NVIDIA L40S",
                memory_mib=46068,
                # CUDA total 44.42 GiB: torch on L40S (44.39 .. 44.42 in public logs)
                driver_reserved_mib=582,
                bandwidth_gbs=864,
                fp16_tflops=362.0,
                fp8_tflops=733.0,
                sm_count=142,
                smem_per_block_kib=99,
                arch="sm_89",
                pcie_gbs=25.0,
            ),
            _g(
                name="a40-48g",
                label="A40 48GB",
                device_names=("A40",),
                cuda_name="NVIDIA A40",
                memory_mib=46068,
                # CUDA total 44.42 GiB: vLLM's total_gpu_memory on an A40 (vllm-
                # project/vllm#11230's A40-48Q)
                driver_reserved_mib=582,
                bandwidth_gbs=696,
                fp16_tflops=150.0,
                sm_count=84,
                smem_per_block_kib=99,
                arch="sm_86",
                pcie_gbs=25.0,
            ),
            _g(
                name="a10-24g",
                label="A10 24GB",
                device_names=("A10",),
                cuda_name="NVIDIA A10",
                memory_mib=23028,
                # CUDA total 22.06 GiB: torch on A10
                driver_reserved_mib=439,
                bandwidth_gbs=600,
                fp16_tflops=125.0,
                sm_count=72,
                smem_per_block_kib=99,
                arch="sm_86",
                pcie_gbs=25.0,
            ),
            _g(
                name="l4-24g",
                label="L4 24GB",
                device_names=("L4",),
                cuda_name="NVIDIA L4",
                memory_mib=23034,
                # CUDA total 22.05 GiB: vLLM's startup check on L4 (pytorch/pytorch/issues/175666)
                driver_reserved_mib=455,
                bandwidth_gbs=300,
                fp16_tflops=121.0,
                fp8_tflops=242.0,
                sm_count=58,
                smem_per_block_kib=99,
                arch="sm_89",
                pcie_gbs=25.0,
            ),
            _g(
                name="t4-16g",
                label="T4 16GB",
                device_names=("T4",),
                cuda_name="Tesla T4",
                memory_mib=15360,
                # CUDA total 14.56 GiB: torch OOM on a Tesla T4 (Zheng-Chong/CatVTON/issues/133)
                driver_reserved_mib=451,
                bandwidth_gbs=320,
                fp16_tflops=65.0,
                sm_count=40,
                smem_per_block_kib=64,
                arch="sm_75",
                pcie_gbs=12.0,
            ),
            _g(
                name="rtx-a5000-24g",
                label="RTX A5000 24GB",
                device_names=("RTX A5000",),
                cuda_name="NVIDIA RTX A5000",
                memory_mib=24564,
                # CUDA total 23.67 GiB: torch on RTX A5000
                driver_reserved_mib=326,
                bandwidth_gbs=768,
                fp16_tflops=111.0,
                sm_count=64,
                smem_per_block_kib=99,
                arch="sm_86",
                pcie_gbs=25.0,
            ),
            _g(
                name="rtx-a6000-48g",
                label="RTX A6000 48GB",
                device_names=("RTX A6000",),
                cuda_name="NVIDIA RTX A6000",
                memory_mib=49140,
                # CUDA total 47.53 GiB: torch on RTX A6000 (47.41 .. 47.53 by driver)
                driver_reserved_mib=469,
                bandwidth_gbs=768,
                fp16_tflops=155.0,
                sm_count=84,
                smem_per_block_kib=99,
                arch="sm_86",
                pcie_gbs=25.0,
            ),
            # Navi 31 workstation card (96 CUs, 48 GB GDDR6 at 864 GB/s, AMD's product page).
            # HIP's total is 44.98 GiB: vLLM's total_gpu_memory in two public logs (AUGMXNT/
            # llm-tracker.info-vault, "vLLM on RDNA3" 2024-12-07 and "SYCL for AMD" 2024-12-16,
            # ROCm 6.2), and Unsloth Studio's "AMD Radeon PRO W7900 · 45 GiB" on Windows ROCm
            # (unslothai/unsloth#7072, #9551). Tensor peak as the RX 7900 XTX's WMMA rate.
            _g(
                name="w7900-48g",
                label="Radeon PRO W7900 48G",
                vendor="amd",
                device_names=("W7900",),
                cuda_name="AMD Radeon PRO W7900",
                memory_mib=49140,
                driver_reserved_mib=49140 - 46060,  # 44.98 GiB
                bandwidth_gbs=864,
                fp16_tflops=122.6,
                sm_count=96,
                smem_per_block_kib=64,
                arch="gfx1100",
                pcie_gbs=25.0,
                p2p=False,
            ),
            # DGX Spark's GB10: one coherent LPDDR5X pool shared with the Arm CPU. CUDA's
            # total is the memory the OS exposes (121.69 GiB at vLLM's startup check in
            # github.com/MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks/issues/47); nvidia-smi
            # reports no memory total, so SGLang falls back to CUDA's. Peaks: NVIDIA's 1 PFLOP
            # FP4 with sparsity, halved for dense and per precision step; 6,144 CUDA cores.
            _g(
                name="gb10-128g",
                label="GB10 (DGX Spark) 128GB unified",
                device_names=("GB10", "DGX Spark"),
                cuda_name="NVIDIA GB10",
                memory_mib=124611,
                driver_reserved_mib=0,
                nvml_memory=False,
                bandwidth_gbs=273,
                fp16_tflops=125.0,
                fp8_tflops=250.0,
                sm_count=48,
                smem_per_block_kib=99,
                arch="sm_121",
                pcie_gbs=50.0,
                p2p=False,
            ),
            _g(
                name="mi300x-192g",
                label="Instinct MI300X 192GB",
                vendor="amd",
                device_names=("MI300X", "MI30X"),
                cuda_name="AMD Instinct MI300X",
                memory_mib=196592,
                bandwidth_gbs=5300,
                fp16_tflops=1307.0,
                fp8_tflops=2615.0,
                sm_count=304,
                smem_per_block_kib=64,
                arch="gfx942",
                pcie_gbs=50.0,
            ),
            _g(
                name="mi355x-288g",
                label="Instinct MI355X 288GB",
                vendor="amd",
                device_names=("MI355X",),
                cuda_name="AMD Instinct MI355X",
                memory_mib=294912,
                bandwidth_gbs=8000,
                fp16_tflops=2516.0,
                fp8_tflops=5033.0,
                sm_count=256,
                smem_per_block_kib=160,
                arch="gfx950",
                pcie_gbs=50.0,
            ),
        )
    }
)


# Every entry's links (hardware/link_facts.py); a catalog GPU without them is a KeyError at import.
GPU_CATALOG = {
    k: GPUSpec.model_validate({**g.model_dump(), **LINK_FACTS[k].fields()})
    for k, g in GPU_CATALOG.items()
}


def get_gpu(name: str) -> GPUSpec:
    """Return a catalog GPU by key; an unknown key raises UnknownNameError with suggestions."""
    key = name.strip().lower()
    try:
        return GPU_CATALOG[key]
    except KeyError:
        raise UnknownNameError("GPU", name, [*GPU_CATALOG, "auto"]) from None


def match_device(device_name: str, memory_mib: int) -> GPUSpec | None:
    """Match an NVML device name and its memory to the closest catalog entry (modded cards
    share a name with the stock card and differ in memory)."""
    hits = [g for g in GPU_CATALOG.values() if any(s in device_name for s in g.device_names)]
    if not hits:
        return None
    return min(hits, key=lambda g: abs(g.memory_mib - memory_mib))
