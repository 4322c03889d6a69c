"""How SGLang's Triton split-KV decode kernel divides one decode step's work, from the release
code (0.5.17 and 0.5.18 alike): the number of KV splits per sequence, chosen each step by
`TritonAttnBackend.get_num_kv_splits` (kernels/ops/attention/metadata.py
`get_num_kv_splits_triton`) with `--triton-attention-num-kv-splits` (16 on ROCm) as the cap, and
the kernel's grid extent along heads (decode_attention.py). The roofline prices the kernel's
occupancy and split overhead from these (perf.PerfModel).

Not modelled: SGLANG_TRITON_DECODE_ATTN_STATIC_KV_SPLITS=true or a device core count of 0 (every
sequence takes the cap), and --enable-deterministic-inference (splits of a fixed tile size).
The core count SGLang reads is torch's multi_processor_count; GPUSpec.sm_count stands for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

GROUPED_BLOCK_H = 16  # decode_attention.py _GROUPED_BLOCK_H: query heads per program (GQA)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def head_tiles(num_heads: int, num_kv_heads: int) -> int:
    """Programs along heads per sequence and split: one per query head for MHA
    (_decode_att_m_fwd), else per group of up to 16 query heads sharing a KV head
    (_grouped_head_tiles)."""
    group = max(num_heads // max(num_kv_heads, 1), 1)
    if group == 1:
        return num_heads
    return _cdiv(num_heads, min(GROUPED_BLOCK_H, group))


def decode_kv_splits(
    seq_lens: Sequence[int],
    *,
    num_heads: int,
    num_kv_heads: int,
    max_kv_splits: int,
    core_count: int,
    num_group: int = 1,
) -> list[int]:
    """Each sequence's KV split count for one decode step (`get_num_kv_splits_triton`).
    `num_heads`/`num_kv_heads` are per rank; `num_group` is the query tokens per sequence
    (topk of a speculative draft step). The split grows with the longest sequence's depth
    (log2 of len/64) against the device's cores, and shrinks as the batch fills the GPU."""
    if not seq_lens:
        return []
    if core_count <= 0:
        return [max_kv_splits] * len(seq_lens)
    longest, shortest = max(seq_lens), min(seq_lens)
    if longest * 8 < shortest * 10:  # lengths within 25 %: treated as equal
        shortest = longest
    splits_1 = min(_cdiv(longest, max(shortest, 1)), max_kv_splits)
    chunk_1 = _cdiv(longest, splits_1)
    # float32 log2 of len/64, floored at 1, times the core count, truncated to int32
    ext_cores = int(core_count * max(math.log2(longest / 64.0), 1.0))
    group = num_heads // max(num_kv_heads, 1)
    tiles = num_heads if group == 1 else _cdiv(num_heads, min(GROUPED_BLOCK_H, group))
    token_grid = len(seq_lens) * num_group * tiles
    splits_2 = min(_cdiv(ext_cores, token_grid), max_kv_splits)
    chunk_2 = _cdiv(longest, splits_2)
    return [max(_cdiv(n, chunk_1), _cdiv(n, chunk_2)) for n in seq_lens]


__all__ = ["GROUPED_BLOCK_H", "decode_kv_splits", "head_tiles"]
