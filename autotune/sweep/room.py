"""The planner's room seed: the configuration that holds the most of the workload at once, by the
planner's memory accounting alone (never its speed model), queued after the baseline and the
known-good seeds.

What people tune first by hand is room: raise the memory fraction until the engine no longer
starts, store the KV cache in fp8, size the mamba slots and the host cache (FIELD-NOTES C1: six
mamba slots freed room for 356K KV tokens instead of 184K). The planner knows each of these
exactly, for free, so the first launches need not find them by sampling. Room is counted as the
requests whose longest context fits at once (up to the workload's concurrency; the mamba slots
and the request cap bound it too), then as tokens while that is short of the concurrency; the
host cache counts only where the workload reuses prefixes across turns (agent sessions). A
single-stream workload the defaults already hold gets no room seed. Coordinate ascent over the memory knobs from the
defaults, every step through the gate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.space.models import SearchSpace
    from autotune.sweep.planning import TrialPlanner

# The knobs that move room, in the order people turn them.
ROOM_KNOBS = (
    "mem_fraction_static",
    "kv_cache_dtype",
    "max_mamba_cache_size",
    "enable_hierarchical_cache",
    "hicache_ratio",
    "hicache_size",
    "gpu_memory_utilization",  # vLLM's memory fraction
)


def room(
    plan: Mapping[str, Any], *, concurrency: int, need_tokens: int, host_counts: bool
) -> tuple[float, float]:
    """(requests held at once, tokens held) of a plan; tokens count while the workload's
    requests do not all fit yet, or where prefixes come back (agent sessions): beyond that,
    more room buys nothing."""
    kv = float(plan.get("kv_pool_tokens") or 0)
    host = float(plan.get("host_pool_tokens") or 0) if host_counts else 0.0
    tokens = kv + host
    held = min(float(concurrency), tokens / max(need_tokens, 1))
    for cap in (plan.get("mamba_slots"), plan.get("max_running_requests")):
        if isinstance(cap, int | float) and cap > 0:
            held = min(held, float(cap))
    held = math.floor(held)
    return held, tokens if host_counts or held < concurrency else 0.0


def room_config(
    space: SearchSpace,
    planner: TrialPlanner,
    *,
    concurrency: int,
    host_counts: bool,
    complete: Any = None,
) -> dict[str, Any] | None:
    """The defaults with the memory knobs moved to where the planner sees the most room, or
    None when nothing beats the defaults (or nothing fits). `complete(config)` fills what the
    rules demand (seeding.complete_by_rules)."""

    def score(config: Mapping[str, Any]) -> tuple[float, float] | None:
        a = planner.assess(config)
        if not a.fits or not a.plan:
            return None
        return room(
            a.plan, concurrency=concurrency, need_tokens=planner.need_tokens,
            host_counts=host_counts,
        )  # fmt: skip

    base = dict(space.defaults())
    best, best_score = base, score(base) or (-1.0, -1.0)
    for _ in range(2):  # a second pass: a knob's best value can depend on a later one
        for name in ROOM_KNOBS:
            p = space.parameters.get(name)
            if p is None:
                continue
            for value in _values(p):
                cand = dict(space.resolve({**best, name: value}))
                if complete is not None:
                    cand = complete(cand)
                s = score(cand)
                if s is not None and s > best_score:
                    best, best_score = cand, s
    return None if best == base else best


def _values(p: Any) -> Sequence[Any]:
    try:
        return list(p.grid_values())
    except ConfigError:  # a continuous range: its ends
        return [p.low, p.high]
