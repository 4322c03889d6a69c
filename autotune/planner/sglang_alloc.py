"""What a plain dense model's weights hold on a GPU beyond their bytes, as SGLang's startup
`Load weight` lines measure it (free memory before minus after, after torch.cuda.empty_cache).

SGLang builds each parameter as its own tensor on the GPU (the loader's model init runs under
`torch.device("cuda")`), so each one goes through PyTorch's caching allocator: a request of
10 MiB or more (kMinLargeAlloc) gets a segment of its own, rounded up to 2 MiB (kRoundLarge),
and the rest of that segment stays reserved, out of what the engine later reads as free
(c10/cuda/CUDACachingAllocator.cpp). Smaller requests share 2 MiB and 20 MiB segments and are
not counted here. Measured on an H200 (torch 2.11), parameters allocated one by one in a Qwen2
model's shapes: 226 MiB over their bytes for QwQ-32B at TP4, 100 MiB for a 7B at TP1, 1 MiB
for Llama-3-8B (every large tensor there a whole number of 2 MiB).

Beside them the rotary embedding's cos/sin cache (rotary_embedding.get_rope: one cached
instance, a GPU buffer of max_position x rotary_dim from model init), kept in fp32 on CUDA
("cache needs to be in FP32 for numerical stability": every release read, 0.4.2.post1 ..
0.5.23) and on ROCm from 0.5.22; cast to the model's dtype on ROCm before.

Only dense decoders whose linear layers are plain unquantized tensors are counted (one fused
QKV, an output projection, a fused gate/up and a down projection per layer); other layouts
return 0, as before.

Under `--cpu-offload-gb` the offloader replaces each decoder parameter it moves with a pinned
host copy (`p.data = cpu_data`, sglang_offload), dropping the GPU tensor; the empty_cache before
the `Load weight end` reading then returns its whole segment, slack included. Only the tensors
still on the GPU count.
"""

from __future__ import annotations

from autotune.models.card import ModelCard
from autotune.planner.common import MIB

SEGMENT_ROUND = 2 * MIB  # kRoundLarge
OWN_SEGMENT = 10 * MIB  # kMinLargeAlloc: requests from here on get a segment of their own
VOCAB_PAD = 64  # VocabParallelEmbedding's DEFAULT_VOCAB_PADDING_SIZE


def segment_slack(nbytes: int) -> int:
    """Bytes the allocator reserves beyond one request of `nbytes`."""
    if nbytes < OWN_SEGMENT:
        return 0
    return -nbytes % SEGMENT_ROUND


def plain_dense(card: ModelCard) -> bool:
    """A dense decoder of plain unquantized linear layers (the layout counted here)."""
    return (
        card.experts is None
        and card.latent_attention is None
        and card.linear_attention is None
        and card.local_attention is None
        and card.global_attention is None
        and card.vision is None
        and card.weights.mtp == 0
        and card.quantization.scheme == "none"
        and card.dtype in ("bfloat16", "bf16", "float16")
    )


def dense_tensor_bytes(card: ModelCard, tp: int) -> list[int]:
    """One rank's large parameter tensors of a plain dense decoder (plain_dense), in bytes."""
    el = 2
    h, hd = card.hidden_size, card.head_dim
    heads, kv = card.num_attention_heads // tp, max(card.num_kv_heads // tp, 1)
    inter = -(-card.intermediate_size // tp)
    vocab = -(-card.vocab_size // VOCAB_PAD) * VOCAB_PAD // tp
    layer = [
        (heads + 2 * kv) * hd * h,  # qkv_proj
        h * heads * hd,  # o_proj
        2 * inter * h,  # gate_up_proj
        h * inter,  # down_proj
    ]
    sizes = [vocab * h] + layer * card.num_layers
    if card.weights.lm_head:
        sizes.append(vocab * h)
    return [s * el for s in sizes]


def rope_cache_bytes(card: ModelCard, vendor: str, v: tuple[int, int, int]) -> int:
    """The rotary cos/sin cache: max_position x rotary_dim, fp32 on CUDA (and on ROCm from
    0.5.22), else the model's 2-byte dtype."""
    fp32 = vendor == "nvidia" or v >= (0, 5, 22)
    return card.max_position_embeddings * (card.rotary_dim or card.head_dim) * (4 if fp32 else 2)


def left_on_gpu(layer_tensors: list[int], host_budget: int) -> list[int]:
    """The decoder tensors, in build order, that the offloader leaves on the GPU: it moves them
    one by one while the bytes moved stay below the budget (the layers' small norms, which it
    also moves, are not in the list: the boundary is exact to within them)."""
    moved, kept = 0, []
    for n in layer_tensors:
        if moved < host_budget:
            moved += n
        else:
            kept.append(n)
    return kept


def load_overhead_bytes(
    card: ModelCard, tp: int, vendor: str, v: tuple[int, int, int], host_budget: int = 0
) -> int:
    """What loading a plain dense model takes on one rank beyond its parameter bytes (module
    docstring), with `host_budget` bytes of each rank's decoder offloaded; 0 for other layouts."""
    if not plain_dense(card):
        return 0
    sizes = dense_tensor_bytes(card, tp)
    layers = sizes[1 : 1 + 4 * card.num_layers]
    kept = [sizes[0], *left_on_gpu(layers, host_budget), *sizes[1 + len(layers) :]]
    return sum(segment_slack(n) for n in kept) + rope_cache_bytes(card, vendor, v)
