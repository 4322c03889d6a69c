"""`--model CARD_OR_DIR`: a built-in card name, a local Hugging Face model folder, or the
Hugging Face id of a model with a committed config card (autotune.models.config_cards)."""

from __future__ import annotations

from pathlib import Path

from autotune.errors import ModelLoadError, UnknownNameError
from autotune.models.builtin import BUILTIN_CARDS
from autotune.models.card import ModelCard


def load_card(name_or_dir: str) -> ModelCard:
    if name_or_dir in BUILTIN_CARDS:
        return BUILTIN_CARDS[name_or_dir]
    path = Path(name_or_dir).expanduser()
    looks_like_path = (
        any(s in name_or_dir for s in ("/", "\\"))
        or name_or_dir.startswith((".", "~"))
        or path.exists()
    )
    if not path.exists():
        from autotune.models.config_cards import config_card, config_cards

        card = config_card(name_or_dir)
        if card is not None:
            return card
        if not looks_like_path:
            raise UnknownNameError("model card", name_or_dir, [*BUILTIN_CARDS, *config_cards()])
    if not path.is_dir():
        raise ModelLoadError(
            f"--model {name_or_dir}: no such model folder (and not a built-in card; built-in: "
            f"{', '.join(BUILTIN_CARDS)})"
        )
    from autotune.models.hf import card_from_dir

    return card_from_dir(path)
