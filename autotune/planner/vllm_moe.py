"""fused_moe's share of vLLM's profiling run (V0 0.4 .. 0.9, early V1 0.6.5 .. 0.9.0, and the
current model to 0.13.x where fused_experts runs; from 0.14.0 the kept WorkspaceManager buffer,
below): the expert MLP's workspace over the dummy batch, by release, read from
model_executor/layers/fused_moe/fused_moe.py (fused_experts / fused_experts_impl) and layer.py
of each wheel. w1 is [E, N, K] with N = 2 x the expert width per rank, K = hidden_size; topk =
experts per token; M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE):

- intermediate_cache1 [M, topk, N], intermediate_cache2 [M x topk, N / 2] and
  intermediate_cache3 [M, topk, K], three allocations (0.4.1 .. 0.7.3); from 0.8.0 cache1 and
  cache3 share one buffer of M x topk x max(N, K) ("by the time we need cache3, we're done
  with cache1"), cache2 apart.
- M: every token in 0.5.0 and before (no chunking); chunks of 65,536 in 0.5.1 .. 0.5.5, 32,768
  from 0.6.0, 16,384 from 0.12.0 (envs.py's VLLM_FUSED_MOE_CHUNK_SIZE default).
- fp8 (w8a8) experts quantize each GEMM's input: cache2's fp8 copy [M x topk, N / 2] is alive
  while the second GEMM writes cache3 (invoke_fused_moe_kernel's scaled_fp8_quant /
  per_token_group_quant_fp8 up to 0.8.0); from 0.8.4 moe_kernel_prepare_input returns both
  copies into locals of the chunk loop, so the hidden states' [M, K] copy is alive then too
  (0.8.1 .. 0.8.3 not read: taken as 0.8.4). The per-group scales (1/128 of the copies' size,
  fp32) are left out.
- Expert parallelism (--enable-expert-parallel, layer.py FusedMoE.__init__ in 0.8.4: use_ep
  sets the layer's tp_size to 1) keeps each local expert whole, so N is 2 x
  moe_intermediate_size, not divided by TP, and every rank still runs all the batch's tokens.
"""

from __future__ import annotations

from typing import Any

from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner.vllm_history import at_least

# 0.5.0's fused_moe allocates the caches for every token; 0.5.1's envs.py and fused_moe.py
# already chunk (read in the 0.5.1, 0.5.2 and 0.5.3.post1 wheels).
CHUNKED_SINCE = "0.5.1"
CHUNK_32K_SINCE = "0.6.0"  # VLLM_FUSED_MOE_CHUNK_SIZE "65536" in 0.5.1 .. 0.5.5, "32768" after
CHUNK_16K_SINCE = "0.12.0"  # envs.py: str(16 * 1024) from 0.12.0 (0.11.0 still "32768")
SHARED_CACHE13_SINCE = "0.8.0"
HELD_INPUT_COPY_SINCE = "0.8.4"
# Checkpoints whose experts run fp8 x fp8 (Fp8MoEMethod.apply: fused_experts(use_fp8_w8a8=True)).
FP8_SCHEMES = frozenset({"fp8", "fp8_block"})


def moe_chunk(tokens: int, version: str) -> int:
    """The rows fused_moe's caches are allocated for (M), by release."""
    if not at_least(version, CHUNKED_SINCE):
        return tokens
    if at_least(version, CHUNK_16K_SINCE):
        return min(tokens, 16384)
    return min(tokens, 32768 if at_least(version, CHUNK_32K_SINCE) else 65536)


def expert_parallel(cfg: dict[str, Any], tp: int) -> bool:
    """Whether the experts run under expert parallelism (layer.py: the flag and TP x DP > 1)."""
    dp = int(cfg.get("data_parallel_size") or 1)
    return bool(cfg.get("enable_expert_parallel")) and tp * dp > 1


