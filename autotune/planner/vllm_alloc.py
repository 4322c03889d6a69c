"""What PyTorch allocates that vLLM's figures count beyond the tensors a model asks for: the
caching allocator's block rounding in "Model loading took", and cuBLAS's workspace in the
profiling run's torch peak.

Block rounding: vLLM reads the weights' memory as allocated bytes (V1 gpu_model_runner
.load_model's DeviceMemoryProfiler: platforms/cuda.py get_current_memory_usage =
max_memory_allocated after reset_peak_memory_stats), and the allocator counts a whole block,
not the bytes asked for, where it does not split the block.

The allocator's rule (c10/cuda/CUDACachingAllocator.cpp, kMinLargeAlloc = 10 MiB,
kRoundLarge = 2 MiB, kSmallSize = 1 MiB): a request of 10 MiB or more gets a fresh segment
rounded up to 2 MiB; the block is split only when more than 1 MiB would remain, so a request
within 1 MiB below a 2 MiB multiple is charged the whole segment. Checked on an H200 with torch
2.11.0+cu130: a 231 MiB bf16 tensor counts 232 MiB, 115.5 MiB counts 116, 11.25 MiB counts 12,
462 MiB and 10.5 MiB count their size; Qwen2.5-72B's per-rank tensors, 20 layers, count 20 MiB
more at TP 2 (down_proj 231 MiB) and 30 MiB more at TP 4 (gate_up 231, down 115.5 MiB).

From 0.21.0 the worker loads the weights under max_split_size_mb=20 (gpu_worker.load_model's
_scoped_allocator_max_split: CUDA only through 0.30.0, CUDA and ROCm from 0.31.0; 0.20.2 and
earlier do not). A block of max_split_size or more is never split (the allocator's
should_split: `size < max_split_size() && remaining > kSmallSize` outside expandable segments),
so a tensor of 20 MiB or more is charged its whole 2 MiB-rounded segment. This rule is read from
the allocator's source, not measured here.

Modelled for plain dense decoders in the model's own dtype (vLLM's Merged/QKV column-parallel
and row-parallel layers: one tensor each for qkv, o, gate_up and down per layer, the vocab-
parallel embedding and LM head); other layouts (experts, quantized packs, linear and latent
attention) add 0 here. Requests below 10 MiB come from shared 20 MiB segments and are taken
as exact.

cuBLAS workspace: the first cuBLAS GEMM on a stream makes torch allocate that (handle, stream)'s
workspace through the caching allocator, so it counts as allocated bytes. In vLLM's V1 worker
the first GEMM on the main stream is the profiling run's forward (loading does none): the
workspace adds to the "torch peak memory increase". Measured on an H200 (sm_90, torch
2.11.0+cu130, CUBLAS_WORKSPACE_CONFIG unset): the first F.linear allocates 32 MiB beyond its
output, a second GEMM nothing, the first on another stream 32 MiB more. The logged peak of the
public 0.19.0 H100 launches is 28 .. 37 MiB above the planner's phases without it (Llama 3.1 8B,
Qwen2.5 7B and 72B, Llama 3.3 70B FP8). Other architectures' default size is not measured here
(0 is added for them).
"""

from __future__ import annotations

from autotune.hardware.gpus import GPUSpec
from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner.common import MIB
from autotune.planner.vllm_history import at_least

MIN_LARGE_ALLOC = 10 * MIB
ROUND_LARGE = 2 * MIB
SMALL_SIZE = 1 * MIB
# vLLM's VocabParallelEmbedding / ParallelLMHead pad the vocabulary to a multiple of 64
# (layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE).
VOCAB_PADDING = 64
LOAD_MAX_SPLIT = 20 * MIB  # gpu_worker.load_model's max_split_size_mb (0.21.0 on)
# The first release that loads under LOAD_MAX_SPLIT, by GPU vendor (is_cuda(), is_cuda_alike()).
LOAD_MAX_SPLIT_SINCE = {"nvidia": "0.21.0", "amd": "0.31.0"}


def block_padding(nbytes: int, max_split: int | None = None) -> int:
    """Bytes the allocator charges beyond a fresh request of `nbytes` (`max_split`: the
    allocator's max_split_size, None for torch's default of no limit)."""
    if nbytes < MIN_LARGE_ALLOC:
        return 0
    rest = -nbytes % ROUND_LARGE
    if max_split is not None and nbytes >= max_split:
        return rest
    return rest if rest <= SMALL_SIZE else 0


def load_max_split(version: str, vendor: str) -> int | None:
    """The max_split_size the release loads weights under (None: torch's default)."""
    first = LOAD_MAX_SPLIT_SINCE.get(vendor)
    return LOAD_MAX_SPLIT if first is not None and at_least(version, first) else None


def _plain_dense(card: ModelCard) -> bool:
    return (
        card.quantization.scheme == "none"
        and card.experts is None
        and card.linear_attention is None
        and card.latent_attention is None
        and card.global_attention is None
        and not card.attn_output_gate
        and not card.cross_attention_layers
    )


def dense_tensor_bytes(card: ModelCard, tp: int) -> list[int]:
    """One rank's large weight tensors of a plain dense decoder, in bytes (empty otherwise)."""
    if not _plain_dense(card):
        return []
    width = DTYPE_BYTES.get(card.dtype, 2.0)
    hidden, hd = card.hidden_size, card.head_dim
    q_heads = max(card.num_attention_heads // tp, 1)
    kv_heads = max(card.num_kv_heads // tp, 1)  # replicated below one head per rank
    layer = [
        (q_heads + 2 * kv_heads) * hd * hidden,  # qkv_proj
        hidden * q_heads * card.value_head_dim,  # o_proj
        2 * (card.intermediate_size // tp) * hidden,  # gate_up_proj
        hidden * (card.intermediate_size // tp),  # down_proj
    ]
    vocab = -(-card.vocab_size // VOCAB_PADDING) * VOCAB_PADDING // tp
    heads = 1 if card.tie_word_embeddings else 2
    elems = [vocab * hidden] * heads + layer * card.num_layers
    return [int(e * width) for e in elems]


def weight_padding_bytes(card: ModelCard, tp: int, version: str, vendor: str) -> int:
    """What the allocator adds to one rank's weights as vLLM reads them (0 where not modelled)."""
    split = load_max_split(version, vendor)
    return sum(block_padding(b, split) for b in dense_tensor_bytes(card, tp))


# torch's default cuBLAS workspace per (handle, stream) by architecture, as measured (docstring).
CUBLAS_WORKSPACE_BYTES = {"sm_90": 32 * MIB}


def cublas_workspace_bytes(gpu: GPUSpec) -> int:
    """The cuBLAS workspace the profiling run's first GEMM allocates (0 where not measured)."""
    return CUBLAS_WORKSPACE_BYTES.get(gpu.arch, 0)
