"""What the engines load per rank from a checkpoint, part by part, and whether the sizes its
config.json declares match its tensors.

The tensors are the truth (their safetensors headers: dtype and shape per tensor). The config's
count is what the planner would assume from config.json and `quantization_config` alone; a
component whose tensors hold far more or less than that count is quantized differently from what
the config says (FIELD-NOTES P10: a README's "linear_attn kept in BF16" while every GDN layer was
stored packed), and a planner reading only the config would size its memory wrong.
"""

from __future__ import annotations

from typing import Any

from autotune.errors import ModelLoadError
from autotune.inspect.report import Finding
from autotune.models.card import ModelCard
from autotune.models.hf.config_card import card_from_config
from autotune.models.hf.tensors import Checkpoint
from autotune.planner.common import vision_per_rank
from autotune.planner.vllm_memory import rope_cache_bytes, shards_vision

# A component is off when the config's count misses its tensors by more than this share and
# this many bytes (norms, zero points and index tensors differ by less).
MISMATCH_SHARE = 0.10
MISMATCH_BYTES = 1 << 20


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _config(ckpt: Checkpoint) -> dict[str, Any]:
    """config.json with the quantization config it declares (modelopt keeps it apart)."""
    q = ckpt.quantization_config()
    return {**ckpt.config, "quantization_config": q} if q is not None else dict(ckpt.config)


def counted_card(ckpt: Checkpoint, *, from_tensors: bool) -> ModelCard | None:
    """The card config.json describes, with the tensors' sizes (`from_tensors`) or the sizes
    counted from the config alone; None for an architecture the card reader does not know."""
    loaded = ckpt.bytes_by_component() if from_tensors else None
    try:
        return card_from_config(
            _config(ckpt),
            name=ckpt.path.name,
            source=str(ckpt.path / "config.json"),
            loaded_bytes=dict(loaded) if loaded else None,
        )
    except (ModelLoadError, KeyError, TypeError, ValueError):
        return None


def loaded_per_rank(card: ModelCard, tp: int) -> dict[str, dict[str, int]]:
    """Bytes one of `tp` ranks loads, per part, as SGLang and vLLM build the model: embeddings,
    LM head and decoder split over the ranks, the parts built replicated whole; SGLang keeps the
    vision tower whole, vLLM splits Llama 4's and adds its rotary cos/sin cache; the MTP layer
    only with speculative decoding."""
    w = card.weights
    common = {
        "embed_tokens": w.embed_tokens // tp,
        "lm_head": w.lm_head // tp,
        "decoder": w.decoder // tp + w.replicated,
    }
    mtp = w.mtp // tp
    return {
        "sglang": {**common, "vision": w.vision, "mtp (speculative only)": mtp},
        "vllm": {
            **common,
            "vision": vision_per_rank(w, tp, shards_vision(card, {})),
            "rope cache": rope_cache_bytes(card),
            "mtp (speculative only)": mtp,
        },
    }


def size_findings(ckpt: Checkpoint) -> list[Finding]:
    """Components whose tensors disagree with what config.json's quantization implies."""
    card = counted_card(ckpt, from_tensors=False)
    if card is None:
        return []
    w = card.weights
    counted = {
        "embed_tokens": w.embed_tokens,
        "lm_head": w.lm_head,
        "decoder": w.decoder + w.replicated,
        "mtp": w.mtp,
        "vision": w.vision,
    }
    stored = ckpt.bytes_by_component()
    out = []
    for part, have in stored.items():
        want = counted.get(part, 0)
        diff = have - want
        if not have or not want:
            continue  # absent on one side: the MTP and vision findings say so
        if abs(diff) > MISMATCH_BYTES and abs(diff) > MISMATCH_SHARE * want:
            out.append(
                Finding(
                    severity="warning",
                    code="config-size-mismatch",
                    message=f"{part}: the tensors hold {_size(have)}, config.json and its "
                    f"quantization_config imply {_size(want)} ({diff / want:+.0%}): the "
                    "pack is not quantized as its config says, and a planner reading the "
                    "config alone sizes the memory wrong",
                    count=1,
                    fix="trust the tensors (autotune plan --model DIR reads them); check "
                    "quantization_config's ignore list against the layers table above",
                )
            )
    return out
