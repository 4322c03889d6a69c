"""One SGLang NEXTN launch shared by the draft tests: the K3 flags (FIELD-NOTES K3: Qwen3.8-27B
W4A16 on two RX 7900 XTX, NEXTN 3 steps / topk 1 / 4 draft tokens) planned at a release."""

from __future__ import annotations

from autotune.hardware.gpus import GPU_CATALOG
from autotune.models.builtin import BUILTIN_CARDS
from autotune.planner.common import Plan
from autotune.planner.sglang import plan_sglang

K3_NEXTN = {
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
    "mem_fraction_static": 0.91,
    "max_mamba_cache_size": 20,
    "max_running_requests": 4,
    "page_size": 64,
}


def nextn_plan(
    version: str,
    card_name: str = "qwen3.8-27b-gptq-int4",
    host_free_gib: float | None = None,
    **cfg: object,
) -> Plan:
    """The K3 NEXTN launch (`cfg` on top) of `card_name` at TP 2 on two RX 7900 XTX."""
    card, gpu = BUILTIN_CARDS[card_name], GPU_CATALOG["rx-7900xtx-24g"]
    return plan_sglang(
        card, gpu, {**K3_NEXTN, **cfg}, version=version, tp=2, host_free_gib=host_free_gib
    )
