"""Built-in GPU specs (FIELD-NOTES F3) and `--gpu` name resolution.

Figures are dense tensor-core peaks at FP32 accumulate, the rate bf16 GEMMs and W4A16 kernels
(Marlin, which dequantizes to fp16 and accumulates in fp32) run at. GeForce cards run it at half
their FP16-accumulate rate (NVIDIA's figures as public spec tables list them, e.g. hmc-tech.com's
RTX 4090: 165.2 dense with FP32 accumulate against 330.3 with FP16 accumulate, FP8 330.3 against
660.6; the RTX 5090's dense FP16 209.5), so those are listed: 4080 SUPER 104.4 (FIELD-NOTES C2's
W4A16 prefill reaches about 97 of it), 3090 71, 4090 165.2, 5090 209.5. `fp4_tflops` is Blackwell's FP4 MMA, which NVFP4 W4A4 linear layers run on: the
datasheet's FP4 AI TOPS (with sparsity) halved, the 5090's 3,352 to 1,676.
`measured_*` fields hold figures seen on the device where we have them (F3: H200 4.2 TB/s copy,
790/1470 TFLOP/s); the simulator prefers a measured figure.
"""

from __future__ import annotations

from autotune.errors import UnknownNameError
from autotune.hardware.gpu_spec import DRIVER_RESERVED_MIB, GA100, GPUSpec, spec
from autotune.hardware.launch_gpus import LAUNCH_LOG_GPUS
from autotune.hardware.link_facts import LINK_FACTS

__all__ = ["DRIVER_RESERVED_MIB", "GPU_CATALOG", "GPUSpec", "get_gpu", "match_device"]

GPU_CATALOG: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        spec(
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
        spec(
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
        spec(
            name="rtx-3080-20g",
            label="RTX 3080 20G (modded)",
            device_names=("RTX 3080",),
            cuda_name="NVIDIA GeForce RTX 3080",
            memory_mib=20480,
            bandwidth_gbs=760,
            fp16_tflops=59.5,
            sm_count=68,
            smem_per_block_kib=99,
            arch="sm_86",
            pcie_gbs=25.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        spec(
            name="rtx-3090-24g",
            label="RTX 3090 24G",
            device_names=("RTX 3090",),
            cuda_name="NVIDIA GeForce RTX 3090",
            memory_mib=24576,
            # CUDA total 23.58 GiB: vLLM's total_gpu_memory on RTX 3090 (vllm-project/vllm#10517,
            # 2024; 2022 drivers reported 23.70)
            driver_reserved_mib=430,
            bandwidth_gbs=936,
            fp16_tflops=71.0,
            sm_count=82,
            smem_per_block_kib=99,
            arch="sm_86",
            pcie_gbs=25.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        spec(
            name="rtx-2080ti-22g",
            label="RTX 2080 Ti 22G (modded)",
            device_names=("RTX 2080 Ti",),
            cuda_name="NVIDIA GeForce RTX 2080 Ti",
            memory_mib=22528,
            bandwidth_gbs=616,
            fp16_tflops=53.8,
            sm_count=68,
            smem_per_block_kib=64,
            arch="sm_75",
            pcie_gbs=12.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        spec(
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
        # Navi 31 with 84 CUs and 20 GiB of VRAM (ROCm's GPU hardware specifications table,
        # rocm.docs.amd.com/en/latest/reference/gpu-arch-specs.html: RX 7900 XT, gfx1100, 20 GiB,
        # 84 CUs), 800 GB/s, PCIe 4.0 x16 (AMD's product page). Tensor peak: the XTX's WMMA rate
        # per CU and clock (512 fp16 FLOP) at 84 CUs and the 2.4 GHz boost clock.
        spec(
            name="rx-7900xt-20g",
            label="Radeon RX 7900 XT 20G",
            vendor="amd",
            device_names=("7900 XT",),
            cuda_name="AMD Radeon RX 7900 XT",
            memory_mib=20480,
            bandwidth_gbs=800,
            fp16_tflops=103.2,
            sm_count=84,
            smem_per_block_kib=64,
            arch="gfx1100",
            pcie_gbs=25.0,
            p2p=False,
        ),
        spec(
            name="rtx-4090-24g",
            label="RTX 4090 24G",
            device_names=("RTX 4090",),
            cuda_name="NVIDIA GeForce RTX 4090",
            memory_mib=24564,
            # CUDA total 23.64 GiB: torch OOM on RTX 4090 (3DTopia/Phidias-Diffusion/issues/8)
            driver_reserved_mib=357,
            bandwidth_gbs=1008,
            fp16_tflops=165.2,
            fp8_tflops=330.3,
            sm_count=128,
            smem_per_block_kib=99,
            arch="sm_89",
            pcie_gbs=25.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        spec(
            name="rtx-4090-48g",
            label="RTX 4090D 48G (modded)",
            device_names=("RTX 4090",),
            cuda_name="NVIDIA GeForce RTX 4090 D",
            memory_mib=49140,
            bandwidth_gbs=1008,
            fp16_tflops=147.4,
            fp8_tflops=294.8,
            sm_count=114,
            smem_per_block_kib=99,
            arch="sm_89",
            pcie_gbs=25.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        spec(
            name="rtx-5090-32g",
            label="RTX 5090 32G",
            device_names=("RTX 5090",),
            cuda_name="NVIDIA GeForce RTX 5090",
            memory_mib=32607,
            # CUDA total 31.37 GiB: torch OOM on RTX 5090 (Wan-Video/Wan2.1/issues/465)
            driver_reserved_mib=484,
            bandwidth_gbs=1792,
            fp16_tflops=209.5,
            fp8_tflops=419.0,
            fp4_tflops=1676.0,
            sm_count=170,
            smem_per_block_kib=99,
            arch="sm_120",
            pcie_gbs=50.0,
            p2p=False,
            desktop_reserve_mib=80,
        ),
        spec(
            name="a100-80g",
            label="A100 80GB",
            device_names=("A100",),
            cuda_name="NVIDIA A100-SXM4-80GB",
            memory_mib=81920,
            # CUDA total 79.32 GiB: vLLM's startup check on A100 80GB (vllm-project/vllm-
            # omni/issues/276)
            driver_reserved_mib=696,
            bandwidth_gbs=2039,
            **GA100,
        ),
        spec(
            name="h100-80g",
            hbm=True,
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
        spec(
            name="h200-141g",
            hbm=True,
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


GPU_CATALOG.update({g.name: g for g in LAUNCH_LOG_GPUS})


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
    share a name with the stock card and differ in memory); at equal memory the entry whose
    matching name is the longest wins ('NVIDIA A800 80GB PCIe' also contains 'A800')."""

    def named(g: GPUSpec) -> int:
        return max((len(s) for s in g.device_names if s in device_name), default=0)

    hits = [g for g in GPU_CATALOG.values() if named(g)]
    if not hits:
        return None
    return min(hits, key=lambda g: (abs(g.memory_mib - memory_mib), -named(g)))
