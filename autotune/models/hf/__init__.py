"""Model cards from a local Hugging Face model folder: `config.json` + safetensors headers.

Tensors are never loaded: each shard is opened with the safetensors library, which reads only the
header (names, dtypes, shapes). Weight bytes are shape x dtype size per tensor, summed per
component (embed_tokens, lm_head, decoder layers, MTP, vision), so packed int32 weights count 4
bytes per element and scales count at their own dtype.

Qwen3.5 multimodal configs nest the text model under `text_config` (with `vision_config` beside
it); Qwen3-Next / Qwen3.5 hybrid layer types follow SGLang's rule, layer l is full attention iff
(l+1) % full_attention_interval == 0 (reference/sglang-internals.md §6). Vision tower and MTP
presence come from the tensors, not the config: community packs drop both (FIELD-NOTES F2, P6).

    tensors.py       TensorInfo, Checkpoint, safetensors dtypes, the component of a tensor
    reading.py       read_checkpoint(): config.json, safetensors headers, the shard index
    fields.py        typed config fields; full-attention layers, linear attention, dtype
    quantization.py  quantization_config -> the card's Quantization
    cards.py         card_from_dir(): the ModelCard; MTP layers and vision tower present
"""

from autotune.models.hf.cards import card_from_dir, mtp_layers_present
from autotune.models.hf.fields import full_attention_layers
from autotune.models.hf.quantization import quantization_from_config
from autotune.models.hf.reading import read_checkpoint
from autotune.models.hf.tensors import (
    COMPONENTS,
    FLOAT_DTYPES,
    FP8_DTYPES,
    SAFETENSORS_DTYPE_BITS,
    Checkpoint,
    Component,
    TensorInfo,
    component_of,
)

__all__ = [
    "COMPONENTS",
    "FLOAT_DTYPES",
    "FP8_DTYPES",
    "SAFETENSORS_DTYPE_BITS",
    "Checkpoint",
    "Component",
    "TensorInfo",
    "card_from_dir",
    "component_of",
    "full_attention_layers",
    "mtp_layers_present",
    "quantization_from_config",
    "read_checkpoint",
]
