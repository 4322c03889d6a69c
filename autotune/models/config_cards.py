"""Cards for public models from committed config.json values (`autotune/data/model_configs/`):
the planner can price a model whose weights are not on this machine. Each file names the
config.json it copies and, for quantized checkpoints, may state the loaded bytes per part."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from autotune.errors import ConfigError
from autotune.models.card import ModelCard
from autotune.yamlio import load_yaml

_FOLDER = "data/model_configs"


def _read(name: str, text: str) -> ModelCard:
    from autotune.models.hf.config_card import card_from_config

    data: Any = load_yaml(text, source=name)
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise ConfigError("a model config card is a mapping with a 'config' mapping", source=name)
    for key in ("model", "source"):
        if not isinstance(data.get(key), str):
            raise ConfigError(f"'{key}' must be a string", source=name, field=key)
    loaded = data.get("loaded_bytes") or None
    return card_from_config(
        data["config"], name=data["model"], source=data["source"], loaded_bytes=loaded
    )


@cache
def config_cards() -> dict[str, ModelCard]:
    """Every committed config card by Hugging Face id (read once)."""
    root = resources.files("autotune").joinpath(_FOLDER)
    cards: dict[str, ModelCard] = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            card = _read(f"autotune/{_FOLDER}/{entry.name}", entry.read_text(encoding="utf-8"))
            cards[card.name] = card
    return cards


def config_card(model_id: str) -> ModelCard | None:
    """The committed card for a Hugging Face id (case-insensitive), or None."""
    cards = config_cards()
    if model_id in cards:
        return cards[model_id]
    lowered = {k.lower(): v for k, v in cards.items()}
    return lowered.get(model_id.lower())
