"""Attention kernels in the roofline: which backend a launch runs, and how fast it reads the KV
cache in decode and computes attention in prefill, relative to the backend the roofline's
constants were calibrated with (FIELD-NOTES C2/C4: SGLang 0.5.17 on an RTX 4080 SUPER, sm_89,
a hybrid model, the default backend there).

Every factor below is MODELLED (an assumption about the kernels' relative speed, sized so that
the backend choice moves end-to-end throughput by about the 12 % SGLang's auto-tune roadmap
reports for the attention backend on a Qwen3.5 model, sglang#13363) except RDNA's Triton
kernel, FITTED on FIELD-NOTES C5 (benchmarks/fit_c5.py). `benchmarks/calibration.py` keeps the
calibrated backend at exactly 1.0, so the calibrated figures do not move. Which backend a release picks by default, and which ones
exist on an architecture, are engine facts (the search spaces' rules and the adapter's flag
catalogs); this module only prices them.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.hardware.gpus import GPUSpec


@dataclass(frozen=True)
class Kernel:
    """A backend's speed relative to the calibrated one (1.0): `decode` scales the KV-read
    bandwidth of decode attention, `prefill` the FLOP rate of prefill attention; `split_kv`
    marks SGLang's Triton split-KV decode, whose programs (sequence x head tile x KV split, the
    split chosen per step up to --triton-attention-num-kv-splits: planner/triton_splits.py)
    bound the bandwidth it draws, and whose split partials a second kernel reduces."""

    decode: float = 1.0
    prefill: float = 1.0
    split_kv: bool = False


# SGLang backend names; vLLM's map onto them (VLLM_NAMES). By architecture family.
_NVIDIA_COMMON = {
    "flashinfer": Kernel(),
    "triton": Kernel(decode=0.86, prefill=0.80, split_kv=True),
    "torch_native": Kernel(decode=0.35, prefill=0.30),
    "flex_attention": Kernel(decode=0.55, prefill=0.60),
}
KERNELS: dict[str, dict[str, Kernel]] = {
    "turing": {**_NVIDIA_COMMON, "flashinfer": Kernel(decode=0.95, prefill=0.90)},
    "ampere": {**_NVIDIA_COMMON, "fa3": Kernel(decode=0.97, prefill=1.04)},
    "ada": {**_NVIDIA_COMMON, "fa3": Kernel(decode=0.97, prefill=1.04)},
    "hopper": {
        **_NVIDIA_COMMON,
        "fa3": Kernel(decode=1.05, prefill=1.30),
        "trtllm_mha": Kernel(decode=1.12, prefill=1.0),  # XQA decode; SGLang 0.5.19+ on sm_90
    },
    "blackwell": {
        **_NVIDIA_COMMON,
        "trtllm_mha": Kernel(decode=1.10, prefill=1.25),
        "fa4": Kernel(decode=1.0, prefill=1.35),
    },
    "blackwell_consumer": {**_NVIDIA_COMMON, "fa3": Kernel(decode=0.97, prefill=1.04)},
    # FITTED on FIELD-NOTES C5's 131K decode and 130K prefill (benchmarks/fit_c5.py): ROCm's
    # Triton attention on RDNA 3 against the calibrated CUDA backend; the rest is modelled.
    # C5's MTP verify is priced as split-KV decode, which takes the cap of 16 at every C5
    # depth: linear in depth. The public 0.5.18 verify path off gfx95 (the serial-prefix
    # extend kernel) would cost more than C5 measured (tests/planner/test_triton_splits.py),
    # so the ROCm fork C5 ran verifies another way.
    "rdna": {"triton": Kernel(decode=0.715, prefill=0.218, split_kv=True)},
    "cdna": {
        "triton": Kernel(decode=0.86, prefill=0.80, split_kv=True),
        "aiter": Kernel(decode=1.05, prefill=1.20),
    },
}
# vLLM backend names -> the kernel family priced above (FLASH_ATTN is FA3 on Hopper, FA4 on
# sm_100 from 0.17.0, FA2 elsewhere: priced like fa3 off Hopper, a little under FlashInfer).
VLLM_NAMES = {
    "FLASH_ATTN": "fa3",
    "FLASHINFER": "flashinfer",
    "TRITON_ATTN": "triton",
    "FLEX_ATTENTION": "flex_attention",
    "ROCM_ATTN": "triton",
    "ROCM_AITER_FA": "aiter",
    "ROCM_AITER_UNIFIED_ATTN": "aiter",
}
# Launch and reduction cost of one KV split per full-attention layer and decode step (Triton's
# split-KV decode writes partial results that a second kernel reduces).
SPLIT_COST_S = 0.3e-6
DEFAULT_KV_SPLITS = 8  # SGLang's --triton-attention-num-kv-splits default
ROCM_KV_SPLITS = 16  # what SGLang sets on HIP whatever is given (server_args, platform hook)


def family(gpu: GPUSpec) -> str:
    """The architecture family KERNELS is keyed by."""
    arch = gpu.arch
    if gpu.vendor == "amd":
        return "rdna" if arch.startswith("gfx1") else "cdna"
    try:
        sm = int(arch.removeprefix("sm_").rstrip("af"))
    except ValueError:
        return "ada"
    if sm >= 120:
        return "blackwell_consumer"
    if sm >= 100:
        return "blackwell"
    if sm >= 90:
        return "hopper"
    if sm == 89:
        return "ada"
    if sm >= 80:
        return "ampere"
    return "turing"


def default_backend(gpu: GPUSpec) -> str:
    """The backend priced when a launch names none: what SGLang picks for a non-MLA model
    (FlashAttention 3 on Hopper, TRT-LLM MHA on sm_100, FlashInfer on other NVIDIA GPUs,
    aiter on Instinct, Triton on Radeon)."""
    fam = family(gpu)
    return {
        "hopper": "fa3",
        "blackwell": "trtllm_mha",
        "rdna": "triton",
        "cdna": "aiter",
    }.get(fam, "flashinfer")


def kernel(gpu: GPUSpec, backend: str | None) -> tuple[str, Kernel]:
    """(backend name, its prices) on `gpu`; an unknown or absent backend is priced as the
    default one (the engine would refuse it; the space's rules keep it out of a search)."""
    name = VLLM_NAMES.get(backend or "", backend or "")
    table = KERNELS[family(gpu)]
    if name not in table:
        name = default_backend(gpu)
    return name, table.get(name, Kernel())


def split_occupancy(gpu: GPUSpec, ctas: int) -> float:
    """Share of the memory bandwidth a split-KV decode kernel can draw from its working
    programs (one per sequence, head tile and split): about one per SM saturates the bus."""
    return min(1.0, max(ctas, 1) / max(gpu.sm_count, 1))
