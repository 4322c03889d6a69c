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
"""

from __future__ import annotations

from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.drafts import DraftModel, noted_draft
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_kv import attention_bytes_per_token, kv_element_bytes

SLIDING_DRAFT_SINCE = "0.25.0"


def separate_draft(spec_config: dict[str, Any], assumptions: list[str]) -> DraftModel | None:
    """The listed draft model `speculative_config.model` names; a DFlash draft the list lacks is
    noted as unmodelled."""
    path = spec_config.get("model")
    if not path:
        return None
    return noted_draft(path, assumptions, dflash=str(spec_config.get("method") or "") == "dflash")


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
    if draft.sliding_layers and at_least(version, SLIDING_DRAFT_SINCE):
        assumptions.append(
            f"vLLM {version} keeps the draft's {draft.sliding_layers} sliding-window layers' "
            "windows only; the plan counts them as full attention"
        )
    a1 = attention_bytes_per_token(card, kv_dtype, tp)
    # pages are block_size x bytes per token for both, so their ratio is a1 / a_d
    if card.is_hybrid and (a_d <= 0 or a_d > a1 or a1 % a_d):
        assumptions.append(
            f"the draft's KV page ({a_d} B per token) does not divide the target's ({a1} B): "
            "vLLM's layout for it is not modelled, its KV cache is not counted"
        )
        return None
    return draft.layers, a_d
