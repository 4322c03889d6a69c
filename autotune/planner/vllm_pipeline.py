"""Pipeline parallelism on vLLM: which decoder layers each stage holds and what one stage's rank
loads, so the planner can size every stage's KV cache.

From vLLM's own source:
- distributed/utils.get_pp_indices: num_layers // pp layers per stage; a remainder goes one layer
  each to the stages before the last, from the second-to-last backwards, from 0.8.0 (before, the
  last stage took it); VLLM_PP_LAYER_PARTITION overrides it.
- Models build the embedding on the first stage and the LM head on the last only
  (PPMissingLayer elsewhere); with tied embeddings the last stage loads its own head, as no
  embedding is there to tie to.
- The profiling run's sampler runs on the last stage only (gpu_model_runner.profile_run:
  get_pp_group().is_last_rank).
- v1/core/kv_cache_utils.get_kv_cache_configs sizes each worker's cache from its own memory and
  layers, then gives every worker the smallest block count.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.models.card import ModelCard
from autotune.models.hf.layer_params import card_layers, moe_layers_of
from autotune.planner.vllm_history import at_least

# Before 0.8.0 get_pp_indices gave the last stage the remainder (0.7.3's wheel); from 0.8.0 it
# spreads it over the stages before the last.
SPREAD_REMAINDER_SINCE = "0.8.0"


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its layer range and the card of what its ranks load."""

    start: int
    stop: int
    card: ModelCard
    last: bool


def pp_partition(
    num_layers: int, pp: int, partition: str | None = None, version: str | None = None
) -> list[int]:
    """Layers per stage as vLLM `version`'s get_pp_indices splits them (None: the newest;
    `partition`: VLLM_PP_LAYER_PARTITION)."""
    if partition:
        sizes = [int(p) for p in partition.split(",")]
        if len(sizes) != pp or sum(sizes) != num_layers:
            raise ValueError(f"VLLM_PP_LAYER_PARTITION {partition!r}: {pp} stages of {num_layers}")
        return sizes
    sizes = [num_layers // pp] * pp
    if version is not None and not at_least(version, SPREAD_REMAINDER_SINCE):
        sizes[-1] += num_layers % pp
        return sizes
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    return sizes


def layer_weights(card: ModelCard) -> list[float]:
    """Each decoder layer's weight (relative: shares are over their sum) from the card's layer
    count (layer_params.card_layers): the card's attention bytes by each layer's attention
    parameters, the rest of its decoder bytes by its other projections (linear attention, MLP,
    shared and routed experts); a card without attention bytes weighs each layer by all its
    projections."""
    w, layers = card.weights, card_layers(card)
    if not w.attention:
        return [float(p.projections) for p in layers]
    rest, beside = w.decoder - w.attention, [p.beside_attention for p in layers]
    attention = [p.attention for p in layers]
    a, b = sum(attention), sum(beside)
    return [w.attention * x / a + rest * y / b for x, y in zip(attention, beside, strict=True)]


def pipeline_stages(
    card: ModelCard, pp: int, partition: str | None = None, version: str | None = None
) -> list[Stage]:
    """The stages of a PP launch on vLLM `version` (one stage holding the whole card when pp is
    1)."""
    if pp <= 1:
        return [Stage(0, card.num_layers, card, True)]
    weights = layer_weights(card)
    total = sum(weights)
    stages, start = [], 0
    for rank, size in enumerate(pp_partition(card.num_layers, pp, partition, version)):
        stop = start + size
        last = rank == pp - 1
        share = sum(weights[start:stop]) / total
        stage = _stage_card(card, start, stop, share, rank == 0, last)
        stages.append(Stage(start, stop, stage, last))
        start = stop
    return stages


def _stage_card(
    card: ModelCard, start: int, stop: int, share: float, first: bool, last: bool
) -> ModelCard:
    def inside(layers: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(i - start for i in layers if start <= i < stop)

    w = card.weights
    head = (w.lm_head or w.embed_tokens) if last else 0
    weights = w.model_copy(
        update={
            "embed_tokens": w.embed_tokens if first else 0,
            "lm_head": head,
            "decoder": int(w.decoder * share),
            "attention": int(w.attention * share),
            "replicated": int(w.replicated * share),
            "mtp": w.mtp if last else 0,
            "vision": w.vision if first else 0,
            "vision_linear": w.vision_linear if first else 0,
        }
    )
    update: dict[str, object] = {
        "num_layers": stop - start,
        "weights": weights,
        "full_attention_layers": inside(card.full_attention_layers),
        "cross_attention_layers": inside(card.cross_attention_layers),
    }
    if card.local_attention is not None:
        update["local_attention"] = card.local_attention.model_copy(
            update={"layers": inside(card.local_attention.layers)}
        )
    if card.block_pattern is not None:
        update["block_pattern"] = card.block_pattern[start:stop]
    if card.experts is not None:
        moe = sum(1 for i in moe_layers_of(card) if start <= i < stop)
        update["experts"] = card.experts.model_copy(update={"moe_layers": moe})
    return card.model_copy(update=update)
