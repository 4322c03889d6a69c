"""The model as a vLLM launch loads it when `--dtype` or online `--quantization fp8` changes what
the checkpoint holds (the card describes the checkpoint as published):

- `--dtype` (ModelConfig._get_and_verify_dtype): float32 / float / float16 / half / bfloat16
  cast every unquantized weight, and `--kv-cache-dtype auto` follows the model's dtype, so a
  bf16 checkpoint served in float32 loads twice the bytes and twice the KV per token ("auto"
  keeps the checkpoint's dtype).
- `--quantization fp8` on an unquantized checkpoint (quantization/fp8.py Fp8Config.
  get_quant_method with is_checkpoint_fp8_serialized False): every LinearBase layer gets
  Fp8OnlineLinearMethod and every FusedMoE Fp8OnlineMoEMethod, which keep one byte per weight
  after loading; the embedding and the LM head (VocabParallelEmbedding, not LinearBase) stay in
  the model's dtype.
"""

from __future__ import annotations

from typing import Any

from autotune.models.card import DTYPE_BYTES, ModelCard

# --dtype's names (vllm/config/model.py _STR_DTYPE_TO_TORCH_DTYPE) as the card's dtype names.
DTYPE_NAMES = {
    "float32": "float32",
    "float": "float32",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
}


def launch_card(card: ModelCard, cfg: dict[str, Any], assumptions: list[str]) -> ModelCard:
    """`card` as the launch in `cfg` loads it (module docstring); unchanged without --dtype or
    online fp8."""
    card = _with_dtype(card, cfg.get("dtype"), assumptions)
    if cfg.get("quantization") == "fp8" and card.quantization.scheme == "none":
        card = _online_fp8(card)
        assumptions.append(
            "online --quantization fp8: linear and MoE weights kept at one byte each, the "
            "embedding and LM head in the model's dtype"
        )
    return card


def _with_dtype(card: ModelCard, dtype: object, assumptions: list[str]) -> ModelCard:
    name = DTYPE_NAMES.get(str(dtype or "auto"))
    if name is None or name == card.dtype:
        return card
    scale = DTYPE_BYTES[name] / DTYPE_BYTES.get(card.dtype, 2.0)
    w = card.weights
    parts = ["embed_tokens", "lm_head", "vision", "vision_linear"]
    if card.quantization.scheme == "none":
        parts += ["decoder", "mtp", "replicated", "attention"]
    else:
        assumptions.append(
            f"--dtype {dtype}: the quantized decoder's packed weights are kept as they are; only "
            "the embedding, LM head and vision tower are cast"
        )
    update = {p: int(getattr(w, p) * scale) for p in parts}
    assumptions.append(f"--dtype {dtype}: weights cast from {card.dtype} to {name}")
    return card.model_copy(update={"dtype": name, "weights": w.model_copy(update=update)})


def _online_fp8(card: ModelCard) -> ModelCard:
    w = card.weights
    per = DTYPE_BYTES.get(card.dtype, 2.0)
    linear = min(w.vision_linear, w.vision)
    update = {
        "decoder": int(w.decoder / per),
        "mtp": int(w.mtp / per),
        "replicated": int(w.replicated / per),
        "attention": int(w.attention / per),
        "vision": w.vision - linear + int(linear / per),
        "vision_linear": int(linear / per),
    }
    return card.model_copy(update={"weights": w.model_copy(update=update)})