def fused_moe_workspace_bytes(
    card: ModelCard, tp: int, tokens: int, version: str, ep: bool = False
) -> int:
    """fused_experts' caches (and fp8 input copies) over a batch of `tokens` (module docstring);
    0 for a model without experts."""
    e = card.experts
    if e is None:
        return 0
    b = DTYPE_BYTES.get(card.dtype, 2.0)
    m, k, topk = moe_chunk(tokens, version), card.hidden_size, e.experts_per_token
    n = 2 * e.moe_intermediate_size // (1 if ep else tp)
    if at_least(version, SHARED_CACHE13_SINCE):
        caches = topk * (max(n, k) + n // 2) * b
    else:
        caches = topk * (n + n // 2 + k) * b
    copies = 0.0
    if card.quantization.scheme in FP8_SCHEMES:
        copies = topk * (n // 2) + (k if at_least(version, HELD_INPUT_COPY_SINCE) else 0)
    return int(m * (caches + copies))


def moe_phase_bytes(card: ModelCard, tp: int, tokens: int, version: str, ep: bool = False) -> int:
    """The expert MLP's peak in the profiling run: the layer's input, the residual and the MLP's
    input over every token (a shared expert's output beside them) and fused_moe's workspace."""
    e = card.experts
    if e is None:
        return 0
    b = DTYPE_BYTES.get(card.dtype, 2.0)
    h = card.hidden_size
    shared = h if e.shared_intermediate_size else 0
    live = int(tokens * (3 * h + shared) * b)
    return live + fused_moe_workspace_bytes(card, tp, tokens, version, ep)


# The current model, 0.9.1 .. 0.13.x: fused_experts_impl (fused_moe.py) is the code read for
# 0.8.4 above (cache13 shared by cache1 and cache3, cache2 apart, the fp8 copies of the chunk's
# hidden states and of cache2 held in the chunk loop's locals; the chunk 32,768 to 0.11.x, 16,384
# from 0.12.0), allocated by torch.empty on each call and freed when it returns: the profiling
# run's torch peak (allocated_bytes.all.peak) still holds them, in the forward's phase. Which
# path a MoE takes (read in the 0.9.2, 0.10.0, 0.10.1.1, 0.10.2, 0.11.0, 0.12.0, 0.13.0 wheels):
# unquantized, UnquantizedFusedMoEMethod.forward_cuda calls fused_experts unless
# VLLM_USE_FLASHINFER_MOE_FP16 (0.11.0+) or ROCm's AITER is set, both off by default, or an
# all-to-all DP + EP kernel is set up. fp8 (quantization/fp8.py Fp8MoEMethod): Marlin below sm_89
# (weight-only, not this workspace); FlashInfer with VLLM_USE_FLASHINFER_MOE_FP8 (off by
# default); block-quantized weights take CUTLASS's block-scaled grouped GEMM from
# has_device_capability(100) (0.9.x; sm_100 alone from 0.10.0, its family from 0.12.0) and DeepGEMM
# on sm_90 / sm_100 when VLLM_USE_DEEP_GEMM is on ("0" to
# 0.10.x, "1" from 0.11.0; from 0.12.0 get_fp8_moe_backend also turns it off at TP >= 8 unless
# VLLM_MOE_USE_DEEP_GEMM is set) and the deep_gemm package imports, which depends on how vLLM was
# installed: not counted then. Everything else runs fused_experts (Triton).
DEEP_GEMM_DEFAULT_SINCE = "0.11.0"
DEEP_GEMM_TP8_OFF_SINCE = "0.12.0"


def _cap(arch: str) -> int:
    return int(arch[3:]) if arch.startswith("sm_") and arch[3:].isdigit() else 0


def fused_experts_runs(
    card: ModelCard, cfg: dict[str, Any], tp: int, version: str, arch: str
) -> bool:
    """Whether vLLM 0.9.1 .. 0.13.x runs this MoE's experts through fused_experts_impl, whose
    caches are allocated per call (the comment above); False for later releases."""
    if card.experts is None or at_least(version, WORKSPACE_MANAGER_SINCE):
        return False
    if int(cfg.get("data_parallel_size") or 1) > 1 and cfg.get("enable_expert_parallel"):
        return False  # all-to-all across DP ranks: batched formats, not modelled
    if cfg.get("vllm_rocm_use_aiter"):
        return False
    scheme = card.quantization.scheme
    if scheme == "none":
        return not cfg.get("vllm_use_flashinfer_moe_fp16")
    if scheme not in FP8_SCHEMES or card.quantization.checkpoint_format == "compressed-tensors":
        return False  # other methods' kernels (compressed-tensors fp8 may take CUTLASS)
    if cfg.get("vllm_use_flashinfer_moe_fp8"):
        return False
    if not arch.startswith("sm_"):
        return True  # ROCm: Triton without AITER
    cap = _cap(arch)
    if cap < 89:
        return False
    if scheme == "fp8_block" and cap >= 100 and (cap < 110 or not at_least(version, "0.10.0")):
        return False  # CUTLASS: has_device_capability(100) in 0.9.x, sm_100 (family) from 0.10.0
    if scheme == "fp8_block" and 90 <= cap < 110:
        deep_gemm = cfg.get("vllm_use_deep_gemm")
        if deep_gemm is None:
            deep_gemm = at_least(version, DEEP_GEMM_DEFAULT_SINCE)
        moe_deep_gemm = cfg.get("vllm_moe_use_deep_gemm")
        if moe_deep_gemm is None:
            moe_deep_gemm = not (at_least(version, DEEP_GEMM_TP8_OFF_SINCE) and tp >= 8)
        if deep_gemm and moe_deep_gemm:
            return False
    return True


def transient_moe_phase_bytes(
    card: ModelCard, cfg: dict[str, Any], tp: int, tokens: int, version: str, arch: str
) -> int:
    """The expert MLP's phase of the profiling run's forward on 0.9.1 .. 0.13.x where
    fused_experts runs (moe_phase_bytes over `tokens`), else 0."""
    if not fused_experts_runs(card, cfg, tp, version, arch):
        return 0
    return moe_phase_bytes(card, tp, tokens, version, expert_parallel(cfg, tp))


# The current model (0.9.1+). From 0.14.0 the unquantized method's forward_cuda runs the modular
# kernel (self.kernel; 0.13.0 still calls fused_experts, whose caches are freed), which takes its
# buffers from the worker's WorkspaceManager (fused_moe/modular_kernel.py _allocate_buffers ->
# v1/worker/workspace.py get_simultaneous): one uint8 buffer, grown to the largest request and
# kept, so the profiling run's torch peak holds it beside whatever comes after the expert layers
# (the sampler's phase). 0.14.0 .. 0.17.x chunk M at VLLM_FUSED_MOE_CHUNK_SIZE (16,384; Triton
# supports chunking, VLLM_ENABLE_FUSED_MOE_ACTIVATION_CHUNKING defaults on): one chunk shares
# workspace13 with the output as later, more asks for the two chunk-sized views and the [M, K]
# output apart. From 0.18.0 M is every token (the variable is gone from envs.py). Read in the
# 0.13.0, 0.14.0, 0.14.1, 0.17.1, 0.18.0, 0.19.1, 0.20.0, 0.22.0, 0.24.0, 0.27.1, 0.32.0 and
# 0.33.0 wheels.
WORKSPACE_MANAGER_SINCE = "0.14.0"
UNCHUNKED_WORKSPACE_SINCE = "0.18.0"
WORKSPACE_CHUNK = 16 * 1024  # envs.py VLLM_FUSED_MOE_CHUNK_SIZE, 0.14.0 .. 0.17.x
# Which experts kernel an unquantized MoE runs (fused_moe/oracle/unquantized.py): Triton on CUDA
# and ROCm through 0.19.x unless VLLM_USE_FLASHINFER_MOE_FP16 (or VLLM_ROCM_USE_AITER) is set,
# both off by default; from 0.20.0 _get_priority_backends puts FlashInfer's TRT-LLM (sm_100
# family) and CUTLASS (sm_90, 100, 120 families; unquantized from has_device_capability(90))
# kernels first on CUDA, so Triton runs below sm_90 and on ROCm (VLLM_ROCM_USE_AITER off by
# default), and from 0.24.0 on Hopper too, where FlashInfer goes behind Triton. FlashInfer's
# kernels keep their workspace inside FlashInfer, not sized by vLLM's code: not counted.
FLASHINFER_FIRST_SINCE = "0.20.0"
TRITON_ON_HOPPER_SINCE = "0.24.0"
WORKSPACE_ALIGN = 256  # get_simultaneous rounds each view up to 256 bytes


def triton_experts(card: ModelCard, cfg: dict[str, Any], version: str, arch: str) -> bool:
    """Whether vLLM `version` runs this MoE's experts with TritonExperts through the
    WorkspaceManager (the unquantized oracle above; quantized packs pick other kernels)."""
    if card.experts is None or card.quantization.scheme != "none":
        return False
    if not at_least(version, WORKSPACE_MANAGER_SINCE):
        return False
    if cfg.get("vllm_use_flashinfer_moe_fp16") or cfg.get("vllm_rocm_use_aiter"):
        return False
    if int(cfg.get("data_parallel_size") or 1) > 1 and cfg.get("enable_expert_parallel"):
        return False  # all-to-all across DP ranks: batched formats, not modelled
    if not at_least(version, FLASHINFER_FIRST_SINCE) or not arch.startswith("sm_"):
        return True
    major = _cap(arch) // 10
    return major < 9 or (major == 9 and at_least(version, TRITON_ON_HOPPER_SINCE))


def held_moe_workspace_bytes(
    card: ModelCard, cfg: dict[str, Any], tp: int, tokens: int, version: str, arch: str
) -> int:
    """The WorkspaceManager buffer TritonExperts leaves after the profiling run's forward over
    `tokens` (0 where another kernel runs, triton_experts). TritonExperts.workspace_shapes
    (fused_moe.py to 0.20, experts/triton_moe.py after): workspace1 [M, topk, max(N / 2, K)]
    (the SiLU-and-mul output, N / 2 for a gated activation) and workspace2 [M, topk, max(N, K)];
    in one chunk the output [M, K] reuses workspace1's buffer, so the request is the two, each
    rounded to 256 bytes, in the activation dtype; over several chunks (before 0.18.0) the two
    are chunk-sized and the output asks apart. N = 2 x the expert width per rank (whole under
    expert parallelism), K = the width the experts work at."""
    e = card.experts
    if e is None or not triton_experts(card, cfg, version, arch):
        return 0
    b = DTYPE_BYTES.get(card.dtype, 2.0)
    n = 2 * e.moe_intermediate_size // (1 if expert_parallel(cfg, tp) else tp)
    k = e.latent_size or card.hidden_size
    chunked = not at_least(version, UNCHUNKED_WORKSPACE_SINCE) and tokens > WORKSPACE_CHUNK
    rows = (WORKSPACE_CHUNK if chunked else tokens) * e.experts_per_token

    def aligned(elems: int) -> int:
        size = int(elems * b)
        return -(-size // WORKSPACE_ALIGN) * WORKSPACE_ALIGN

    output = aligned(tokens * k) if chunked else 0
    return aligned(rows * max(n // 2, k)) + aligned(rows * max(n, k)) + output
