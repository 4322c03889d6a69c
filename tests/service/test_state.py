"""The state folder: created owner-only, refused when others can write it, one `autotune
serve` at a time."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.service.state import StateDir, hold_serve_lock


def test_created_owner_only(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path / "s")
    assert stat.S_IMODE(state.root.stat().st_mode) == 0o700
    assert (state.root / "logs").is_dir() and (state.root / "specs").is_dir()


def test_writable_by_others_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        StateDir.open(shared)


def test_one_service_per_state_folder(tmp_path: Path) -> None:
    state = StateDir.open(tmp_path / "s")
    with hold_serve_lock(state):
        assert state.serve_lock.read_text() == str(os.getpid())
        with pytest.raises(ConfigError, match=f"another autotune serve \\(pid {os.getpid()}\\)"):
            with hold_serve_lock(state):
                pass
    with hold_serve_lock(state):  # released with the first
        pass
