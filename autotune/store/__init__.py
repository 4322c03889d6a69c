"""The results database (sqlmodel): sweeps, trials, measurements, failures, kernel results.

Attributes are loaded on first use so that importing autotune.store (e.g. from the CLI's
command table) does not import SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.store.db import Store, mask_url
    from autotune.store.models import (
        FailureRow,
        KernelResultRow,
        MeasurementRow,
        SweepRow,
        SweepStatus,
        TrialRow,
        TrialStatus,
    )

__all__ = [
    "FailureRow",
    "KernelResultRow",
    "MeasurementRow",
    "Store",
    "SweepRow",
    "SweepStatus",
    "TrialRow",
    "TrialStatus",
    "mask_url",
]

_WHERE = {"Store": "db", "mask_url": "db"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'autotune.store' has no attribute {name!r}")
    module = importlib.import_module(f"autotune.store.{_WHERE.get(name, 'models')}")
    return getattr(module, name)
