"""What vLLM's MXFP4 MoE layer (gpt-oss) allocates beyond the checkpoint: each expert's
intermediate size per partition and hidden size are padded to the multiple its kernel needs.

From the releases' own code: quantization/mxfp4.py `Mxfp4MoEMethod.create_weights` (0.10.1 ..
0.1x) and fused_moe/oracle/mxfp4.py `mxfp4_round_up_hidden_size_and_intermediate_size` with the
backend `select_mxfp4_moe_backend` picks (0.19+):
- Marlin, CUDA below sm_90 ("n % 256 == 0 and k % 128 == 0"): intermediate to 128, hidden to 256;
- Triton (triton_kernels, sm_90 up to sm_100 exclusive in 0.1x; 9.0 <= cc < 11.0 from 0.19, where
  sm_100 takes FlashInfer TRT-LLM first): intermediate to 64;
- FlashInfer on sm_100 (the Blackwell default): both to 256;
- ROCm: intermediate to 128 (0.10 .. 0.1x), both to 256 (0.19+).
Consumer Blackwell (sm_12x) falls through to a backend these rules do not settle: no padding
is assumed there.
"""

from __future__ import annotations

from autotune.hardware.gpus import GPUSpec
from autotune.models.card import ModelCard
from autotune.planner.vllm_history import at_least, compute_capability

MXFP4_BYTES_PER_PARAM = 0.5 + 1 / 32  # e2m1 pairs plus one e8m0 scale per 32
BIAS_BYTES = 2  # gpt-oss expert biases stay bf16


def _up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def mxfp4_multiples(gpu: GPUSpec, version: str) -> tuple[int, int] | None:
    """(hidden, intermediate) multiples the release pads to on this GPU; None: not settled."""
    if gpu.vendor == "amd":
        return (256, 256) if at_least(version, "0.19.0") else (1, 128)
    cc = compute_capability(gpu)
    if cc is None:
        return None
    if cc < (9, 0):
        return 256, 128  # Marlin
    if cc < (10, 0):
        return 1, 64  # Triton
    if cc[0] == 10:
        return 256, 256  # FlashInfer
    return None


def mxfp4_padding_bytes(card: ModelCard, gpu: GPUSpec, version: str, tp: int) -> int:
    """Bytes one rank allocates beyond the checkpoint's MXFP4 experts (0 for other packs)."""
    ex = card.experts
    mult = mxfp4_multiples(gpu, version)
    if card.quantization.scheme != "mxfp4" or ex is None or mult is None:
        return 0
    hidden, inter = card.hidden_size, ex.moe_intermediate_size // tp
    h_pad, i_pad = _up(hidden, mult[0]), _up(inter, mult[1])
    weights = 3 * (i_pad * h_pad - inter * hidden) * MXFP4_BYTES_PER_PARAM
    biases = (2 * (i_pad - inter) + (h_pad - hidden)) * BIAS_BYTES
    return int(ex.num_experts * ex.moe_layers * (weights + biases))
