"""Finding the llama-server binary and reading its version (no build needed: fake files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engines.llamacpp import binary as b
from autotune.errors import ConfigError


def _fake(folder: Path, *, stamp: bool = True) -> Path:
    exe = folder / "bin" / "llama-server"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho 'version: 1 (0c1e570)' >&2\n")
    exe.chmod(0o755)
    if stamp:
        (folder / "stamp").write_text("llama-cpp-python==0.3.36 ...\n")
    return exe


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(b.BINARY_ENV, raising=False)
    monkeypatch.setenv(b.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert b.find_binary() is None
    _fake(tmp_path / "cache" / "0.3.30", stamp=False)  # an interrupted build: no stamp
    assert b.find_binary() is None
    cpu = _fake(tmp_path / "cache" / "0.3.36")
    assert b.find_binary() == cpu == b.cached_binary("0.3.36")
    cuda = _fake(tmp_path / "cache" / "0.3.36-cuda")
    assert b.find_binary() == cuda  # CUDA builds first when either will do
    assert b.find_binary(cuda=False) == cpu
    monkeypatch.setenv(b.BINARY_ENV, str(cpu))
    assert b.find_binary(cuda=True) == cpu  # an explicit path wins
    monkeypatch.setenv(b.BINARY_ENV, str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="is not an executable file"):
        b.find_binary()


def test_version_output() -> None:
    v = b.parse_version_output("version: 1 (0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n")
    assert (v.build_number, v.commit, v.sdist_version, v.cuda) == (1, "0c1e570", "0.3.36", False)
    old = b.parse_version_output("version: 1 (4227c9b)\nbuilt with cc")
    assert old.sdist_version == "0.3.16"
    gpu = b.parse_version_output(
        "ggml_cuda_init: found 1 CUDA devices:\nversion: 1 (deadbee)\nbuilt with GNU"
    )
    assert gpu.cuda and gpu.sdist_version is None
    with pytest.raises(ConfigError, match="no 'version: N"):
        b.parse_version_output("llama-server: command not found")


def test_detect_version_runs_the_binary(tmp_path: Path) -> None:
    exe = _fake(tmp_path / "x")
    assert b.detect_version(exe).sdist_version == "0.3.36"


def test_build_recipe_pins_the_adapters_sdist() -> None:
    from autotune.engines.llamacpp import build

    assert build.PINNED_VERSION == b.PINNED_VERSION  # the recipe and the adapter pin one sdist
    assert build.Recipe().stamp.startswith(f"llama-cpp-python=={b.PINNED_VERSION} ")
    script = Path(__file__).resolve().parents[2] / "scripts" / "build-llama-server"
    assert script.is_file() and script.stat().st_mode & 0o111  # .ci/run calls it
    assert "engines build llama-server" in script.read_text()
