"""A model folder's tensors as their safetensors headers describe them (name, dtype, shape,
shard), the component each belongs to, and the Checkpoint that holds them with the folder's
config."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Component = Literal["embed_tokens", "lm_head", "decoder", "mtp", "vision"]
COMPONENTS: tuple[Component, ...] = ("embed_tokens", "lm_head", "decoder", "mtp", "vision")

# Bits per element of each safetensors dtype (F4 and F6 are sub-byte; rows round up to bytes).
SAFETENSORS_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
FP8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2"})

_VISION_PARTS = frozenset(
    {
        "visual",
        "vision_tower",
        "vision_model",
        "vision_encoder",
        "multi_modal_projector",
        "mm_projector",
    }
)
_EMBED_PARTS = frozenset({"embed_tokens", "wte", "word_embeddings", "tok_embeddings"})
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its safetensors header describes it."""

    name: str
    dtype: str  # safetensors spelling: BF16, F16, I32, F8_E4M3, ...
    shape: tuple[int, ...]
    file: str  # shard file name inside the model folder

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return (self.numel * SAFETENSORS_DTYPE_BITS[self.dtype] + 7) // 8

    @property
    def component(self) -> Component:
        return component_of(self.name)

    @property
    def layer(self) -> int | None:
        """Decoder layer index for text decoder (and MTP) tensors; None for everything else."""
        if self.component not in ("decoder", "mtp"):
            return None
        m = _LAYER_RE.search(self.name)
        return int(m.group(1)) if m else None


def component_of(name: str) -> Component:
    parts = name.split(".")
    if any(p.startswith("mtp") for p in parts):
        return "mtp"
    if any(p in _VISION_PARTS or p.startswith("vision") for p in parts):
        return "vision"
    if any(p in _EMBED_PARTS for p in parts):
        return "embed_tokens"
    if "lm_head" in parts:
        return "lm_head"
    return "decoder"


@dataclass(frozen=True)
class Checkpoint:
    """A model folder's config and tensor headers, read without loading any tensor."""

    path: Path
    config: dict[str, Any]
    tensors: dict[str, TensorInfo]
    files: tuple[str, ...]
    index_weight_map: dict[str, str] | None = None  # from model.safetensors.index.json
    hf_quant_config: dict[str, Any] | None = None  # modelopt's hf_quant_config.json
    text_section: dict[str, Any] | None = field(default=None, repr=False)  # `text_config`

    @property
    def text_config(self) -> dict[str, Any]:
        """The language model's config (`text_config` in multimodal configs, else the top)."""
        return self.text_section if self.text_section is not None else self.config

    @property
    def text_config_prefix(self) -> str:
        return "" if self.text_section is None else "text_config."

    def bytes_by_component(self) -> dict[str, int]:
        out: dict[str, int] = dict.fromkeys(COMPONENTS, 0)
        for t in self.tensors.values():
            out[t.component] += t.nbytes
        return out

    def bytes_by_dtype(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for t in self.tensors.values():
            out[t.dtype] += t.nbytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def quantization_config(self) -> dict[str, Any] | None:
        """`quantization_config` from config.json (top level or text_config), or modelopt's
        hf_quant_config.json `quantization` block."""
        for cfg in (self.config, self.text_config):
            q = cfg.get("quantization_config")
            if isinstance(q, dict):
                return q
        if self.hf_quant_config is not None:
            q = self.hf_quant_config.get("quantization", self.hf_quant_config)
            if isinstance(q, dict):
                return {"quant_method": "modelopt", **q}
        return None
