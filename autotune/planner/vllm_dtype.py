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
- `--dtype auto` on a float32 checkpoint (config _resolve_auto_dtype, 0.9.1 on): the
  platform's preferred dtype, the first of its supported_dtypes: bfloat16 on CUDA from compute
  capability 8.0 (platforms/cuda.py), float16 on 6.x/7.x, bfloat16 elsewhere (the interface
  default). Releases before it (0.6.4, 0.7.1, 0.8.5, 0.9.0.1 config.py
  _get_and_verify_dtype) downcast to float16 (0.7.1: Gemma 2 to bfloat16).

And the KV cache dtype a quantized checkpoint declares (the card's quantization.kv_cache_dtype),
which vLLM takes in place of the model's dtype, per release (checkpoint_kv_dtype):

- compressed-tensors `kv_cache_scheme`: Attention.__init__ sets the layer's and the cache
  config's dtype to "fp8" when the quant config has a scheme, from 0.15.0 (vllm/attention/
  layer.py; 0.14.1 has no such branch) over whatever --kv-cache-dtype says; from 0.22.0 only when
  it is "auto" (an explicit choice wins; 0.21.0 still overrides it). MLAAttention has no such
  branch, so a latent-attention model keeps --kv-cache-dtype.
- modelopt `kv_cache_quant_algo` (or `kv_cache_scheme`): EngineArgs.create_engine_config
  resolves "auto" through resolve_kv_cache_dtype_string, from 0.14.0 (absent in 0.13.0): FP8 to
  "fp8_e4m3", and NVFP4 to "nvfp4" from 0.20.0 (before, an unknown algorithm: "auto").
"""

from __future__ import annotations

import re
from typing import Any

from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner.vllm_history import at_least
from autotune.versions import Version

COMPRESSED_KV_SINCE = "0.15.0"  # Attention.__init__ honours kv_cache_scheme
COMPRESSED_KV_AUTO_ONLY_SINCE = "0.22.0"  # ... only when --kv-cache-dtype is auto
MODELOPT_KV_SINCE = "0.14.0"  # resolve_kv_cache_dtype_string
MODELOPT_NVFP4_KV_SINCE = "0.20.0"  # MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP gains nvfp4

# --dtype's names (vllm/config/model.py _STR_DTYPE_TO_TORCH_DTYPE) as the card's dtype names.
DTYPE_NAMES = {
    "float32": "float32",
    "float": "float32",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
}


# The release whose _resolve_auto_dtype first takes the platform's preferred dtype for float32
# (checked in the 0.9.1 and 0.10.0 wheels; 0.7.1's, 0.8.5's and 0.9.0.1's
# _get_and_verify_dtype still pick float16).
PREFERRED_DTYPE_SINCE = Version("0.9.1")
# Until then float16, but Gemma 2 kept bfloat16 up to 0.7.3 (config.py _get_and_verify_dtype:
# `if config.model_type == "gemma2"`; gone from 0.8.0's).
GEMMA2_BF16_BEFORE = Version("0.8.0")


def auto_dtype(card: ModelCard, version: str | None, arch: str | None) -> str:
    """The dtype `--dtype auto` serves `card` in: its own, but a float32 checkpoint is
    downcast (module docstring). `arch` is the GPU's sm_XY (or gfx) name."""
    if card.dtype != "float32":
        return card.dtype
    if version is not None and Version(version) < PREFERRED_DTYPE_SINCE:
        gemma2 = card.architecture.startswith("Gemma2") and Version(version) < GEMMA2_BF16_BEFORE
        return "bfloat16" if gemma2 else "float16"
    match = re.fullmatch(r"sm_(\d+)", arch or "")
    if match and int(match.group(1)) < 80:
        return "float16"
    return "bfloat16"


def launch_card(
    card: ModelCard,
    cfg: dict[str, Any],
    assumptions: list[str],
    *,
    version: str | None = None,
    arch: str | None = None,
) -> ModelCard:
    """`card` as the launch in `cfg` loads it (module docstring); unchanged without --dtype,
    online fp8 or a float32 checkpoint."""
    dtype, label = cfg.get("dtype"), None
    if str(dtype or "auto") == "auto" and card.dtype == "float32":
        dtype = auto_dtype(card, version, arch)
        label = f"--dtype auto on a float32 checkpoint: served in {dtype}"
    card = with_dtype(card, dtype, assumptions, label)
    if cfg.get("quantization") == "fp8" and card.quantization.scheme == "none":
        card = _online_fp8(card)
        assumptions.append(
            "online --quantization fp8: linear and MoE weights kept at one byte each, the "
            "embedding and LM head in the model's dtype"
        )
    return card


def with_dtype(
    card: ModelCard, dtype: object, assumptions: list[str], label: str | None = None
) -> ModelCard:
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
    assumptions.append(label or f"--dtype {dtype}: weights cast from {card.dtype} to {name}")
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


def checkpoint_kv_dtype(
    card: ModelCard, kv_dtype: str, version: str, assumptions: list[str]
) -> str:
    """The KV cache dtype vLLM `version` uses for `kv_dtype` (the launch's --kv-cache-dtype)
    given the KV cache dtype the checkpoint declares (module docstring); a change is noted."""
    q = card.quantization
    declared, fmt = q.kv_cache_dtype, q.checkpoint_format
    out = kv_dtype
    if declared is None:
        return kv_dtype
    if fmt == "compressed-tensors" and card.latent_attention is None:
        if at_least(version, COMPRESSED_KV_SINCE) and (
            kv_dtype == "auto" or not at_least(version, COMPRESSED_KV_AUTO_ONLY_SINCE)
        ):
            out = "fp8"
    elif fmt == "modelopt" and kv_dtype == "auto" and at_least(version, MODELOPT_KV_SINCE):
        if declared == "fp8":
            out = "fp8_e4m3"
        elif at_least(version, MODELOPT_NVFP4_KV_SINCE):
            out = "nvfp4"
    if out != kv_dtype:
        assumptions.append(
            f"the {fmt} checkpoint declares an {declared} KV cache: vLLM {version} stores it as "
            f"{out} (--kv-cache-dtype {kv_dtype})"
        )
    return out


def apply_checkpoint_kv(
    card: ModelCard, cfg: dict[str, Any], version: str, assumptions: list[str]
) -> None:
    """Set `cfg`'s kv_cache_dtype to what vLLM `version` stores (checkpoint_kv_dtype)."""
    launched = str(cfg.get("kv_cache_dtype") or "auto")
    if (kv := checkpoint_kv_dtype(card, launched, version, assumptions)) != launched:
        cfg["kv_cache_dtype"] = kv
