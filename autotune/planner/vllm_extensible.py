"""vLLM 0.34.0's extensible KV cache (vllm-project/vllm#56492): the KV pool sized from the memory
measured after warmup and CUDA-graph capture instead of from the profiling run's estimate (read
from the 0.34.0 wheel):

- config/vllm.py `_resolve_extensible_kv_cache`: on by default on CUDA and ROCm, off with
  `kv_cache_memory_bytes` or `num_gpu_blocks_override`, under elastic EP, or with a KV connector
  that shares the cache through legacy CUDA IPC or its own memory pool; `--no-enable-extensible-
  kv-cache` turns it off.
- config/cache.py `resolved_gpu_memory_utilization`: an unset `gpu_memory_utilization` is 1.0
  with it, 0.92 without; v1/worker/utils.py `request_memory` skips the free-memory startup check
  with it (the budget is only a cap).
- v1/worker/gpu_worker.py `determine_available_memory` still profiles, without the CUDA-graph
  estimate (gpu/model_runner.py `profile_cudagraph_memory` returns 0): requested - weights -
  profiled peak - non-torch memory is only the reserved capacity ("Available KV cache memory").
- v1/worker/extensible_kv_cache.py `measure_kv_cache_bytes`, after warmup and capture:
  min(requested - non-KV memory, free + committed - margin) - transient peak, where the non-KV
  memory is what the engine holds since its first snapshot (weights, non-torch memory, graphs),
  margin = max(1 GiB, or 3 GiB on ROCm; 0.75 x the transient peak), and the transient peak is
  the profiled activation peak (`peak_activation_memory`) or a larger one warmup records.
  core/kv_cache_planning.py `finalize_extensible_kv_cache` keeps the smaller of that and the
  capacity.
"""

from __future__ import annotations

from typing import Any

from autotune.engines.vllm.releases import EXTENSIBLE_KV_CACHE_SINCE
from autotune.hardware.gpus import GPUSpec
from autotune.planner.vllm_history import at_least

EXTENSIBLE_SINCE = EXTENSIBLE_KV_CACHE_SINCE
# extensible_kv_cache.py KV_CACHE_MARGIN_FLOOR_BYTES (ROCr maps kernel scratch outside the
# allocator, so ROCm keeps a larger floor) and KV_CACHE_MARGIN_FRACTION.
MARGIN_FLOOR_GIB = {"nvidia": 1.0, "amd": 3.0}
MARGIN_FRACTION = 0.75
# KV_CACHE_NON_TORCH_RESERVE_BYTES: what measure_kv_cache_blocks keeps free beside torch's cap
NON_TORCH_RESERVE_GIB = {"nvidia": 0.5, "amd": 1.0}
# measure_kv_cache_blocks warns when an explicit 0.7 < gpu_memory_utilization < 1.0 keeps this
# much or more of the free memory out of the cache
WITHHELD_WARNING_GIB = 1.0
# config/cache.py CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION (without the extensible cache)
FIXED_UTILIZATION = 0.92
# config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE: 16 through 0.33.x, 64 from 0.34.0 (a backend
# that cannot take it picks its own: platforms/interface.py update_block_size_for_backend)
BLOCK_SIZE_64_SINCE = "0.34.0"


def extensible_kv_cache(cfg: dict[str, Any], version: str, gpu: GPUSpec) -> bool:
    """Whether a launch of vLLM `version` sizes its KV cache after warmup."""
    if not at_least(version, EXTENSIBLE_SINCE) or gpu.vendor not in MARGIN_FLOOR_GIB:
        return False
    if cfg.get("kv_cache_memory_bytes") or cfg.get("num_gpu_blocks_override"):
        return False
    if cfg.get("enable_elastic_ep"):
        return False
    flag = cfg.get("enable_extensible_kv_cache")
    return True if flag is None else bool(flag)


def default_block_size(version: str) -> int:
    """CacheConfig.DEFAULT_BLOCK_SIZE of the release."""
    return 64 if at_least(version, BLOCK_SIZE_64_SINCE) else 16


def measured_kv_gib(
    *,
    requested_gib: float,
    init_free_gib: float,
    resident_gib: float,
    transient_gib: float,
    vendor: str,
) -> float:
    """measure_kv_cache_bytes: the KV memory after warmup, from what the engine holds beside the
    cache (`resident_gib`: weights, non-torch memory, graphs) and its transient peak."""
    margin = max(MARGIN_FLOOR_GIB.get(vendor, 1.0), transient_gib * MARGIN_FRACTION)
    free = init_free_gib - resident_gib
    return max(min(requested_gib - resident_gib, free - margin) - transient_gib, 0.0)


def withheld_gib(
    utilization: float | None,
    *,
    requested_gib: float,
    init_free_gib: float,
    resident_gib: float,
    transient_gib: float,
    vendor: str,
) -> float | None:
    """What measure_kv_cache_blocks' warning says an explicit utilisation keeps out of the
    cache (against a budget of all free memory), or None where it does not warn."""
    if utilization is None or not 0.7 < utilization < 1.0:
        return None

    def kv(budget: float) -> float:
        return measured_kv_gib(
            requested_gib=budget,
            init_free_gib=init_free_gib,
            resident_gib=resident_gib,
            transient_gib=transient_gib,
            vendor=vendor,
        )

    unbound, capped = kv(init_free_gib), kv(requested_gib)
    held = unbound - capped
    return held if held >= WITHHELD_WARNING_GIB else None


__all__ = [
    "EXTENSIBLE_SINCE",
    "default_block_size",
    "extensible_kv_cache",
    "measured_kv_gib",
    "withheld_gib",
]
