"""Whether a tensor-parallel size splits the model's heads the way the engines shard them.

SGLang and vLLM shard attention with the same QKVParallelLinear rule (sglang
python/sglang/srt/layers/linear.py, vllm/model_executor/layers/linear.py): the query heads are
divided evenly over the attention TP ranks (`divide(total_num_heads, tp_size)`, an assertion);
KV heads are divided when there are at least as many as ranks, else each is replicated on
`tp_size / total_num_kv_heads` ranks, which must divide evenly too. vLLM checks the query heads
once more before loading (ModelConfig.verify_with_parallel_config: "Total number of attention
heads (H) must be divisible by tensor parallel size (T)"). Gated DeltaNet layers (Qwen3-Next,
Qwen3.5) split their key and value heads over the ranks; Mamba-2 layers split their heads and
replicate groups that do not divide. A size that breaks one of these fails at load in every
configuration, so it is refused before any trial.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.models.card import ModelCard


def attention_tp(engine: str, tp: int, config: Mapping[str, Any], version: str) -> int:
    """The ranks one attention layer is split over: tp, or tp / the DP-attention size SGLang
    runs (--enable-dp-attention with --dp-size, --attn-dp-size from 0.5.22: planner.sglang_dp;
    vLLM's data parallel replicates the whole model instead)."""
    if engine != "sglang":
        return tp
    from autotune.planner.sglang_dp import attention_dp_size
    from autotune.planner.sglang_history import release

    return max(tp // attention_dp_size(dict(config), tp, release(version)), 1)


def tp_split_problem(card: ModelCard, attn: int) -> str | None:
    """Why `attn` attention-TP ranks cannot shard `card` (None when they can), naming the
    sizes that can."""
    why = _split_problem(card, attn)
    if why is None:
        return None
    fine = [str(t) for t in range(1, 65) if _split_problem(card, t) is None]
    return f"{why}; attention TP sizes that split {card.name}: {', '.join(fine)}"


def _split_problem(card: ModelCard, attn: int) -> str | None:
    if attn <= 1:
        return None
    heads, kv = card.num_attention_heads, card.num_kv_heads
    if heads % attn:
        return f"{heads} attention heads cannot be split evenly over {attn} tensor-parallel ranks"
    if kv and (kv % attn if kv >= attn else attn % kv):
        return (
            f"{kv} KV heads cannot be split over {attn} ranks (fewer ranks must divide them, "
            f"more must be a multiple of {kv} so that each head is replicated evenly)"
        )
    la = card.linear_attention
    if la is not None and card.linear_layers:
        split = {
            "gated_delta_net": (("key", la.num_key_heads), ("value", la.num_value_heads)),
            "mamba2": (("Mamba-2", la.num_value_heads),),
        }.get(la.kind, ())
        for what, n in split:
            if n % attn:
                return (
                    f"the linear-attention layers' {n} {what} heads cannot be split evenly "
                    f"over {attn} tensor-parallel ranks"
                )
    return None
