"""The simulated machine's allocation: the KV pool the simulated engine actually gets, apart from
the planner's prediction.

A real launch lands a few percent off the planner's KV pool: the machine's driver, CUDA context
and libraries take their own share before the weights (the planner assumes one figure per GPU
model), and the caching allocator holds more than the checkpoint's bytes once the weights are in.
The simulator models one such machine per GPU: a systematic share drawn once from the GPU's name
(the same simulated machine for every launch of a sweep, as a real box would be), plus a jitter
per launch from the launch's seed. The engine then sizes its pool from what is left by its own
rule: SGLang's (the mem-fraction rule, the mamba pool, the cell and page; the rules the planner
checks against SGLang's wheels) on the memory this machine has left; vLLM fits whole blocks into
the available KV memory. A sweep's correction from parsed startup lines is so
exercised: the first launches must pull the planner's later predictions toward what the engine
printed, which a simulator sized by the planner itself could never show.

`deviation` scales the machine's shares (0: allocate exactly as the planner predicts); the
launch-to-launch jitter never grows past the few MiB a real machine shows.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.hardware.gpus import GPUSpec
from autotune.models.card import ModelCard
from autotune.planner.sglang import Plan, plan_sglang
from autotune.planner.vllm import VLLMPlan

GIB = 1024**3
# The machine's share beyond the planner's assumption (MiB before weights; share of the weights
# the allocator holds beyond the checkpoint) and the jitter of one launch: free memory differs by
# a few MiB from launch to launch (FIELD-NOTES C1: 356,237 tokens logged, 8 off the plan).
EXTRA_CONTEXT_MIB = (100.0, 700.0)
FRAGMENTATION = (0.003, 0.015)
JITTER_MIB = 8.0


@dataclass(frozen=True)
class Machine:
    """What this simulated machine takes beyond the planner's figures, for one launch."""

    extra_context_gib: float  # before the weights (driver, context, libraries)
    fragmentation: float  # share of the weights held beyond their bytes

    @property
    def is_exact(self) -> bool:
        """No share beyond the planner's: the pool exactly as planned."""
        return self.extra_context_gib == 0 and self.fragmentation == 0

    def describe(self) -> str:
        return (
            f"sim: machine takes {self.extra_context_gib * 1024:.0f} MiB beyond the planner's "
            f"reserve and {self.fragmentation:.2%} beyond the weights"
        )


def machine(gpu: GPUSpec, seed: int, deviation: float = 1.0) -> Machine:
    """The machine of `gpu` (systematic, from its name) at the launch `seed` (jitter)."""
    box = random.Random(f"autotune-sim-machine:{gpu.name}")
    extra = box.uniform(*EXTRA_CONTEXT_MIB)
    frag = box.uniform(*FRAGMENTATION)
    # The launch-to-launch noise is the machine's own (a few MiB, FIELD-NOTES C1), not a share
    # the deviation scales up: a machine far off the planner is not noisier from launch to
    # launch. A deviation below 1 shrinks it with the shares (0: exact, no noise).
    noise = JITTER_MIB * min(deviation, 1.0)
    jitter = random.Random(f"autotune-sim-launch:{seed}").uniform(-noise, noise)
    return Machine(
        extra_context_gib=max(extra * deviation + jitter, 0.0) / 1024,
        fragmentation=frag * deviation,
    )


def allocate_sglang(
    plan: Plan,
    m: Machine,
    card: ModelCard,
    gpu: GPUSpec,
    config: Mapping[str, Any],
    *,
    version: str,
    tp: int = 1,
    gpu_free_gib: float | None = None,
    host_free_gib: float | None = None,
) -> Plan:
    """The launch `plan` predicts, as this machine's SGLang allocates it: free memory before the
    weights less the machine's share (unless measured: `gpu_free_gib`), the weights plus what
    the allocator holds beyond them, then SGLang's own rules on what is left (`rest = pre x mfs
    - weights - comm`, the mamba pool, the KV cell and page: plan_sglang at that free memory,
    with the weights' extra taken from it). The startup lines show the machine's free memory
    and weights."""
    if not plan.fits or plan.kv_pool_tokens <= 0 or m.is_exact:
        return plan
    pre = plan.pre_weights_free_gib - (0.0 if gpu_free_gib is not None else m.extra_context_gib)
    extra_weights = plan.weights_gib * m.fragmentation
    got = plan_sglang(
        card,
        gpu,
        dict(config),
        version=version,
        tp=tp,
        gpu_free_gib=pre - extra_weights / plan.mem_fraction_static,
        host_free_gib=host_free_gib,
    )
    if not got.fits:
        return got
    return got.model_copy(
        update={
            "pre_weights_free_gib": round(pre, 3),
            "weights_gib": round(plan.weights_gib + extra_weights, 3),
        }
    )


def allocate_vllm(plan: VLLMPlan, m: Machine) -> VLLMPlan:
    """The plan as this machine's vLLM allocates it: "Available KV cache memory" less the
    machine's non-torch share and the weights it holds beyond their bytes; whole blocks of it."""
    if not plan.fits or plan.num_gpu_blocks <= 0 or plan.kv_cache_gib <= 0 or m.is_exact:
        return plan
    kv = plan.kv_cache_gib - m.extra_context_gib - plan.weights_gib * m.fragmentation
    scale = max(kv, 0.0) / plan.kv_cache_gib
    blocks = int(plan.num_gpu_blocks * scale)
    return plan.model_copy(
        update={
            "kv_cache_gib": round(max(kv, 0.0), 3),
            "num_gpu_blocks": blocks,
            "kv_pool_tokens": int(plan.kv_pool_tokens * blocks / plan.num_gpu_blocks),
            "max_concurrency": round(plan.max_concurrency * blocks / plan.num_gpu_blocks, 2),
            "weights_gib": round(plan.weights_gib * (1 + m.fragmentation), 3),
        }
    )
