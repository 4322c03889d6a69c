"""The shared flock helper: one holder at a time, released when the block ends (or raises)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from autotune.process.filelock import locked


def test_second_holder_waits_until_the_first_leaves(tmp_path: Path) -> None:
    path = tmp_path / "table.lock"
    events: list[str] = []

    def second() -> None:
        with locked(path):
            events.append("second in")

    with locked(path):
        assert path.exists()  # created on first use
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.3)  # give the second one time to block on the flock
        events.append("first out")
    t.join(timeout=10)
    assert not t.is_alive()
    assert events == ["first out", "second in"]


def test_released_when_the_block_raises(tmp_path: Path) -> None:
    path = tmp_path / "table.lock"
    with pytest.raises(RuntimeError, match="boom"), locked(path):
        raise RuntimeError("boom")
    t0 = time.monotonic()
    with locked(path):
        pass
    assert time.monotonic() - t0 < 5
