"""Shared helpers for the simulated engine's tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.hardware import get_gpu
from autotune.models import load_card
from autotune.planner import plan_sglang
from autotune.planner.perf import PerfModel
from autotune.sim.records import SimRequest
from autotune.sim.scheduler import Scheduler

AWQ = "qwen3.8-27b-awq-int4"
G4080 = "rtx-4080-super-32g"
# FIELD-NOTES K1 (without HiCache): the calibration configuration.
K1: dict[str, Any] = dict(
    kv_cache_dtype="fp8_e4m3",
    page_size=1,
    context_length=131072,
    max_running_requests=2,
    mem_fraction_static=0.92,
    max_mamba_cache_size=6,
)


def make_sched(
    cfg: dict[str, Any], card: str = AWQ, gpu: str = G4080, seed: int = 0, noise: float = 0.0
) -> Scheduler:
    c, g = load_card(card), get_gpu(gpu)
    plan = plan_sglang(c, g, cfg, version="0.5.17", host_free_gib=200.0)
    assert plan.fits, plan.reasons
    return Scheduler(plan, PerfModel(c, g, plan, config=cfg), config=cfg, seed=seed, noise=noise)


def ids(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**31, n, dtype=np.int64)


def run(sched: Scheduler, reqs: list[SimRequest], fuse: bool = False) -> list[Any]:
    """Submit all at once and step until done; returns the step results."""
    for r in reqs:
        sched.submit(r)
    steps = []
    while sched.has_work():
        res = sched.step(fuse=fuse)
        if res is None:
            nxt = sched.next_ready_time()
            assert nxt is not None, "scheduler blocked with nothing to run"
            sched.advance_to(nxt)
            continue
        steps.append(res)
    return steps
