"""Cards for public models from committed config.json values (`autotune/data/model_configs/`):
the planner can price a model whose weights are not on this machine. Each file names the
config.json it copies (`source`), may say where its values were read (`read_from`: a public
copy, when the Hugging Face page itself was out of reach) and add a `note`, and, for quantized
checkpoints, may state the loaded bytes per part (`loaded_bytes`)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from autotune.errors import ConfigError
from autotune.models.card import ModelCard
from autotune.yamlio import load_yaml

_FOLDER = "data/model_configs"
_KEYS = ("model", "source", "config", "read_from", "note", "loaded_bytes")
_REQUIRED = ("model", "source")
_COMPONENTS = ("embed_tokens", "lm_head", "decoder", "mtp", "vision", "replicated")


def read_card(name: str, text: str) -> ModelCard:
    """One card file: `name` for messages, `text` its YAML."""
    from autotune.models.hf.config_card import card_from_config

    data: Any = load_yaml(text, source=name)
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        raise ConfigError("a model config card is a mapping with a 'config' mapping", source=name)
    for key in data:
        if key not in _KEYS:
            raise ConfigError(
                f"unknown key; a card has {', '.join(_KEYS)}", source=name, field=key
            )
    for key in ("model", "source", "read_from", "note"):
        if (key in _REQUIRED or key in data) and not isinstance(data.get(key), str):
            raise ConfigError(f"'{key}' must be a string", source=name, field=key)
    loaded = _loaded_bytes(name, data.get("loaded_bytes"))
    card = card_from_config(
        data["config"], name=data["model"], source=data["source"], loaded_bytes=loaded
    )
    notes = [card.notes]
    if "read_from" in data:
        notes.append(f"values read from {data['read_from']}")
    if "note" in data:
        notes.append(data["note"].strip())
    return card.model_copy(update={"notes": "; ".join(notes)})


def _loaded_bytes(name: str, value: object) -> dict[str, int] | None:
    if not value:
        return None
    if not isinstance(value, dict):
        raise ConfigError("must map components to bytes", source=name, field="loaded_bytes")
    for part, size in value.items():
        if part not in _COMPONENTS or isinstance(size, bool) or not isinstance(size, int):
            raise ConfigError(
                f"{part!r}: {size!r}; components are {', '.join(_COMPONENTS)}, sizes integers",
                source=name,
                field="loaded_bytes",
            )
    return dict(value)


@cache
def config_cards() -> dict[str, ModelCard]:
    """Every committed config card by Hugging Face id (read once)."""
    root = resources.files("autotune").joinpath(_FOLDER)
    cards: dict[str, ModelCard] = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            card = read_card(f"autotune/{_FOLDER}/{entry.name}", entry.read_text(encoding="utf-8"))
            cards[card.name] = card
    return cards


def config_card(model_id: str) -> ModelCard | None:
    """The committed card for a Hugging Face id (case-insensitive), or None."""
    cards = config_cards()
    if model_id in cards:
        return cards[model_id]
    lowered = {k.lower(): v for k, v in cards.items()}
    return lowered.get(model_id.lower())
