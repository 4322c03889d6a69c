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

An EAGLE / EAGLE-3 head (planner.drafts) frees its own embedding for the target's inside the
profiled load, read from the wheels' v1/spec_decode/eagle.py load_model (llm_base_proposer.py
from 0.20.0) and Model Runner V2's spec_decode/eagle/utils.py load_eagle_model:
- 0.8.4 / 0.8.5's proposer keeps an EAGLE head's own embedding (0.8.5 takes the target's for an
  EAGLE-3 head only when the checkpoint has none); from 0.9.0 a single pipeline stage takes the
  target's (0.9.0 always, 0.9.1 .. 0.11.x when the shapes match, from 0.12.0 when the checkpoint
  has none or an identical copy: the listed heads' case), EAGLE_SHARED_EMBEDDING_SINCE.
- under pipeline parallelism the V1 proposer (every release that has it, through 0.33.x) and
  Model Runner V2 before 0.30.0 keep the head's own embedding (vocab x hidden, vocab-parallel):
  noted, not counted. 0.34.0 ships Model Runner V2 alone (no v1/worker/gpu_model_runner.py, no
  v1/spec_decode proposers in its wheel).
- an EAGLE head takes the target's LM head in every release; an EAGLE-3 head keeps its own
  (draft_vocab_size rows, never the target's shape) and its draft_id_to_target_id map.
- from 0.33.0 `draft_lm_head_quantization` (Model Runner V2) gives a head that shares the
  target's LM head a quantized copy of it beside the target's: noted, not counted.
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
EAGLE_ARCHITECTURES = frozenset({"EagleLlamaForCausalLM", "Eagle3LlamaForCausalLM"})
EAGLE_SHARED_EMBEDDING_SINCE = "0.9.0"
V2_PP_SHARED_EMBEDDING_SINCE = "0.30.0"  # Model Runner V2 shares where the stage has it
V2_ONLY_SINCE = "0.34.0"  # the V1 model runner and its proposers are gone from the wheel
DRAFT_HEAD_QUANTIZATION_SINCE = "0.33.0"


def separate_draft(
    spec_config: dict[str, Any],
    method: object,
    assumptions: list[str],
    *,
    version: str,
    pp: int = 1,
) -> DraftModel | None:
    """The listed draft model `speculative_config.model` names (`method`: the config's, or the
    one vLLM infers from the path); a DFlash draft the list lacks is noted as unmodelled, and
    so is an EAGLE head's memory that `version` holds beside what the plan counts."""
    path = spec_config.get("model")
    if not path:
        return None
    draft = noted_draft(path, assumptions, dflash=str(method or "") == "dflash")
    if draft is not None and draft.architecture in EAGLE_ARCHITECTURES:
        assumptions.extend(eagle_uncounted(draft, spec_config, version, pp))
    return draft


def eagle_uncounted(
    draft: DraftModel, spec_config: dict[str, Any], version: str, pp: int
) -> list[str]:
    """What vLLM `version` keeps of an EAGLE head beyond the weights the plan counts (the
    module docstring): its own embedding, a quantized copy of the target's LM head."""
    notes: list[str] = []
    if not at_least(version, EAGLE_SHARED_EMBEDDING_SINCE):
        notes.append(
            f"vLLM {version} gives an EAGLE head the target's token embedding only from "
            f"{EAGLE_SHARED_EMBEDDING_SINCE} (before, an EAGLE head keeps its own, an EAGLE-3 "
            "head its checkpoint's if it has one): the head's own embedding is not counted"
        )
    elif pp > 1:
        if at_least(version, V2_ONLY_SINCE):
            where = "only on a stage that holds the target's (Model Runner V2, the only runner)"
        elif at_least(version, V2_PP_SHARED_EMBEDDING_SINCE):
            where = (
                "only on a stage that holds the target's (Model Runner V2; the V1 runner keeps "
                "the head's own)"
            )
        else:
            where = "not at all (the head keeps its own)"
        notes.append(
            f"with pipeline parallelism vLLM {version} shares the target's token embedding "
            f"with the EAGLE head {where}: the head's own embedding is not counted"
        )
    quant = spec_config.get("draft_lm_head_quantization")
    shares_head = draft.lm_head_vocab == 0
    if quant and shares_head and at_least(version, DRAFT_HEAD_QUANTIZATION_SINCE):
        notes.append(
            f"draft_lm_head_quantization={quant}: the {quant} copy of the target's LM head "
            "the EAGLE head drafts with is not counted"
        )
    return notes


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
