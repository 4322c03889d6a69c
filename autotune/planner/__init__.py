"""The VRAM planner (and, in `perf`, the roofline performance model)."""

from autotune.planner.sglang import DEFAULT_RESERVE_MIB, Plan, plan_sglang

__all__ = ["DEFAULT_RESERVE_MIB", "Plan", "plan_sglang"]
