"""A ModelCard built from a local Hugging Face model folder: the config's architecture facts,
the weights' bytes per component, and MTP layers and vision tower as the tensors show them."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from pydantic import ValidationError

from autotune.errors import ModelLoadError
from autotune.models.card import ModelCard, VisionTower, WeightBytes, mtp_config_key
from autotune.models.hf.fields import (
    ConfigFields,
    config_dtype,
    full_attention_layers,
    linear_attention,
    rope_scaling,
)
from autotune.models.hf.quantization import quantization_from_config
from autotune.models.hf.reading import read_checkpoint
from autotune.models.hf.tensors import Checkpoint

_VISION_BLOCK_RE = re.compile(r"(?:^|\.)(?:blocks|layers)\.(\d+)\.")


def mtp_layers_present(ckpt: Checkpoint) -> int:
    """MTP layers whose weights the checkpoint holds (0 when no tensor names MTP)."""
    mtp = [t for t in ckpt.tensors.values() if t.component == "mtp"]
    if not mtp:
        return 0
    ids = {t.layer for t in mtp if t.layer is not None}
    if ids:
        return len(ids)
    declared = ckpt.text_config.get("mtp_num_hidden_layers")
    return declared if isinstance(declared, int) and declared > 0 else 1


def _vision(ckpt: Checkpoint) -> VisionTower | None:
    vt = [t for t in ckpt.tensors.values() if t.component == "vision"]
    if not vt:
        return None
    vc = ckpt.config.get("vision_config")
    vc = vc if isinstance(vc, dict) else {}
    layers = vc.get("depth", vc.get("num_hidden_layers"))
    if not isinstance(layers, int):
        ids = {int(m.group(1)) for t in vt if (m := _VISION_BLOCK_RE.search(t.name))}
        layers = len(ids)
    hidden = vc.get("hidden_size", vc.get("embed_dim"))
    if not isinstance(hidden, int):
        # No vision_config: norm weights and biases are the tower's width, the commonest 1-D size.
        widths = Counter(t.shape[0] for t in vt if len(t.shape) == 1)
        hidden = widths.most_common(1)[0][0] if widths else 0
    return VisionTower(layers=layers, hidden_size=hidden)


_DEFAULT_MAX_POS: int = ModelCard.model_fields["max_position_embeddings"].default


def card_from_dir(path: Path) -> ModelCard:
    """Build a ModelCard from a local Hugging Face model folder (config.json + safetensors
    headers). Raises ModelLoadError naming the file and field when something is wrong."""
    ckpt = read_checkpoint(Path(path))
    cfg_file = ckpt.path / "config.json"
    text = ckpt.text_config
    prefix = ckpt.text_config_prefix
    f = ConfigFields(text, cfg_file, prefix)

    num_layers = f.get_int("num_hidden_layers")
    hidden = f.get_int("hidden_size")
    heads = f.get_int("num_attention_heads")
    head_dim = f.get_int("head_dim", hidden // heads)
    dtype = config_dtype(ckpt.config, text)
    full = full_attention_layers(text, cfg_file, prefix)
    hybrid = len(full) < num_layers
    linear = linear_attention(text, cfg_file, prefix, dtype) if hybrid else None
    architecture = _architecture(ckpt)
    tie = ConfigFields(ckpt.config, cfg_file).get_bool(
        "tie_word_embeddings", f.get_bool("tie_word_embeddings", False)
    )

    try:
        return ModelCard(
            name=ckpt.path.resolve().name,
            source=str(ckpt.path.resolve()),
            architecture=architecture,
            dtype=dtype,
            num_layers=num_layers,
            hidden_size=hidden,
            intermediate_size=f.get_int("intermediate_size"),
            vocab_size=f.get_int("vocab_size"),
            num_attention_heads=heads,
            num_kv_heads=f.get_int("num_key_value_heads", heads),
            head_dim=head_dim,
            # Qwen3-Next/3.5 gate attention output (SGLang's default for these configs is on).
            attn_output_gate=f.get_bool(
                "attn_output_gate", linear is not None and linear.kind == "gated_delta_net"
            ),
            full_attention_layers=full,
            linear_attention=linear,
            max_position_embeddings=f.get_int(
                "max_position_embeddings",
                ModelCard.model_fields["max_position_embeddings"].default,
            ),
            rope_scaling=rope_scaling(f),
            tie_word_embeddings=tie,
            mtp_layers=mtp_layers_present(ckpt),
            mtp_config_key=mtp_config_key(ckpt.text_config),
            vision=_vision(ckpt),
            quantization=quantization_from_config(ckpt.quantization_config(), cfg_file),
            weights=_weight_bytes(ckpt),
            notes=f"read from {ckpt.path} ({len(ckpt.tensors)} tensors in "
            f"{len(ckpt.files)} safetensors file(s))",
        )
    except ValidationError as exc:
        raise ModelLoadError(f"{cfg_file}: inconsistent config: {exc}") from exc


def _architecture(ckpt: Checkpoint) -> str:
    """The first of config.json's `architectures`, else its model_type."""
    archs = ckpt.config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return str(ckpt.config.get("model_type") or ckpt.text_config.get("model_type") or "unknown")


def _weight_bytes(ckpt: Checkpoint) -> WeightBytes:
    """The weights' bytes per component."""
    by = ckpt.bytes_by_component()
    # Tied embeddings share one tensor: lm_head then adds no bytes of its own.
    return WeightBytes(
        embed_tokens=by["embed_tokens"],
        lm_head=by["lm_head"],
        decoder=by["decoder"],
        mtp=by["mtp"],
        vision=by["vision"],
    )
