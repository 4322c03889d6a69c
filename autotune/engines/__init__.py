"""Engine adapters: pure argv/env builders, startup-log parsers and failure classifiers.

Adapters do no I/O and hold no process state; `autotune.process` owns processes. Engines are
registered here by import path so that listing them imports nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from autotune.errors import UnknownNameError

if TYPE_CHECKING:
    from autotune.engines.base import EngineAdapter

ENGINES: dict[str, str] = {
    "sglang": "autotune.engines.sglang:SGLangAdapter",
    "vllm": "autotune.engines.vllm:VLLMAdapter",
    "llamacpp": "autotune.engines.llamacpp:LlamaCppAdapter",
}


def get_adapter(name: str) -> EngineAdapter:
    try:
        target = ENGINES[name]
    except KeyError:
        raise UnknownNameError("engine", name, ENGINES) from None
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    adapter: EngineAdapter = cls()
    return adapter
