from __future__ import annotations

import pytest

from autotune.errors import HardwareError, UnknownNameError
from autotune.hardware import GPU_CATALOG, get_gpu, resolve_gpu
from autotune.hardware.gpus import match_device

DESIGN_NAMES = [
    "rtx-4080-super-32g",
    "rtx-pro-4500-32g",
    "rtx-3080-20g",
    "rtx-2080ti-22g",
    "rx-7900xtx-24g",
    "rtx-4090-24g",
    "rtx-5090-32g",
    "a100-80g",
    "h100-80g",
    "h200-141g",
]


def test_catalog_has_the_design_names() -> None:
    assert set(DESIGN_NAMES) <= set(GPU_CATALOG)
    assert get_gpu("RTX-4080-SUPER-32G").memory_mib == 32760  # F3
    assert get_gpu("h200-141g").memory_mib == 143771


def test_unknown_gpu_suggests() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'rtx-4090-24g'"):
        get_gpu("rtx-4090-24")


def test_match_modded_card_by_memory() -> None:
    assert match_device("NVIDIA GeForce RTX 4090", 49140).name == "rtx-4090-48g"  # type: ignore[union-attr]
    assert match_device("NVIDIA GeForce RTX 4090", 24564).name == "rtx-4090-24g"  # type: ignore[union-attr]
    assert match_device("NVIDIA H200", 143771).name == "h200-141g"  # type: ignore[union-attr]
    assert match_device("Some Other GPU", 1000) is None


def test_auto_without_driver_says_so() -> None:
    pytest.importorskip("pynvml")
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present")
    except pynvml.NVMLError:
        pass
    with pytest.raises(HardwareError, match="no NVIDIA driver"):
        resolve_gpu("auto")


def test_cuda_total_is_nvidia_smi_less_the_driver_share() -> None:
    # Our H200 (driver 580): nvidia-smi Total 143771 MiB, Reserved 616 MiB; torch 143156 MiB.
    assert get_gpu("h200-141g").runtime_memory_mib == 143156
    # Public logs: H100 80GB HBM3 79.19 GiB, L4 22.05 GiB, A100-SXM4-40GB 39.49 GiB (+-0.01 GiB).
    for name, gib in (("h100-80g", 79.19), ("l4-24g", 22.05), ("a100-40g", 39.49)):
        assert abs(get_gpu(name).runtime_memory_mib / 1024 - gib) < 0.01, name
    # ROCm hands HIP the whole VRAM (MI300X: 191.98 GiB in rocm-smi and in torch).
    mi300x = get_gpu("mi300x-192g")
    assert mi300x.runtime_memory_mib == mi300x.memory_mib
    # A share of a few hundred MiB, never the card; the W7900's HIP total is 3 GiB under its
    # 48 GB in every public figure (test_w7900_total_is_what_vllm_logged).
    for gpu in GPU_CATALOG.values():
        share = gpu.memory_mib - gpu.runtime_memory_mib
        assert 0 <= share < (3200 if gpu.name == "w7900-48g" else 1024), gpu.name


def test_w7900_total_is_what_vllm_logged() -> None:
    """vLLM's total_gpu_memory=44.98GiB on a Radeon PRO W7900 (public launch record, ROCm 6.2)
    is the catalog's HIP total, which the 0.4.1 launch on that card (no total in its log) then
    budgets from: predicted/logged KV tokens within 5%."""
    from pathlib import Path

    from autotune.calibration.records import load_record
    from autotune.calibration.replay import parse, replay

    records = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"
    logged = parse(load_record(records / "repo-llama-3.3-70b-instruct-gguf-q4km-w7900-tp1.yaml"))
    assert logged.total_gpu_gib == 44.98
    assert round(get_gpu("w7900-48g").runtime_memory_mib / 1024, 2) == logged.total_gpu_gib
    old = replay(load_record(records / "repo-meta-llama-3-8b-w7900-tp1.yaml"))
    assert old.kv_ratio is not None and abs(old.kv_ratio - 1) < 0.05


