"""The sampler's dummy run in vLLM's profiling run (V1 model runner, 0.10.0 on), derived from
the releases' source (vllm/v1/worker/gpu_model_runner.py profile_run / _dummy_sampler_run,
vllm/v1/sample/sampler.py, vllm/v1/sample/ops/topk_topp_sampler.py and topk_topp_triton.py;
tests/planner/test_vllm_sampler.py reads them from the wheels).

profile_run keeps the forward pass's output `hidden_states` [tokens, hidden] and the last
tokens' `last_hidden_states` [num_reqs, hidden] (num_reqs = min(max_num_seqs, tokens)) while
_dummy_sampler_run draws `torch.rand_like` of the latter, computes the logits (the LM head's
shards all-gathered: every rank holds [num_reqs, vocab padded to 64] in the model dtype, so TP
does not shrink them) and samples with top_k = vocab - 1 and top_p = 0.9, neither all greedy
nor all random (all releases 0.10.0 .. 0.32.0). Sampler.forward then holds a float32 copy
(`logits.to(torch.float32)`) that temperature divides in place, and the top-k/top-p step:

- 0.10.0 .. 0.16.x: apply_top_k_top_p sorts: logits_sort (fp32), logits_idx (int64), the top-k
  and top-p bool masks, probs_sort (fp32, cumsum in place) and the scatter's new fp32 tensor
  live together: 4 + 4 + 8 + 1 + 1 + 4 + 4 = 26 bytes per element. The sort's own workspace is
  not counted. After it, softmax probs and the exponential noise q (fp32 each) beside the two
  logits tensors: 16, less.
- 0.17.0 on: with Triton and num_reqs >= 8 (any num_reqs from 0.30.0) the Triton kernel masks the
  float32 logits in place, keeping a cached fp32 buffer of min(next_pow2(min(SMs, num_reqs)),
  SMs) vocabulary rows; then softmax probs and q: 4 + 4 + 4 = 12 bytes per element. Below 8
  rows (0.17 .. 0.29) the sort path with an in-place scatter: 4 + 4 + 8 + 1 + 1 + 4 = 22.

FlashInfer's sampler (forward_cuda: top_k_top_p_sampling_from_logits, "top_k_first" in
flashinfer-ai/flashinfer python/flashinfer/sampling.py: top_k_mask_logits returns a new fp32
tensor, then softmax a new one) holds 4 + 4 + 4 = 12 bytes per element and no buffer. 0.10.x
and 0.11.x take it by default whenever FlashInfer imports (VLLM_USE_FLASHINFER_SAMPLER unset
means on there; the release Docker image ships FlashInfer, the 0.10 pip wheel only as an
extra): assumed installed. From 0.12.0 it is opt-in (VLLM_USE_FLASHINFER_SAMPLER=1).

The Model Runner V2 (a default for some architectures from 0.22.0, the only runner from 0.34.0)
is derived for 0.34.0 only (V2_SAMPLER_SINCE; before, the V1 rule stands in where V2 runs): its
profile_run (v1/worker/gpu/model_runner.py) keeps the forward's output and computes the logits
straight from the last tokens' hidden states (no rand_like copy); _dummy_sampler_run samples
twice, the second time with SamplingParams.for_sampler_warmup, through v1/worker/gpu/sample/
sampler.py: apply_sampling_params copies the logits to a new fp32 tensor, the logits processors
(logit bias, penalties, bad words), temperature and min_p write into it in place (Triton
kernels), the same Triton top-k/top-p kernel masks it in place beside its cached buffer rows,
gumbel_sample keeps two [rows, vocab / 1024] buffers and the logprobs a top-k gather: 4 bytes per
element and the buffer.
"""

from __future__ import annotations

from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner.vllm_history import at_least

