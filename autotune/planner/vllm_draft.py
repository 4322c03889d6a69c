"""A separate DFlash draft model on vLLM (planner.drafts describes the checkpoints): its weights
in the profiled model memory and its layers' KV cache beside the target's.

From vLLM's own source (0.20.x .. 0.24.x):
- the drafter loads inside the same memory profiler as the target (GPUModelRunner.load_model:
  `self.drafter.load_model(self.model)` within DeviceMemoryProfiler), so "Model loading took"
  and the KV budget include its weights; the embeddings and LM head it allocates are dropped
  for the target's when the checkpoint has none (_maybe_share_embeddings / _maybe_share_lm_head)
  and free again before the reading, which counts allocated bytes.
- each draft layer is a plain `Attention` (models/qwen3_dflash.py DFlashQwen3Attention) with
  the draft's own KV heads and head size and the target's cache dtype: a FullAttentionSpec that
  differs from the target's, so a KV cache type of its own (planner.vllm_kv.draft_groups).
- from 0.25.0 the drafter keeps its sliding-window layers' windows (SlidingWindowSpec); that
  layout is not modelled here, and the plan says so.
- Laguna's drafter (models/laguna_dflash.py, from 0.25.0) builds the target's own decoder layers
  and clears their sliding window ("Keep full KV allocation; SWA remains a compute-time
  limit"): its layers are full attention with the target's KV heads, head size and cache dtype,
  the same KV cache type as the target's full-attention layers, so beside the target's
  sliding-window groups they count as more full-attention layers (FULL_KV_DRAFTS).
"""

from __future__ import annotations

from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.drafts import DraftModel, noted_draft
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_kv import (
    attention_bytes_per_token,
    attention_bytes_per_token_full,
    kv_element_bytes,
)
from autotune.planner.vllm_window import uses_window_groups

SLIDING_DRAFT_SINCE = "0.25.0"
# draft architecture -> first release whose model file allocates full KV for every draft layer
FULL_KV_DRAFTS = {"DFlashLagunaForCausalLM": "0.25.0"}


def separate_draft(
    spec_config: dict[str, Any], method: object, assumptions: list[str]
) -> DraftModel | None:
    """The listed draft model `speculative_config.model` names (`method`: the config's, or the
    one vLLM infers from the path); a DFlash draft the list lacks is noted as unmodelled."""
    path = spec_config.get("model")
    if not path:
        return None
    return noted_draft(path, assumptions, dflash=str(method or "") == "dflash")


def draft_kv(
    draft: DraftModel,
    card: ModelCard,
    *,
    version: str,
    tp: int,
    kv_dtype: str,
    assumptions: list[str],
) -> tuple[int, int] | None:
    """(layers, K+V bytes per token per layer) of the draft's KV cache type, None (noted) when
    the planner does not lay it out."""
    a_d = draft.kv_bytes_per_token_layer(tp, kv_element_bytes(card, kv_dtype))
    since = FULL_KV_DRAFTS.get(draft.architecture)
    full_kv = since is not None and at_least(version, since)
    if draft.sliding_layers and at_least(version, SLIDING_DRAFT_SINCE) and not full_kv:
        assumptions.append(
            f"vLLM {version} keeps the draft's {draft.sliding_layers} sliding-window layers' "
            "windows only; the plan counts them as full attention"
        )
    if uses_window_groups(card, version):
        if full_kv and a_d == attention_bytes_per_token_full(card, kv_dtype, tp):
            assumptions.append(
                f"the draft's {draft.layers} layers keep full KV, the target's full-attention "
                "KV cache type: counted with the target's full-attention layers"
            )
            return draft.layers, a_d
        assumptions.append(
            "the draft's KV cache beside the target's sliding-window groups is not modelled: "
            "its KV cache is not counted"
        )
        return None
    a1 = attention_bytes_per_token(card, kv_dtype, tp)
    # pages are block_size x bytes per token for both, so their ratio is a1 / a_d
    if card.is_hybrid and (a_d <= 0 or a_d > a1 or a1 % a_d):
        assumptions.append(
            f"the draft's KV page ({a_d} B per token) does not divide the target's ({a1} B): "
            "vLLM's layout for it is not modelled, its KV cache is not counted"
        )
        return None
    return draft.layers, a_d
