"""The dtype an SGLang launch serves a float32 checkpoint in under `--dtype auto`
(configs/model_config.py _get_and_verify_dtype, 0.4.0 .. 0.5.23): float16 ("Following the common
practice, we use float16 for float32 models"), but bfloat16 for Gemma: from 0.4.4.post2 any
model_type starting with "gemma" (checked in the 0.4.4.post1 and 0.4.4.post2 wheels), before it
only "gemma2". The weights are cast on load and the KV cache dtype "auto" follows the model's
dtype, so a float32 card planned as published would double both. Any other checkpoint dtype is
served as it is.
"""

from __future__ import annotations

from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.vllm_dtype import with_dtype
from autotune.versions import Version

ANY_GEMMA_BF16_SINCE = Version("0.4.4.post2")


def auto_dtype(card: ModelCard, version: str) -> str:
    """The dtype `--dtype auto` serves `card` in under `version` (module docstring)."""
    if card.dtype != "float32":
        return card.dtype
    # model_type gemma, gemma2, gemma3...: the architectures GemmaForCausalLM, Gemma2...
    if Version(version) >= ANY_GEMMA_BF16_SINCE:
        gemma = card.architecture.startswith("Gemma")
    else:
        gemma = card.architecture.startswith("Gemma2")
    return "bfloat16" if gemma else "float16"


def launch_card(
    card: ModelCard, cfg: dict[str, Any], version: str, assumptions: list[str]
) -> ModelCard:
    """`card` with a float32 checkpoint's weights cast to the dtype `--dtype auto` picks; unchanged
    for any other checkpoint or an explicit --dtype (which the planner does not model here)."""
    if str(cfg.get("dtype") or "auto") != "auto" or card.dtype != "float32":
        return card
    dtype = auto_dtype(card, version)
    return with_dtype(
        card, dtype, assumptions, f"--dtype auto on a float32 checkpoint: served in {dtype}"
    )
