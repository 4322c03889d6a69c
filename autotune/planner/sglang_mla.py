"""The absorbed MLA projections SGLang keeps beside `kv_b_proj` on every rank.

After loading, DeepSeek-family models (deepseek_v2.py `post_load_weights`; from 0.5.10
deepseek_common/deepseek_weight_loader.py) split each layer's `kv_b_proj` weight into `w_kc`
(the nope-key part) and `w_vc` (the value part), as new contiguous tensors, and keep
`kv_b_proj` too (its MHA prefill path reads it). Per rank and layer that is

    heads / attn_tp x (qk_nope_head_dim + v_head_dim) x kv_lora_rank  elements,

in bf16 for an unquantized (or AWQ / int8, dequantized) `kv_b_proj`; for an fp8 one the weight
is requantized to one fp8 tensor scale (block_quant_to_tensor_quant /
channel_quant_to_tensor_quant: one byte), except a [128, 128]-block checkpoint on CUDA from
0.4.6.post3, which is dequantized to bf16 (block_quant_dequant; DeepGEMM's fp8 bmm only with
SGL_USE_DEEPGEMM_BMM, off by default). 0.4.0.post1 .. 0.4.6.post2 requantized it to fp8 on CUDA
too; before 0.4.0.post1 `kv_b_proj` was deleted once split (`del self_attn.kv_b_proj`): nothing
beyond the checkpoint. DP attention (attn_tp = tp / dp) keeps more heads per rank: all of them at
dp = tp.
"""

from __future__ import annotations

from autotune.models.card import ModelCard

KEPT_FROM = (4, 0, 1)  # 0.4.0.post1, as sglang_history.release spells it
BF16_BLOCK_FROM = (4, 6, 3)  # 0.4.6.post3
FP8_SCHEMES = frozenset({"fp8", "fp8_block"})


def absorbed_bytes(
    card: ModelCard, attn_tp: int, vendor: str, rel: tuple[int, int, int] | None
) -> int:
    """Bytes of `w_kc` and `w_vc` on one rank (0 without latent attention). `rel`: the
    release as sglang_history.release gives it (None: a newer one)."""
    mla = card.latent_attention
    if mla is None or (rel is not None and rel < KEPT_FROM):
        return 0
    heads = max(card.num_attention_heads // max(attn_tp, 1), 1)
    per_layer = heads * (mla.qk_nope_head_dim + card.value_head_dim) * mla.kv_lora_rank
    q = card.quantization
    elt = 2
    if q.scheme in FP8_SCHEMES:
        block = q.block_shape == (128, 128)
        new = rel is None or rel >= BF16_BLOCK_FROM
        elt = 2 if vendor == "nvidia" and block and new else 1
    return len(card.full_attention_layers) * per_layer * elt
