"""Model cards: the architecture facts the planner, simulator and kernel tuner need."""

from autotune.models.builtin import BUILTIN_CARDS
from autotune.models.card import (
    LinearAttention,
    ModelCard,
    Quantization,
    VisionTower,
    WeightBytes,
)
from autotune.models.registry import load_card

__all__ = [
    "BUILTIN_CARDS",
    "LinearAttention",
    "ModelCard",
    "Quantization",
    "VisionTower",
    "WeightBytes",
    "load_card",
]
