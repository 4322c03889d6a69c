"""The VRAM planner (and, in `perf`, the roofline performance model).

`dispatch` is the one entry point per engine: plan_for (SGLang, vLLM, llama.cpp),
load_target_model (a ModelCard or a GGUF header), resolve_target_gpu (`cpu` for no GPU).
"""

from autotune.planner.common import Plan
from autotune.planner.dispatch import (
    CPU_TARGET,
    default_version,
    load_target_model,
    plan_for,
    plan_target,
    resolve_target_gpu,
    scheduler_plan,
    target_facts,
)
from autotune.planner.sglang import DEFAULT_RESERVE_MIB, plan_sglang

__all__ = [
    "CPU_TARGET",
    "DEFAULT_RESERVE_MIB",
    "Plan",
    "default_version",
    "load_target_model",
    "plan_for",
    "plan_sglang",
    "plan_target",
    "resolve_target_gpu",
    "scheduler_plan",
    "target_facts",
]