# Model Runner V2, the only runner from 0.34.0 (vllm_draft.V2_ONLY_SINCE), builds its Sampler in
# load_model after "Model loading took" is measured (v1/worker/gpu/model_runner.py), on the last
# pipeline stage; the Sampler's PenaltiesState (v1/worker/gpu/sample/penalties.py) allocates,
# whatever the requests ask, output_bin_counts int32 [max_num_reqs, vocab] and prompt_bin_mask
# int32 [max_num_reqs, cdiv(vocab, 32)]: device memory held beside the weights, in the
# memory the KV cache is sized from (total_consumed since the first snapshot), not in the log's
# weights.
V2_PENALTY_STATE_SINCE = "0.34.0"
V2_SAMPLER_SINCE = "0.34.0"
V2_BYTES_PER_LOGIT = 4  # the warm-up pass's fp32 copy, processed in place
SORT_BYTES_PER_LOGIT = 26  # 0.10 .. 0.16: fp32 logits, sort values/indices, masks, probs, scatter
SORT_INPLACE_BYTES_PER_LOGIT = 22  # 0.17 .. 0.29 below TRITON_MIN_ROWS: scatter_ in place
TRITON_BYTES_PER_LOGIT = 12  # 0.17 on: fp32 logits, probs, exponential noise
FLASHINFER_BYTES_PER_LOGIT = 12  # fp32 logits, masked logits, probs
TRITON_MIN_ROWS = 8  # apply_top_k_top_p: `HAS_TRITON and logits.shape[0] >= 8` (0.17 .. 0.29)
VOCAB_PADDING = 64  # vocab_parallel_embedding.DEFAULT_VOCAB_PADDING_SIZE


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def triton_buffer_rows(num_reqs: int, sm_count: int) -> int:
    """Rows of the Triton top-k/top-p kernel's cached fp32 buffer (apply_top_k_top_p_triton)."""
    programs = min(sm_count, num_reqs)
    return min(_next_pow2(programs), sm_count)


def flashinfer_sampler(version: str, use_flashinfer: bool | None) -> bool:
    """Whether the release samples with FlashInfer: by default before 0.12.0 (FlashInfer
    assumed installed), opt-in from 0.12.0 (VLLM_USE_FLASHINFER_SAMPLER, `use_flashinfer`)."""
    if use_flashinfer is not None:
        return use_flashinfer
    return not at_least(version, "0.12.0")


def sampler_bytes(
    vocab: int, version: str, num_reqs: int, sm_count: int, use_flashinfer: bool | None = None
) -> int:
    """Bytes the sampler itself holds at its peak over `num_reqs` rows of `vocab` (module
    docstring), without the caller's logits."""
    if flashinfer_sampler(version, use_flashinfer):
        return num_reqs * vocab * FLASHINFER_BYTES_PER_LOGIT
    if at_least(version, V2_SAMPLER_SINCE):
        rows = num_reqs * V2_BYTES_PER_LOGIT + triton_buffer_rows(num_reqs, sm_count) * 4
        return rows * vocab
    if at_least(version, "0.17.0") and (
        num_reqs >= TRITON_MIN_ROWS or at_least(version, "0.30.0")
    ):
        rows = num_reqs * TRITON_BYTES_PER_LOGIT + triton_buffer_rows(num_reqs, sm_count) * 4
        return rows * vocab
    per = SORT_INPLACE_BYTES_PER_LOGIT if at_least(version, "0.17.0") else SORT_BYTES_PER_LOGIT
    return num_reqs * vocab * per


def v2_penalty_state_bytes(vocab: int, max_num_seqs: int, version: str) -> int:
    """The V2 Sampler's persistent penalty state (V2_PENALTY_STATE_SINCE), in bytes."""
    if not at_least(version, V2_PENALTY_STATE_SINCE):
        return 0
    return max_num_seqs * (vocab + -(-vocab // 32)) * 4


def sampler_phase_bytes(
    card: ModelCard,
    version: str,
    tokens: int,
    num_reqs: int,
    sm_count: int,
    use_flashinfer: bool | None = None,
) -> int:
    """Peak of profile_run's sampler phase: the forward's output and the last tokens' hidden
    states (twice before V2_SAMPLER_SINCE: V1's rand_like copy), the gathered logits in the
    model dtype, and the sampler's own tensors."""
    b = DTYPE_BYTES.get(card.dtype, 2.0)
    padded = -(-card.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    copies = 1 if at_least(version, V2_SAMPLER_SINCE) else 2
    hidden = (tokens + copies * num_reqs) * card.hidden_size * b
    logits = num_reqs * padded * b
    sampler = sampler_bytes(card.vocab_size, version, num_reqs, sm_count, use_flashinfer)
    return int(hidden + logits + sampler)
