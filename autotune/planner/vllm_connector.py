"""KV connectors (--kv-transfer-config) on a V1 launch: what they hold on the GPU against vLLM's
KV budget.

LMCacheConnectorV1 (vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py) builds
LMCache's engine on each worker. LMCache 0.3.1.post1 .. 0.3.6 (integration/vllm/vllm_v1_adapter.py,
v1/gpu_connector.py) puts one staging tensor on the GPU there, through PyTorch's allocator:
[2 (1 with MLA), layers, chunk_size, kv heads per rank x head size] in the KV cache dtype (0.3.6
adds two CUDA streams). Its CPU pool (max_local_cpu_size, default 5 GB) is pinned host memory.

vLLM 0.9.1 .. 0.11.0 (v1/worker/gpu_worker.py) build the connector in init_device, before
load_model (after the initial MemorySnapshot up to 0.10.2, before it on 0.11.0). The budget is a
share of the total, and memory_profiling (vllm/utils) counts the weights as load_model's own
delta, the profiling run's peak above what torch holds when the run starts (reset_peak_memory_stats
first), and non-torch memory as CUDA's used memory less torch's reserved: the staging tensor is
none of these, so the KV cache is sized as without the connector and the process holds the
tensor above gpu_memory_utilization. From 0.12.0 the worker builds the connector in
initialize_from_config, after the KV cache is sized. Either way the pool's size does not move
(tests/planner/test_vllm_connector_wheels.py reads the wheels).
"""

from __future__ import annotations

import json
from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.common import MIB
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_kv import kv_element_bytes

LMCACHE_CONNECTOR = "LMCacheConnectorV1"
# LMCache's default chunk (lmcache/v1/config.py, 0.3.1.post1 .. 0.3.6); LMCACHE_CHUNK_SIZE or an
# LMCACHE_CONFIG_FILE sets another.
LMCACHE_CHUNK_SIZE = 256
# First release whose worker builds its connector after the KV cache is sized.
CONNECTOR_AFTER_PROFILING_SINCE = "0.12.0"


def kv_connector(cfg: dict[str, Any]) -> str | None:
    """The connector --kv-transfer-config names (a JSON string or a mapping), if any."""
    value = cfg.get("kv_transfer_config")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not isinstance(value, dict):
        return None
    name = value.get("kv_connector")
    return str(name) if name else None


def lmcache_buffer_bytes(
    card: ModelCard, kv_dtype: str, tp: int, chunk_size: int = LMCACHE_CHUNK_SIZE
) -> int:
    """LMCache's GPU staging tensor on one rank: VLLMPagedMemGPUConnectorV2.get_shape(chunk_size),
    with vLLM's get_num_kv_heads (max(1, heads // tp); MLA: 1) and get_head_size (MLA: the
    latent plus the rope key)."""
    mla = card.latent_attention
    if mla is not None:
        kv, width = 1, mla.kv_lora_rank + mla.qk_rope_head_dim
    else:
        kv, width = 2, max(1, card.num_kv_heads // tp) * card.head_dim
    return int(kv * card.num_layers * chunk_size * width * kv_element_bytes(card, kv_dtype))


def note_kv_connector(
    card: ModelCard,
    cfg: dict[str, Any],
    version: str,
    tp: int,
    kv_dtype: str,
    assumptions: list[str],
) -> None:
    """Say what a KV connector takes: LMCache's staging tensor, outside vLLM's KV budget."""
    name = kv_connector(cfg)
    if name is None:
        return
    if name != LMCACHE_CONNECTOR:
        assumptions.append(f"KV connector {name}: what it allocates on the GPU is not modelled")
        return
    mib = lmcache_buffer_bytes(card, kv_dtype, tp) / MIB
    when = (
        "after vLLM sizes the KV cache"
        if at_least(version, CONNECTOR_AFTER_PROFILING_SINCE)
        else "before the weights load, which vLLM's memory profiling does not count"
    )
    assumptions.append(
        f"{LMCACHE_CONNECTOR}: LMCache's GPU staging buffer ({mib:.1f} MiB a rank at its "
        f"default {LMCACHE_CHUNK_SIZE}-token chunk) is allocated {when}: the KV cache is sized "
        "as without the connector, and the buffer sits above gpu_memory_utilization"
    )
