"""vLLM's scheduler defaults by GPU (`vllm serve`'s max_num_seqs and max_num_batched_tokens)
against the releases' own `EngineArgs.get_batch_defaults`, run from each wheel with the GPU's
CUDA total and device name (what `current_platform` reports there)."""

from __future__ import annotations

import ast
import enum
import zipfile
from typing import Any

import pytest

from autotune.hardware import GPU_CATALOG
from autotune.planner.vllm import _defaults
from autotune.planner.vllm_memory import default_gpu_memory_utilization
from tests.wheels import engine_wheel_or_skip

VERSIONS = ("0.15.1", "0.19.0", "0.28.0", "0.32.0", "0.34.0")
GPUS = (
    "a100-80g",
    "h100-80g",
    "h200-141g",
    "b200-180g",
    "l40s-48g",
    "rtx-4090-24g",
    "mi300x-192g",
)


class _Platform:
    """current_platform as the release sees one GPU: its CUDA total and device name."""

    def __init__(self, total_bytes: int, name: str):
        self.total, self.name = total_bytes, name

    def get_device_total_memory(self) -> int:
        return self.total

    def get_device_name(self) -> str:
        return self.name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("is_"):  # is_tpu, is_cpu, is_xpu, ...: a GPU build
            return lambda *a, **k: False
        raise AttributeError(attr)


def _batch_defaults(version: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        tree = ast.parse(z.read("vllm/engine/arg_utils.py").decode())
    fn = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and n.name == "get_batch_defaults"
        ),
        None,
    )
    if fn is None:
        pytest.skip(f"vLLM {version} has no get_batch_defaults")
    fn.decorator_list = []  # run it as a plain function of (cls, world_size)
    body = [s for s in fn.body if not (isinstance(s, ast.ImportFrom))]
    fn.body = body
    return ast.unparse(fn)


@pytest.mark.parametrize("version", VERSIONS)
def test_serve_defaults_are_the_releases(version: str) -> None:
    src = _batch_defaults(version)
    usage = enum.Enum("UsageContext", "LLM_CLASS OPENAI_API_SERVER ENGINE_CONTEXT")
    for key in GPUS:
        gpu = GPU_CATALOG[key]
        ns: dict[str, Any] = {
            "UsageContext": usage,
            "GiB_bytes": 1 << 30,
            "current_platform": _Platform(
                gpu.runtime_memory_mib << 20, gpu.cuda_name or gpu.label
            ),
        }
        exec(src, ns)
        tokens, seqs = ns["get_batch_defaults"](None, 1)
        want = (seqs[usage.OPENAI_API_SERVER], tokens[usage.OPENAI_API_SERVER])  # type: ignore[attr-defined]
        assert _defaults(gpu.runtime_memory_mib, gpu.cuda_name or gpu.name, version) == want, (
            version,
            key,
        )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_gpu_whose_nvml_reports_no_memory_gets_the_smallest_defaults(version: str) -> None:
    """GB10 (nvml_memory=False in the catalog: its NVML states no memory total, as the public
    DGX Spark logs show): the release's own defaults at a total of 0 are the planner's."""
    gb10 = GPU_CATALOG["gb10-128g"]
    assert not gb10.nvml_memory
    usage = enum.Enum("UsageContext", "LLM_CLASS OPENAI_API_SERVER ENGINE_CONTEXT")
    ns: dict[str, Any] = {
        "UsageContext": usage,
        "GiB_bytes": 1 << 30,
        "current_platform": _Platform(0, gb10.cuda_name or gb10.label),
    }
    exec(_batch_defaults(version), ns)
    tokens, seqs = ns["get_batch_defaults"](None, 1)
    want = (seqs[usage.OPENAI_API_SERVER], tokens[usage.OPENAI_API_SERVER])  # type: ignore[attr-defined]
    assert _defaults(0, gb10.cuda_name or gb10.name, version) == want


@pytest.mark.parametrize("version", ("0.19.1", "0.20.0", "0.24.0", "0.33.0"))
def test_gpu_memory_utilization_default_is_the_releases(version: str) -> None:
    """CacheConfig's default (vllm/config/cache.py) moved from 0.9 to 0.92 at 0.20.0."""
    import re

    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        src = z.read("vllm/config/cache.py").decode()
    m = re.search(r"gpu_memory_utilization: float = Field\(default=([0-9.]+)", src)
    assert m, f"vLLM {version}: no gpu_memory_utilization default in config/cache.py"
    assert default_gpu_memory_utilization(version) == float(m.group(1))
