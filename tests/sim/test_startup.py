"""Startup and failure lines: SGLang's text, rendered by the adapter, read back by the adapter."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.engines.sglang import classify_failure, parse_startup
from autotune.hardware import get_gpu
from autotune.models import load_card
from autotune.planner import plan_sglang
from autotune.sim.startup import BANNER, failure_lines, launch_report
from tests.sim.conftest import AWQ, G4080, K1


def plan(cfg: dict[str, Any], version: str = "0.5.17", **kw: Any) -> Any:
    return plan_sglang(load_card(AWQ), get_gpu(G4080), cfg, version=version, **kw)


@pytest.mark.parametrize(
    ("cfg", "version", "kw", "needle", "failure"),
    [
        (
            {"mem_fraction_static": 0.3},
            "0.5.17",
            {},
            "Loaded weights leave no GPU memory",
            "kv_cache_oom",
        ),
        (
            {"mem_fraction_static": 0.3},
            "0.5.12",
            {},
            "Not enough memory. Please try",
            "kv_cache_oom",
        ),
        (
            {**K1, "max_mamba_cache_size": 200},
            "0.5.17",
            {},
            "Not enough memory. Please try",
            "kv_cache_oom",
        ),
        (
            {**K1, "enable_hierarchical_cache": True, "hicache_size": 100},
            "0.5.17",
            {"host_free_gib": 20.0},
            "Not enough host memory available",
            "host_memory",
        ),
        (
            {**K1, "mem_fraction_static": 0.99},
            "0.5.17",
            {},
            "Capture cuda graph failed",
            "graph_capture_failed",
        ),
        ({**K1, "speculative_algorithm": "NEXTN"}, "0.5.17", {}, "needs MTP weights", "crash"),
        (
            {**K1, "enable_hierarchical_cache": True, "hicache_size": 12},
            "0.5.12",
            {"host_free_gib": 100.0},
            "HiCache with a hybrid (mamba) model is unsupported",
            "crash",
        ),
    ],
)
def test_failure_text_is_classified_by_the_adapter(
    cfg: dict[str, Any], version: str, kw: dict[str, Any], needle: str, failure: str
) -> None:
    p = plan(cfg, version, **kw)
    assert not p.fits
    text = "\n".join(failure_lines(p, version, cfg, get_gpu(G4080).memory_gib))
    assert needle in text, text
    assert (
        classify_failure(f"[2026-01-01 00:00:00] {BANNER}\n{text}", 1, was_ready=False).cls.value
        == failure
    )


def test_launch_report_round_trips_through_the_parser() -> None:
    from autotune.engines.sglang import format_startup_lines

    cfg = {**K1, "enable_hierarchical_cache": True, "hicache_size": 12}
    p = plan(cfg, host_free_gib=100.0)
    rep = launch_report(p, cfg, hybrid=True)
    back = parse_startup("\n".join(format_startup_lines("0.5.17", rep)))
    assert back.kv_pool_tokens == p.kv_pool_tokens == 356245
    assert back.mamba_slots == 6 and back.max_running_requests == 2
    assert back.host_pool_tokens == p.host_pool_tokens
