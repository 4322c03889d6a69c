"""planner.sglang_alloc against the SGLang releases: parameters are built on the GPU one tensor
at a time (the loader initialises the model under the target device), and the rotary cache's
dtype by platform."""

from __future__ import annotations

import zipfile

import pytest

from tests.wheels import engine_wheel_or_skip


def _source(version: str, *paths: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("sglang", version)) as z:
        names = set(z.namelist())
        return next(z.read(p).decode() for p in paths if p in names)


@pytest.mark.parametrize("version", ["0.4.2.post1", "0.4.3.post4", "0.5.9", "0.5.19"])
def test_model_is_built_on_the_device(version: str) -> None:
    src = " ".join(_source(version, "sglang/srt/model_loader/loader.py").split())
    assert "target_device = torch.device(device_config.device)" in src
    assert "with target_device: model = _initialize_model(" in src


@pytest.mark.parametrize(
    ("version", "hip_fp32"),
    [
        ("0.4.2.post1", False),
        ("0.4.3.post4", False),
        ("0.5.9", False),
        ("0.5.19", False),
        ("0.5.21", False),
        ("0.5.22", True),
        ("0.5.23", True),
    ],
)
def test_rotary_cache_stays_fp32_on_cuda(version: str, hip_fp32: bool) -> None:
    """sglang_alloc.rope_cache_bytes: the cos/sin cache is cast to the model dtype only where
    the release's condition excludes the platform (CUDA never; ROCm until 0.5.22)."""
    src = _source(
        version,
        "sglang/srt/layers/rotary_embedding/base.py",
        "sglang/srt/layers/rotary_embedding.py",
    )
    lines = [ln.strip() for ln in src.splitlines()]
    note = next(i for i, ln in enumerate(lines) if "cache needs to be in FP32" in ln)
    line = next(ln for ln in lines[note:] if ln.startswith("if not"))
    assert "_is_cuda" in line
    assert ("_is_hip" in line) is hip_fp32
