"""What torch allocates beyond the model's tensors in vLLM's figures: the caching allocator's block
rounding in the weights (the rule against the H200 measurements the module cites, the per-rank
tensors of Qwen2.5-72B, the releases' reading of allocated bytes in the 0.10.1.1, 0.19.0 and
0.25.1 wheels) and cuBLAS's workspace in the profiling peak, with the public launches they
explain."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from autotune.calibration.records import load_records
from autotune.calibration.replay import replay
from autotune.hardware import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.common import MIB
from autotune.planner.vllm_alloc import (
    LOAD_MAX_SPLIT,
    VOCAB_PADDING,
    block_padding,
    cublas_workspace_bytes,
    dense_tensor_bytes,
    load_max_split,
    weight_padding_bytes,
)
from tests.wheels import engine_wheel_or_skip

VERSIONS = ("0.10.1.1", "0.19.0", "0.25.1")
RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches"


@pytest.mark.parametrize(
    ("mib", "extra_mib"),
    [(231, 1.0), (115.5, 0.5), (11.25, 0.75), (462, 0.0), (10.5, 0.0), (9, 0.0), (10, 0.0)],
)
def test_block_padding_is_the_h200_measurement(mib: float, extra_mib: float) -> None:
    assert block_padding(int(mib * MIB)) == int(extra_mib * MIB)


def test_qwen2_5_72b_per_rank_padding() -> None:
    card = config_card("moonshotai/Kimi-Dev-72B")
    assert card is not None
    # Measured: 20 layers' tensors count 20 MiB more at TP 2 and 30 MiB more at TP 4.
    assert weight_padding_bytes(card, 2, "0.19.0", "nvidia") == 80 * MIB
    assert weight_padding_bytes(card, 4, "0.19.0", "nvidia") == 120 * MIB
    sizes = dense_tensor_bytes(card, 2)
    assert len(sizes) == 2 + 4 * card.num_layers
    assert sum(sizes) == pytest.approx(card.weights.total / 2, rel=1e-3)


def test_layouts_not_modelled_add_nothing() -> None:
    moe = config_card("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert moe is not None and moe.experts is not None
    assert dense_tensor_bytes(moe, 2) == []
    assert weight_padding_bytes(moe, 2, "0.25.1", "nvidia") == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_releases_read_weights_as_allocated_bytes(version: str) -> None:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        cuda = z.read("vllm/platforms/cuda.py").decode()
        runner = z.read("vllm/v1/worker/gpu_model_runner.py").decode()
        vocab = z.read("vllm/model_executor/layers/vocab_parallel_embedding.py").decode()
        qwen2 = z.read("vllm/model_executor/models/qwen2.py").decode()
    usage = cuda[cuda.index("def get_current_memory_usage") :][:400]
    assert "reset_peak_memory_stats" in usage and "max_memory_allocated" in usage
    assert "with DeviceMemoryProfiler() as m" in runner
    assert "self.model_memory_usage = m.consumed_memory" in runner
    assert re.search(rf"^DEFAULT_VOCAB_PADDING_SIZE = {VOCAB_PADDING}$", vocab, re.M)
    # One tensor each for qkv, o, gate_up and down per layer.
    for layer in ("QKVParallelLinear(", "MergedColumnParallelLinear(", "RowParallelLinear("):
        assert layer in qwen2


@pytest.mark.parametrize(
    ("name", "tol"),
    [
        ("more-qwen2.5-72b-instruct-h100-tp2", 0.006),  # logged to 0.01 GiB
        ("repo-qwen2-7b-instruct-a100-80gb-tp1", 0.001),  # 14.2488 GiB: +57 MiB of padding
        ("repo-qwen2-7b-instruct-a100-80gb-tp2", 0.001),  # 7.1217 GiB: +21.5 MiB
    ],
)
def test_public_launches_weights(name: str, tol: float) -> None:
    record = next(r for r in load_records(RECORDS) if r.name == name)
    r = replay(record)
    assert r.plan is not None and r.observed.weights_gib is not None
    assert r.plan.weights_gib == pytest.approx(r.observed.weights_gib, abs=tol)


def test_cublas_workspace_by_architecture() -> None:
    assert cublas_workspace_bytes(get_gpu("h100-80g")) == 32 * MIB
    assert cublas_workspace_bytes(get_gpu("h200-141g")) == 32 * MIB
    assert cublas_workspace_bytes(get_gpu("a100-80g")) == 0  # not measured


_PEAK = re.compile(r"torch peak memory increase: ([\d.]+)GiB")


@pytest.mark.parametrize(
    "name",
    [
        "more-llama-3.1-8b-instruct-h100-tp2",
        "more-qwen2.5-7b-instruct-h100-tp4",
        "more-qwen2.5-72b-instruct-h100-tp2",
        "more-llama-3.3-70b-instruct-fp8-dynamic-h100-tp2",
    ],
)
def test_public_launches_torch_peak(name: str) -> None:
    """0.19.0 logs the profiling run's torch peak (a DEBUG line): the sampler phase plus the
    workspace, to the log's 0.01 GiB."""
    record = next(r for r in load_records(RECORDS) if r.name == name)
    logged = _PEAK.search(record.log)
    assert logged is not None
    r = replay(record)
    assert r.plan is not None
    assert r.plan.model_dump()["activation_gib"] == pytest.approx(float(logged[1]), abs=0.006)


@pytest.mark.parametrize(
    ("mib", "extra_mib"),
    [(20.5, 1.5), (100.25, 1.75), (231, 1.0), (462, 0.0), (12.5, 0.0), (11.25, 0.75), (19.5, 0.5)],
)
def test_block_padding_under_max_split_20(mib: float, extra_mib: float) -> None:
    """max_split_size_mb:20: a block of 20 MiB or more is not split (the allocator's
    should_split); below it the default rule."""
    assert block_padding(int(mib * MIB), LOAD_MAX_SPLIT) == int(extra_mib * MIB)


@pytest.mark.parametrize(
    ("version", "cuda", "rocm"),
    [
        ("0.20.2", False, False),
        ("0.21.0", True, False),
        ("0.30.0", True, False),
        ("0.31.0", True, True),
        ("0.32.0", True, True),
    ],
)
def test_load_max_split_is_the_releases(version: str, cuda: bool, rocm: bool) -> None:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        worker = z.read("vllm/v1/worker/gpu_worker.py").decode()
    load = worker[worker.index("def load_model") :][:600]
    scoped = "self._scoped_allocator_max_split(max_split_size_mb=20)" in load
    assert scoped == cuda
    if scoped:
        guard = worker[worker.index("def _scoped_allocator_max_split") :][:600]
        assert ("is_cuda_alike()" in guard) == rocm
    assert (load_max_split(version, "nvidia") == LOAD_MAX_SPLIT) == cuda
    assert (load_max_split(version, "amd") == LOAD_MAX_SPLIT) == rocm
