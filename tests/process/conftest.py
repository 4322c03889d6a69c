from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.process import free_port

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")
READY_LINE = "The server is fired up and ready to roll!"


@pytest.fixture
def engine_argv() -> Callable[..., tuple[list[str], int]]:
    """Build the fake engine's argv on a fresh free port: engine_argv("--spawn-child", ...)."""

    def make(*flags: str) -> tuple[list[str], int]:
        port = free_port()
        return [sys.executable, str(FAKE_ENGINE), "--port", str(port), *flags], port

    return make


def is_ready_line(line: str) -> bool:
    return READY_LINE in line
