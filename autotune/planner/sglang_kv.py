"""SGLang's KV cell: bytes per token per rank as it divides its budget and as its pool allocates
them, and the KV dtype it runs for a card on a GPU and release."""

from __future__ import annotations

from typing import Any

from autotune.hardware.gpus import GPUSpec
from autotune.models.card import ModelCard

KV_DTYPE_BYTES = {
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "mxfp8": 1 + 1 / 32,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp4_e2m1": 0.5 + 1 / 16,
    "nvfp4": 0.5 + 1 / 16,
    "fp4_mx_block16": 0.5 + 1 / 16,
}


def resolve_kv_dtype(
    card: ModelCard, value: Any, gpu: GPUSpec | None = None, v: tuple[int, int, int] = (0, 5, 17)
) -> str:
    if value in (None, "auto"):
        la = card.latent_attention
        dsa = la is not None and la.index_head_dim is not None
        if dsa and v >= (0, 5, 3) and gpu is not None and cuda_major(gpu) >= 10:
            # DSA (NSA) models on Blackwell: SGLang sets fp8_e4m3 KV itself (server_args,
            # 0.5.4.post1 .. 0.5.9: "Setting KV cache dtype to fp8").
            return "fp8_e4m3"
        return "bf16" if card.dtype in ("bfloat16", "bf16") else card.dtype
    name = str(value)
    if name not in KV_DTYPE_BYTES:
        from autotune.errors import ConfigError

        raise ConfigError(
            f"unknown kv_cache_dtype {name!r}; valid: auto, {', '.join(KV_DTYPE_BYTES)}",
            field="kv_cache_dtype",
        )
    return name


def cuda_major(gpu: GPUSpec) -> int:
    """The CUDA compute capability's major number (sm_100 -> 10); 0 for other vendors."""
    if gpu.vendor != "nvidia" or not gpu.arch.startswith("sm_"):
        return 0
    return int(gpu.arch[3:]) // 10


def kv_cell_bytes(
    card: ModelCard, kv_dtype: str, tp: int, *, v_head: bool = True, indexer: bool = True
) -> int:
    """Per-token KV bytes on one rank: only full-attention layers count for hybrids (§2.2);
    latent attention (MLA) keeps one latent + rope key per layer on every rank. Releases before
    0.5.7 size V like K (`v_head=False`: 2 x head_dim). `indexer=False`: without the DSA
    indexer key, as releases before 0.5.3.post1 divided the budget (the pool still holds it)."""
    mla = card.latent_attention
    if mla is not None:
        layers = len(card.full_attention_layers)
        per = int((mla.kv_lora_rank + mla.qk_rope_head_dim) * KV_DTYPE_BYTES[kv_dtype])
        if mla.index_head_dim is not None and indexer:  # fp8 + fp32 scale per 128
            per += mla.index_head_dim + mla.index_head_dim // 128 * 4
        return per * layers
    heads = max(1, card.num_kv_heads // tp)
    v_dim = card.value_head_dim if v_head else card.head_dim
    per = heads * (card.head_dim + v_dim) * len(card.full_attention_layers)
    return int(per * KV_DTYPE_BYTES[kv_dtype])


def pool_cell_bytes(card: ModelCard, kv_dtype: str, tp: int, *, v_head: bool = True) -> int:
    """Per-token bytes SGLang allocates, which can exceed the cell it divides the budget by
    (kv_cell_bytes, get_cell_size_per_token): the DSA (NSA) pool stores an fp8 latent with one
    fp32 scale per 128 values and the rope key in bf16 (656 bytes for 512 + 64, not 576).
    From 0.5.9's model_runner_kv_cache_mixin (calculate_mla_kv_cache_dim) and NSATokenToKVPool;
    the difference comes out of the non-static slack."""
    cell = kv_cell_bytes(card, kv_dtype, tp, v_head=v_head)
    mla = card.latent_attention
    if mla is None or mla.index_head_dim is None or KV_DTYPE_BYTES.get(kv_dtype, 2.0) != 1.0:
        return cell
    extra = mla.kv_lora_rank // 128 * 4 + mla.qk_rope_head_dim  # scales + rope's second byte
    return cell + extra * len(card.full_attention_layers)
