"""fused_moe's share of vLLM's profiling run before the current model (V0 0.4 .. 0.9, early V1
0.6.5 .. 0.9.0): the expert MLP's workspace over the dummy batch, by release, read from
model_executor/layers/fused_moe/fused_moe.py (fused_experts / fused_experts_impl) and layer.py
of each wheel. w1 is [E, N, K] with N = 2 x the expert width per rank, K = hidden_size; topk =
experts per token; M = min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE):

- intermediate_cache1 [M, topk, N], intermediate_cache2 [M x topk, N / 2] and
  intermediate_cache3 [M, topk, K], three allocations (0.4.1 .. 0.7.3); from 0.8.0 cache1 and
  cache3 share one buffer of M x topk x max(N, K) ("by the time we need cache3, we're done
  with cache1"), cache2 apart.
- M: every token up to 0.5.0 (no chunking); chunks of 65,536 in 0.5.4 and 0.5.5, 32,768 from
  0.6.0 (envs.py's VLLM_FUSED_MOE_CHUNK_SIZE default).
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

CHUNKED_SINCE = "0.5.4"  # 0.5.0's fused_moe allocates the caches for every token
CHUNK_32K_SINCE = "0.6.0"  # VLLM_FUSED_MOE_CHUNK_SIZE "65536" in 0.5.4 / 0.5.5, "32768" after
SHARED_CACHE13_SINCE = "0.8.0"
HELD_INPUT_COPY_SINCE = "0.8.4"
# Checkpoints whose experts run fp8 x fp8 (Fp8MoEMethod.apply: fused_experts(use_fp8_w8a8=True)).
FP8_SCHEMES = frozenset({"fp8", "fp8_block"})


def moe_chunk(tokens: int, version: str) -> int:
    """The rows fused_moe's caches are allocated for (M), by release."""
    if not at_least(version, CHUNKED_SINCE):
        return tokens
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
