"""vLLM V1's multimodal encoder profiling (GPUModelRunner.profile_run, 0.12.0 .. 0.27.0): before
the text dummy pass, the vision encoder runs over a batch of dummy images of the model's largest
size, and what it yields stays alive through that pass. The torch peak that comes off the KV
budget is taken over the whole of profile_run, so it is the larger of

    encoder phase: the dummy pixel values + the tower's activations over all their patches
    text phase:    the pixel values and the encoder outputs, still held + the text pass's peak

profile_run keeps `batched_dummy_mm_inputs` (a local, freed only on return) and puts each output
in `self.encoder_cache` (cleared after the sampler's dummy run). The pixel values are in the
model's dtype: the processor casts floating tensors to model_config.dtype (multimodal
processing's _postprocess_output, "mimics transformers.BatchFeature"). How many items:
MultiModalBudget._get_max_items (multimodal/encoder_budget.py; v1/worker/utils.py before 0.16):

    budget   = max(max_num_batched_tokens, tokens per item)    (compute_mm_encoder_budget)
    per_req  = max(1, min(limit_mm_per_prompt (999 unset), max_model_len // tokens per item))
    reqs     = max_num_seqs, or min(it, max_num_batched_tokens // tokens) without chunked prefill
    items    = max(1, min(budget // tokens per item, reqs x per_req))

The dummy image per architecture is the processor's get_image_size_with_most_features;
DUMMY_ITEMS lists those modelled. Not Qwen3-VL and Qwen3.5 (qwen3_vl.py): their dummy image is
the checkpoint's preprocessor_config size.longest_edge factored into a grid, a file the cards do
not carry, and at the 4096 x 4096 that Qwen's checkpoints state the tower's live tensors alone
exceed what the public launches leave for the whole peak (their records' planner_gap). The tower's activations are an estimate (the same form as the
text forward's, vllm_memory.ACT_TENSORS_FACTOR); the pixel values and outputs are derived.
Before 0.12.0 the item count reads differently (no max_model_len clamp in 0.10.0, limits default
1 before the 999 default): not modelled, the encoder adds nothing there.

From 0.34.0 Model Runner V2 is the only runner (ENCODER_INPUTS_FREED_SINCE): its profile_run
(v1/worker/gpu/model_runner.py) profiles the encoder on the first pipeline stage only
(`self.supports_mm_inputs and self.is_first_pp_rank`), through
EncoderRunner.profile_encoder_cache (v1/worker/gpu/mm/encoder_runner.py). The dummy items it is
given are the processor's host tensors (MultiModalBudget.get_dummy_encoder_profile_inputs: one
item repeated; _postprocess_output moves them to the CPU), and execute_mm_encoder batches them
onto the device inside the call (group_and_batch_mm_kwargs), so the pixel values are freed on
its return: only the outputs, in encoder_cache.encoder_outputs until reset_encoder_cache after
the sampler, are held through the text pass. MultiModalBudget's item count is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner.vllm_history import at_least, json_mapping

# The releases whose profile_run and MultiModalBudget are read above (wheels 0.12.0 .. 0.27.0
# and 0.34.0).
FIRST = "0.12.0"
# Model Runner V2 alone (0.34.0 wheel): the text pass holds the encoder outputs but not the
# pixel values, and only the first pipeline stage profiles the encoder (module docstring).
ENCODER_INPUTS_FREED_SINCE = "0.34.0"
# vLLM's default per-prompt limit for a modality the launch does not limit
# (MultiModalConfig.get_limit_per_prompt, from 0.12.0).
DEFAULT_LIMIT = 999
# The tower's workspace per patch, in units of its MLP width plus two residual-stream widths (as
# vllm_memory.forward_bytes for the text model). Estimate.
TOWER_TENSORS_FACTOR = 2.0


@dataclass(frozen=True)
class DummyItem:
    """One dummy item of the largest size: what it holds on the GPU and yields."""

    pixels: int  # pixel_values elements (model dtype)
    tokens: int  # embeddings it yields: the budget's tokens per item
    patches: int  # positions the vision tower runs over
    tower_width: int  # the tower's MLP width (intermediate_size)
    tower_hidden: int


def _gemma3(card: ModelCard, cfg: dict[str, Any]) -> DummyItem | None:
    """Gemma 3 (gemma3_mm.py): the dummy image is image_size x (image_size x
    pan_and_scan_max_num_crops), but without do_pan_and_scan (the default) get_num_crops is 0
    and the processor resizes it to one image_size square: 3 x 896 x 896 pixels, 64 x 64 SigLIP
    patches, (num_crops + 1) x image_seq_length = mm_tokens_per_image embeddings."""
    v = card.vision
    if v is None or not (v.image_size and v.patch_size and v.tokens_per_image):
        return None
    if json_mapping(cfg.get("mm_processor_kwargs")).get("do_pan_and_scan"):
        return None  # crops of the tall dummy image: not modelled
    side = v.image_size
    return DummyItem(
        pixels=3 * side * side,
        tokens=v.tokens_per_image,
        patches=(side // v.patch_size) ** 2,
        tower_width=v.intermediate_size or 4 * v.hidden_size,
        tower_hidden=v.hidden_size,
    )


DUMMY_ITEMS = {
    "Gemma3ForConditionalGeneration": _gemma3,
}


def image_limit(cfg: dict[str, Any]) -> int:
    """limit_mm_per_prompt's image count (DEFAULT_LIMIT where unset; 0 for
    language_model_only)."""
    if cfg.get("language_model_only"):
        return 0
    limits = json_mapping(cfg.get("limit_mm_per_prompt"))
    if "image" not in limits:
        return DEFAULT_LIMIT
    value = limits["image"]
    if isinstance(value, dict):
        value = value.get("count", DEFAULT_LIMIT)
    return int(value)


def items_per_batch(
    tokens: int,
    *,
    max_num_batched_tokens: int,
    max_model_len: int,
    max_num_seqs: int,
    chunked_prefill: bool,
    limit: int,
) -> int:
    """MultiModalBudget._get_max_items's items per batch (0: no encoder profiling)."""
    if tokens <= 0 or limit <= 0:
        return 0
    budget = max(max_num_batched_tokens, tokens)
    per_req = max(1, min(limit, max_model_len // tokens))
    reqs = max_num_seqs
    if not chunked_prefill:
        reqs = min(reqs, max_num_batched_tokens // tokens)
    return max(1, min(budget // tokens, reqs * per_req))


@dataclass(frozen=True)
class EncoderProfile:
    """The encoder's share of the profiling run, in bytes."""

    items: int
    kept_bytes: int  # what the text pass holds: the outputs (and pixel values before 0.34.0)
    encoder_peak_bytes: int  # pixel values + the tower's workspace (estimate)

    def peak(self, text_peak: int) -> int:
        """The run's torch peak: the larger phase."""
        return max(self.encoder_peak_bytes, self.kept_bytes + text_peak)


def encoder_profile(
    card: ModelCard,
    cfg: dict[str, Any],
    version: str,
    *,
    max_num_batched_tokens: int,
    max_model_len: int,
    max_num_seqs: int,
    chunked_prefill: bool,
    first_stage: bool = True,
) -> EncoderProfile | None:
    """What vLLM `version`'s encoder profiling allocates for this model; None where it runs none
    or the model's dummy item is not modelled (DUMMY_ITEMS). `first_stage` False: a pipeline
    stage after the first, which profiles no encoder from ENCODER_INPUTS_FREED_SINCE."""
    build = DUMMY_ITEMS.get(card.architecture)
    if build is None or not at_least(version, FIRST) or cfg.get("skip_mm_profiling"):
        return None
    v2 = at_least(version, ENCODER_INPUTS_FREED_SINCE)
    if v2 and not first_stage:
        return None
    item = build(card, cfg)
    if item is None:
        return None
    n = items_per_batch(
        item.tokens,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        chunked_prefill=chunked_prefill,
        limit=image_limit(cfg),
    )
    if n == 0:
        return None
    size = DTYPE_BYTES.get(card.dtype, 2.0)
    pixels = int(n * item.pixels * size)
    outputs = int(n * item.tokens * card.hidden_size * size)
    widths = item.tower_width + 2 * item.tower_hidden
    tower = int(n * item.patches * widths * size * TOWER_TENSORS_FACTOR)
    return EncoderProfile(n, outputs if v2 else pixels + outputs, pixels + tower)
