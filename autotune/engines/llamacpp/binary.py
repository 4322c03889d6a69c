"""Find the llama-server binary and tell which llama.cpp it is (this module does I/O; the adapter
itself stays pure).

Lookup order: $AUTOTUNE_LLAMA_SERVER (a path), then the cache `autotune engines build
llama-server` (autotune.engines.llamacpp.build; scripts/build-llama-server) fills
(`$AUTOTUNE_LLAMA_CACHE` or ~/.cache/autotune/llama-server/<version>[-cuda]/bin/llama-server,
newest supported version first, CUDA builds first when asked), then `llama-server` on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from autotune.engines.llamacpp.build import CACHE_ENV as CACHE_ENV  # re-exported
from autotune.engines.llamacpp.build import PINNED_VERSION as PINNED_VERSION  # re-exported
from autotune.engines.llamacpp.build import default_cache_root
from autotune.engines.llamacpp.flags import supported_versions
from autotune.errors import ConfigError, EngineLaunchError

BINARY_ENV = "AUTOTUNE_LLAMA_SERVER"
BUILD_ENV = "AUTOTUNE_BUILD_LLAMA"

# 0.3.36: `version: 0.5.0-dev (build 1, commit 0c1e570)`; 0.3.16: `version: 1 (4227c9b)`.
_VERSION_RE = re.compile(
    r"version: (?:\S+ \(build (?P<num>\d+), commit (?P<commit>[0-9a-f]+)\)"
    r"|(?P<num_old>\d+) \((?P<commit_old>[0-9a-f]+)\))"
)


def cache_root() -> Path:
    return default_cache_root()


def cached_binary(version: str = PINNED_VERSION, *, cuda: bool = False) -> Path | None:
    """The cached build of `version`, if the build left a complete one (its stamp file is
    written last)."""
    folder = cache_root() / (f"{version}-cuda" if cuda else version)
    path = folder / "bin" / "llama-server"
    if path.is_file() and os.access(path, os.X_OK) and (folder / "stamp").is_file():
        return path
    return None


def find_binary(*, cuda: bool | None = None) -> Path | None:
    """The llama-server to run, or None. `cuda`: True = only CUDA builds, False = only CPU
    builds, None = either (CUDA first)."""
    env = os.environ.get(BINARY_ENV)
    if env:
        path = Path(env).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(f"{BINARY_ENV}={env} is not an executable file")
        return path
    flavours = [True, False] if cuda is None else [cuda]
    for version in reversed(supported_versions()):
        for flavour in flavours:
            found = cached_binary(version, cuda=flavour)
            if found is not None:
                return found
    on_path = shutil.which("llama-server")
    return Path(on_path) if on_path else None


def build(*, cuda: bool = False, version: str = PINNED_VERSION, timeout_s: float = 7200) -> Path:
    """Run the build (autotune.engines.llamacpp.build, in a child process so its output is
    kept for the error; reuses the cache when it is current) -> the binary."""
    from autotune.engines.llamacpp import build as recipe

    argv = [
        sys.executable,
        "-I",
        recipe.__file__,
        "--version",
        version,
        *(["--cuda"] if cuda else []),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise EngineLaunchError(
            f"building llama-server {version} failed (exit {done.returncode})",
            command=argv,
            returncode=done.returncode,
            log_tail=done.stderr[-4000:],
        )
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class BinaryVersion:
    """What `llama-server --version` says, and the sdist version that vendors that commit."""

    build_number: int
    commit: str
    sdist_version: str | None  # None: a llama.cpp commit no supported sdist vendors
    cuda: bool


def parse_version_output(text: str) -> BinaryVersion:
    """Parse `llama-server --version` output (`version: 0.5.0-dev (build 1, commit 0c1e570)`,
    or `version: 1 (4227c9b)` before) and whether a CUDA device listing precedes it.

    Raises:
        ConfigError: no `version: N (commit)` line.
    """
    from autotune.engines.llamacpp._catalog import VERSIONS

    m = _VERSION_RE.search(text)
    if m is None:
        raise ConfigError(f"no 'version: N (commit)' line in llama-server --version: {text!r}")
    commit = m["commit"] or m["commit_old"]
    number = int(m["num"] or m["num_old"])
    sdist = next(
        (v for v, c in VERSIONS.items() if c.startswith(commit) or commit.startswith(c)), None
    )
    cuda = "CUDA" in text or "cuda" in text.split("built with", 1)[-1].lower()
    return BinaryVersion(number, commit, sdist, cuda)


def detect_version(binary: str | Path, *, timeout_s: float = 30) -> BinaryVersion:
    """Run `binary --version` and parse it (see parse_version_output)."""
    done = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    return parse_version_output(done.stdout + done.stderr)
