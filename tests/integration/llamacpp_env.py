"""Shared setup for the llama-server integration tests: the binary (cached or built on request)
and the random-weight GGUF models, or a skip that says how to get them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.engines.llamacpp.binary import (
    BINARY_ENV,
    BUILD_ENV,
    PINNED_VERSION,
    build,
    cached_binary,
)

HOW = (
    "llama-server is not built: run scripts/build-llama-server (~8 minutes on 2 idle cores; "
    f"cached under ~/.cache/autotune), set {BINARY_ENV}, or set {BUILD_ENV}=1 to build it here"
)


def llama_server() -> Path:
    """The CPU llama-server of the pinned version, or pytest.skip."""
    env = os.environ.get(BINARY_ENV)
    if env:
        return Path(env)
    found = cached_binary(PINNED_VERSION, cuda=False)
    if found is not None:
        return found
    if os.environ.get(BUILD_ENV) == "1":
        return build(cuda=False)
    pytest.skip(HOW)


def model(name: str, folder: Path) -> Path:
    """A random-weight GGUF with llama.cpp's Llama SPM tokenizer (written once per session)."""
    from autotune.testing.gguf_models import ensure_model, vocab_gguf

    vocab = vocab_gguf(fetch=os.environ.get(BUILD_ENV) == "1")
    return ensure_model(name, folder, vocab=vocab)
