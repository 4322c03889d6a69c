"""Cards for public models from committed config.json values (`autotune/data/model_configs/`):
the planner can price a model whose weights are not on this machine. Each file names the
config.json it copies (`source`), may say where its values were read (`read_from`: a public
copy, when the Hugging Face page itself was out of reach) and add a `note`, and, for quantized
checkpoints, may state the loaded bytes per part (`loaded_bytes`).

A launch that overrides the model's config (SGLang's `--json-model-override-args`) gets the card
built again from the committed config with the overrides merged as the engine merges them
(autotune.models.hf.overrides); its bytes are then counted from the shapes, not taken from the
stated loaded bytes (those are the whole checkpoint's)."""

from __future__ import annotations

import json
from collections.abc import Mapping
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


def read_card(name: str, text: str, overrides: Mapping[str, Any] | None = None) -> ModelCard:
    """One card file: `name` for messages, `text` its YAML; `overrides` merged into its config
    as the engine merges a launch's (module docstring)."""
    from autotune.models.hf.config_card import card_from_config
    from autotune.models.hf.overrides import override_config

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
    config = data["config"]
    if overrides:
        config, loaded = override_config(config, overrides), None
    card = card_from_config(config, name=data["model"], source=data["source"], loaded_bytes=loaded)
    notes = [card.notes]
    if overrides:
        notes.append(f"config overridden by the launch: {json.dumps(dict(overrides))}")
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
def _committed() -> dict[str, tuple[ModelCard, str, str]]:
    """Every committed card by Hugging Face id, with its file's label and YAML (read once)."""
    root = resources.files("autotune").joinpath(_FOLDER)
    cards: dict[str, tuple[ModelCard, str, str]] = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            label, text = f"autotune/{_FOLDER}/{entry.name}", entry.read_text(encoding="utf-8")
            card = read_card(label, text)
            cards[card.name] = (card, label, text)
    return cards


def config_cards() -> dict[str, ModelCard]:
    """Every committed config card by Hugging Face id."""
    return {name: entry[0] for name, entry in _committed().items()}


def _key(model_id: str) -> str | None:
    cards = _committed()
    if model_id in cards:
        return model_id
    return {k.lower(): k for k in cards}.get(model_id.lower())


def config_card(model_id: str, overrides: Mapping[str, Any] | None = None) -> ModelCard | None:
    """The committed card for a Hugging Face id (case-insensitive), or None; with `overrides`,
    built again from its config with them merged (module docstring)."""
    key = _key(model_id)
    if key is None:
        return None
    card, label, text = _committed()[key]
    return read_card(label, text, overrides) if overrides else card


def card_with_overrides(card: ModelCard, value: object) -> ModelCard:
    """`card` as the engine builds the model after a launch's `--json-model-override-args`
    (`value`: its JSON text or a mapping; None or "{}": the card as it is).

    Raises:
        ConfigError: overrides for a card without a committed config.json (a built-in card or
            a model folder), or overrides the engine's merge cannot be followed through.
    """
    from autotune.models.hf.overrides import FIELD, parse_overrides

    overrides = parse_overrides(value)
    if not overrides:
        return card
    key = _key(card.name)
    committed = _committed()[key] if key is not None else None
    if committed is None or committed[0] != card:
        raise ConfigError(
            f"the launch overrides {card.name}'s config ({', '.join(overrides)}); only a card "
            "with a committed config.json (autotune/data/model_configs) is rebuilt with them",
            field=FIELD,
        )
    return read_card(committed[1], committed[2], overrides)