def test_public_launch_device_names_resolve() -> None:
    assert match_device("NVIDIA GB10", 124611) == get_gpu("gb10-128g")
    assert match_device("AMD Radeon PRO W7900", 49140) == get_gpu("w7900-48g")
    # nvidia-smi names and totals in public logs (A800 SXM and PCIe both 81920 MiB; both RTX
    # PRO 6000 editions 97887 MiB): the longer matching name wins at equal memory.
    assert match_device("NVIDIA A800-SXM4-80GB", 81920) == get_gpu("a800-80g")
    assert match_device("NVIDIA A800 80GB PCIe", 81920) == get_gpu("a800-pcie-80g")
    server = match_device("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887)
    assert server == get_gpu("rtx-pro-6000-se-96g")
    workstation = match_device("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887)
    assert workstation == get_gpu("rtx-pro-6000-ws-96g")
    # The 300 W Max-Q card has its own peaks and is not in the catalog.
    assert match_device("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887) is None


def test_a800_is_an_a100_with_a_narrower_nvlink() -> None:
    a100, a800, pcie = get_gpu("a100-80g"), get_gpu("a800-80g"), get_gpu("a800-pcie-80g")
    assert (a800.fp16_tflops, a800.sm_count, a800.arch) == (a100.fp16_tflops, 108, "sm_80")
    assert a800.fabric_gbs == 200.0 and a100.fabric_gbs == 300.0  # 400 vs 600 GB/s both ways
    assert pcie.fabric_gbs is None and pcie.bandwidth_gbs < a800.bandwidth_gbs


def test_rtx_pro_6000_editions() -> None:
    ws, se = get_gpu("rtx-pro-6000-ws-96g"), get_gpu("rtx-pro-6000-se-96g")
    # Workstation: 4,000 fp4 TOPS with sparsity -> dense fp4 2,000, fp8 1,000, fp16 500.
    assert (ws.fp4_tflops, ws.fp8_tflops, ws.fp16_tflops) == (2000.0, 1000.0, 500.0)
    # Server: the Workstation's peaks at its fp32 ratio (120 / 125 TFLOP/s).
    assert se.fp16_tflops == ws.fp16_tflops * 120 / 125
    assert (se.bandwidth_gbs, ws.bandwidth_gbs) == (1597, 1792)
    for g in (ws, se):
        assert (g.sm_count, g.arch, g.pcie_gen, g.fabric_gbs) == (188, "sm_120", 5, None)


def test_detection_takes_the_drivers_reserved_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's v2 memory query gives this driver's reserved share (nvidia-smi's 'Reserved'),
    which then sets CUDA's total; an old driver without it keeps the catalog's figure."""
    import types

    from autotune.hardware.detect import detect_gpus

    class NVMLError(Exception):
        pass

    def fake(v2: bool) -> types.SimpleNamespace:
        def info(handle: object, version: object = None) -> types.SimpleNamespace:
            if version is not None and not v2:
                raise NVMLError("v2 not supported")
            return types.SimpleNamespace(total=143771 * 2**20, free=143156 * 2**20,
                                         reserved=600 * 2**20)  # fmt: skip

        return types.SimpleNamespace(
            NVMLError=NVMLError, nvmlMemory_v2=2, nvmlInit=lambda: None,
            nvmlShutdown=lambda: None, nvmlSystemGetDriverVersion=lambda: "580.1",
            nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
            nvmlDeviceGetName=lambda h: "NVIDIA H200", nvmlDeviceGetMemoryInfo=info,
        )  # fmt: skip

    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake(v2=True))
    assert detect_gpus()[0].spec.runtime_memory_mib == 143771 - 600
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake(v2=False))
    assert detect_gpus()[0].spec.runtime_memory_mib == get_gpu("h200-141g").runtime_memory_mib


def test_jetson_agx_orin_is_a_unified_pool_of_what_cuda_reports() -> None:
    """Jetson AGX Orin 64GB: deviceQuery's 62841 MBytes is CUDA's total (no driver share to take
    off, no NVML total); 16 SMs at sm_87; the GPU's 170 sparse INT8 TOPS give fp16 dense 42.5."""
    from pathlib import Path

    from autotune.calibration.records import load_record
    from autotune.calibration.replay import gpu_of

    orin = get_gpu("jetson-agx-orin-64g")
    assert orin.runtime_memory_mib == 62841
    assert (orin.unified_memory, orin.nvml_memory) == (True, False)
    assert (orin.sm_count, orin.arch, orin.fp8_tflops) == (16, "sm_87", None)
    assert orin.fp16_tflops == 170 / 2 / 2
    assert get_gpu("gb10-128g").unified_memory and not get_gpu("h100-80g").unified_memory
    assert match_device("Orin (nvgpu)", 62841) == orin
    records = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "sglang"
    record = load_record(records / "repo-tinyllama-1.1b-chat-jetson-agx-orin-tp1.yaml")
    assert gpu_of(record) == orin


def test_h100_nvl_is_a_94_gb_pcie_card_with_a_bridged_pair() -> None:
    """H100 NVL: nvidia-smi's 'NVIDIA H100 NVL', 95830 MiB; torch's total 93.00 GiB (a public
    OOM); the datasheet's 3.9 TB/s, 835.5 / 1670.5 dense TFLOP/s, PCIe Gen5 and 600 GB/s bridges
    that join two cards only."""
    from autotune.hardware.interconnect import tp_link

    nvl = get_gpu("h100-nvl-94g")
    assert match_device("NVIDIA H100 NVL", 95830) == nvl
    assert match_device("NVIDIA H100 80GB HBM3", 81559) == get_gpu("h100-80g")
    assert round(nvl.runtime_memory_mib / 1024, 2) == 93.00
    assert (nvl.bandwidth_gbs, nvl.fp16_tflops, nvl.fp8_tflops) == (3900, 835.5, 1670.5)
    assert (nvl.sm_count, nvl.arch, nvl.pcie_gen, nvl.fabric_gbs) == (132, "sm_90", 5, 300.0)
    assert tp_link(nvl, 2).kind == "fabric"
    assert tp_link(nvl, 4).kind == "p2p"  # a TP4 ring crosses PCIe between the two pairs


def test_rx_7900_xt_is_not_the_xtx() -> None:
    xt, xtx = get_gpu("rx-7900xt-20g"), get_gpu("rx-7900xtx-24g")
    assert xt.memory_mib == 20 * 1024 and (xt.sm_count, xt.arch, xt.vendor) == (
        84,
        "gfx1100",
        "amd",
    )
    assert match_device("AMD Radeon RX 7900 XT", 20480) == xt
    assert match_device("AMD Radeon RX 7900 XTX", 24560) == xtx


# GeForce cards by architecture: the tensor rate per SM at FP32 accumulate differs only by
# boost clock within one (Ampere ~0.87, Ada ~1.30, RTX Blackwell ~1.23 TFLOP/s an SM). The
# catalog once listed the 4080 SUPER at FP32 accumulate and the other GeForce cards at FP16
# accumulate, twice as fast per SM: a 3090, 4090 or 5090 prefill was priced at twice its rate.
GEFORCE = {
    "sm_86": ["rtx-3080-20g", "rtx-3090-24g"],
    "sm_89": ["rtx-4080-super-32g", "rtx-4090-24g", "rtx-4090-48g"],
    "sm_120": ["rtx-5090-32g"],
}


@pytest.mark.parametrize("arch", sorted(GEFORCE))
def test_geforce_rates_are_fp32_accumulate_alike_per_sm(arch: str) -> None:
    per_sm = {n: get_gpu(n).fp16_tflops / get_gpu(n).sm_count for n in GEFORCE[arch]}
    assert max(per_sm.values()) / min(per_sm.values()) < 1.06, per_sm
    for name in GEFORCE[arch]:
        g = get_gpu(name)
        assert g.arch == arch
        if g.fp8_tflops:
            assert g.fp8_tflops == pytest.approx(2 * g.fp16_tflops, rel=0.01)
    assert get_gpu("rtx-4090-24g").fp16_tflops == 165.2  # Ada whitepaper, FP32 accumulate
    assert get_gpu("rtx-3090-24g").fp16_tflops == 71.0  # Ampere whitepaper, FP32 accumulate
    assert get_gpu("rtx-5090-32g").fp4_tflops == 1676.0  # 3,352 AI TOPS (sparse) halved
