"""Datacenter and workstation GPUs seen in public launch logs (tests/data/real_launches)."""

from __future__ import annotations

from autotune.hardware.gpu_spec import GA100, GPUSpec, spec

# Datacenter and workstation cards seen in public launch logs (tests/data/real_launches): datasheet
# capacity, bandwidth and dense tensor peaks (NVIDIA and AMD product pages).
LAUNCH_LOG_GPUS: tuple[GPUSpec, ...] = (
    spec(
        name="a100-40g",
        label="A100 40GB",
        device_names=("A100",),
        cuda_name="NVIDIA A100-SXM4-40GB",
        memory_mib=40960,
        # CUDA total 39.49 GiB: torch on A100-SXM4-40GB (driver 570)
        driver_reserved_mib=522,
        bandwidth_gbs=1555,
        **GA100,
    ),
    # A800: NVIDIA's export variant of the A100 (Reuters, 2022-11-07, as reported in
    # tweakers.net/nieuws/203182: the same GA100 and memory, NVLink cut from 600 to 400 GB/s).
    # Capacity, bandwidth and the fp16 peak are the A100 80GB datasheet's (nvidia.com/content/
    # dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf:
    # SXM 2,039 GB/s, PCIe 1,935 GB/s, 312 TFLOP/s dense fp16/bf16, no fp8). nvidia-smi reports
    # 'NVIDIA A800-SXM4-80GB' and 'NVIDIA A800 80GB PCIe', both 81920 MiB, compute cap 8.0, in
    # public logs. CUDA's total is not in a public log we read: the vendor default stands.
    spec(
        name="a800-80g",
        label="A800 SXM 80GB",
        device_names=("A800",),
        cuda_name="NVIDIA A800-SXM4-80GB",
        memory_mib=81920,
        bandwidth_gbs=2039,
        **GA100,
    ),
    spec(
        name="a800-pcie-80g",
        label="A800 PCIe 80GB",
        device_names=("A800 80GB PCIe",),
        cuda_name="NVIDIA A800 80GB PCIe",
        memory_mib=81920,
        bandwidth_gbs=1935,
        **GA100,
    ),
    spec(
        name="h800-80g",
        hbm=True,
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
    # H100 NVL: a PCIe Gen5 card of the same GH100 (132 SMs: fastfetch-cli/fastfetch#1658 reports
    # 16,896 cores for 'NVIDIA H100 NVL') with 94 GB HBM3 at 3.9 TB/s and NVLink bridges of
    # 600 GB/s bidirectional; dense tensor peaks are half the datasheet's sparse 1,671 (fp16/bf16)
    # and 3,341 (fp8) TFLOP/s (NVIDIA H100 Tensor Core GPU datasheet, H100 NVL column,
    # resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet). nvidia-smi
    # reports 'NVIDIA H100 NVL', 95830 MiB (NVIDIA/gpu-admin-tools#4, driver 535.183.01).
    spec(
        name="h100-nvl-94g",
        hbm=True,
        label="H100 NVL 94GB",
        device_names=("H100 NVL",),
        cuda_name="NVIDIA H100 NVL",
        memory_mib=95830,
        # CUDA total 93.00 GiB: torch OOM on an H100 NVL 94GB (github.com/ali-vilab/VACE/issues/56)
        driver_reserved_mib=95830 - 95232,
        bandwidth_gbs=3900,
        fp16_tflops=835.5,
        fp8_tflops=1670.5,
        sm_count=132,
        smem_per_block_kib=227,
        arch="sm_90",
        pcie_gbs=50.0,
    ),
    spec(
        name="h20-96g",
        hbm=True,
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
    spec(
        name="b200-180g",
        hbm=True,
        label="B200 180GB",
        device_names=("B200", "GB200"),
        cuda_name="NVIDIA B200",
        memory_mib=183359,
        # CUDA total 178.35 GiB: cudaGetDeviceProperties totalGlobalMem on B200
        # (pytorch/ao/pull/4002)
        driver_reserved_mib=729,
        bandwidth_gbs=8000,
        # dense, NVIDIA's HGX B200 datasheet per GPU (FP4 18 PFLOP/s with sparsity)
        fp16_tflops=2250.0,
        fp8_tflops=4500.0,
        fp4_tflops=9000.0,
        sm_count=148,
        smem_per_block_kib=227,
        arch="sm_100",
        pcie_gbs=50.0,
    ),
    spec(
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
    spec(
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
    spec(
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
    spec(
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
    spec(
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
    spec(
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
    spec(
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
    # RTX PRO 6000 Blackwell (GB202, 188 SMs, sm_120, 96 GB GDDR7, PCIe 5.0 x16, no NVLink).
    # Workstation Edition datasheet (nvidia.com/content/dam/en-zz/Solutions/data-center/rtx-pro-
    # 6000-blackwell-workstation-edition/workstation-blackwell-rtx-pro-6000-workstation-edition-
    # nvidia-us-3519208-web.pdf): 1,792 GB/s, 125 TFLOP/s fp32, 4,000 AI TOPS = fp4 with
    # sparsity, so dense fp4 2,000, fp8 1,000, fp16 500. Server Edition datasheet (linked from
    # nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/): 1,597 GB/s and 120
    # TFLOP/s fp32; it states no tensor peak, so these are the Workstation's scaled by the fp32
    # ratio (120/125: the same SMs at a lower boost clock). nvidia-smi reports 97887 MiB for
    # both, with the names below, in public logs.
    spec(
        name="rtx-pro-6000-se-96g",
        label="RTX PRO 6000 Blackwell Server Edition 96GB",
        device_names=("RTX PRO 6000 Blackwell Server",),
        cuda_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        memory_mib=97887,
        bandwidth_gbs=1597,
        fp16_tflops=480.0,
        fp8_tflops=960.0,
        fp4_tflops=1920.0,
        sm_count=188,
        smem_per_block_kib=99,
        arch="sm_120",
        pcie_gbs=50.0,
    ),
    spec(
        name="rtx-pro-6000-ws-96g",
        label="RTX PRO 6000 Blackwell Workstation Edition 96GB",
        device_names=("RTX PRO 6000 Blackwell Workstation",),
        cuda_name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        memory_mib=97887,
        bandwidth_gbs=1792,
        fp16_tflops=500.0,
        fp8_tflops=1000.0,
        fp4_tflops=2000.0,
        sm_count=188,
        smem_per_block_kib=99,
        arch="sm_120",
        pcie_gbs=50.0,
    ),
    # Navi 31 workstation card (96 CUs, 48 GB GDDR6 at 864 GB/s, AMD's product page).
    # HIP's total is 44.98 GiB: vLLM's total_gpu_memory in two public logs (AUGMXNT/
    # llm-tracker.info-vault, "vLLM on RDNA3" 2024-12-07 and "SYCL for AMD" 2024-12-16,
    # ROCm 6.2), and Unsloth Studio's "AMD Radeon PRO W7900 · 45 GiB" on Windows ROCm
    # (unslothai/unsloth#7072, #9551). Tensor peak as the RX 7900 XTX's WMMA rate.
    spec(
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
    # reports no memory total, so SGLang falls back to CUDA's. Other Sparks report other
    # totals in SGLang's fallback line: 124546 MiB (sostrowsk/dgx-spark-local-llm,
    # sglang-versuch2.log), 122501 MiB (jethac/dgx-spark-hijinks, an NVIDIA 26.05 container).
    # Peaks: NVIDIA's 1 PFLOP FP4 with sparsity, halved for dense and per precision step;
    # 6,144 CUDA cores.
    spec(
        name="gb10-128g",
        label="GB10 (DGX Spark) 128GB unified",
        device_names=("GB10", "DGX Spark"),
        cuda_name="NVIDIA GB10",
        memory_mib=124611,
        driver_reserved_mib=0,
        nvml_memory=False,
        unified_memory=True,
        bandwidth_gbs=273,
        fp16_tflops=125.0,
        fp8_tflops=250.0,
        fp4_tflops=500.0,
        sm_count=48,
        smem_per_block_kib=99,
        arch="sm_121",
        pcie_gbs=50.0,
        p2p=False,
    ),
    # Jetson AGX Orin 64GB: one LPDDR5 pool (256-bit, 204.8 GB/s) shared with the Arm CPU; a
    # 2,048-core Ampere GPU with 64 Tensor Cores, 1.3 GHz (NVIDIA's Jetson Orin tech specs,
    # nvidia.com/en-us/autonomous-machines/embedded-systems/jetson-orin/). 16 SMs of 128 cores,
    # 170 sparse INT8 TOPS on the GPU (Jetson AGX Orin Series Technical Brief, nvidia.com/content/
    # dam/en-zz/Solutions/gtcf21/jetson-orin/nvidia-jetson-agx-orin-technical-brief.pdf): dense
    # INT8 85, fp16 42.5; no fp8. Compute capability 8.7: 163 KiB shared memory per block, as
    # 8.0 (CUDA C++ Programming Guide, technical specifications per compute capability). CUDA's
    # total is what the OS exposes: deviceQuery 'Orin', 62841 MBytes, 16 multiprocessors
    # (github.com/LittleYellowPanda/JetsonFirstSetup, README). nvidia-smi names it 'Orin (nvgpu)'
    # with memory 'Not Supported' (dusty-nv/jetson-containers#1403, an AGX Orin 64GB). A host
    # copy reads and writes the same DRAM: half its bandwidth.
    spec(
        name="jetson-agx-orin-64g",
        label="Jetson AGX Orin 64GB unified",
        device_names=("Jetson AGX Orin", "Jetson Orin AGX", "Orin (nvgpu)"),
        cuda_name="Orin",
        memory_mib=62841,
        driver_reserved_mib=0,
        nvml_memory=False,
        unified_memory=True,
        bandwidth_gbs=204.8,
        fp16_tflops=42.5,
        sm_count=16,
        smem_per_block_kib=163,
        arch="sm_87",
        pcie_gbs=102.4,
        p2p=False,
    ),
    spec(
        name="mi300x-192g",
        hbm=True,
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
    spec(
        name="mi355x-288g",
        hbm=True,
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
