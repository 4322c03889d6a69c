"""Analytic mode: whole workloads in virtual time, fast enough for exhaustive sweeps."""

from __future__ import annotations

import time

import pytest

from autotune.errors import ConfigError
from autotune.sim.analytic import (
    RequestSpec,
    Workload,
    closed_loop,
    evaluate,
    multi_turn,
    open_loop,
)
from tests.sim.conftest import AWQ, G4080, K1


def test_single_stream_decode_matches_the_calibration() -> None:
    """C2: decode at 1 stream 41.4 tok/s; 2 streams 74.8 tok/s aggregate."""
    one = evaluate(AWQ, G4080, K1, closed_loop(1, 2, 128, 512), seed=1)
    assert one["fits"]
    assert 1 / one["tpot_mean_s"] == pytest.approx(41.4, rel=0.10)
    two = evaluate(AWQ, G4080, K1, closed_loop(2, 2, 128, 512), seed=1)
    assert 2 / two["tpot_mean_s"] == pytest.approx(74.8, rel=0.10)


def test_concurrency_is_capped_by_max_running_requests() -> None:
    w = closed_loop(8, 16, 256, 128)
    r2 = evaluate(AWQ, G4080, {**K1, "max_running_requests": 2}, w)
    r4 = evaluate(AWQ, G4080, {**K1, "max_running_requests": 4, "max_mamba_cache_size": 12}, w)
    assert r4["output_tok_s"] > 1.4 * r2["output_tok_s"]
    assert r2["ttft_p95_s"] > r4["ttft_p95_s"]


def test_rejected_config_reports_reasons_without_running() -> None:
    r = evaluate(AWQ, G4080, {**K1, "mem_fraction_static": 0.3}, closed_loop(1, 1, 10, 10))
    assert r["fits"] is False and r["reasons"]
    assert "output_tok_s" not in r


def test_multi_turn_sessions_hit_the_prefix_cache() -> None:
    r = evaluate(
        AWQ,
        G4080,
        {**K1, "max_mamba_cache_size": 12},
        multi_turn(sessions=2, turns=3, first_prompt_len=3000, turn_prompt_len=200, output_len=64),
    )
    turns = sorted(r["requests"], key=lambda x: x["index"])
    assert turns[0]["cached_tokens"] == 0
    assert turns[1]["cached_tokens"] == 3000 + 64 - 1
    assert turns[2]["cached_tokens"] == turns[1]["prompt_tokens"] + 64 - 1


def test_open_loop_and_explicit_requests() -> None:
    r = evaluate(AWQ, G4080, K1, open_loop(0.5, 6, 200, 32, seed=3))
    assert r["completed"] == 6
    w = Workload(
        (
            RequestSpec(prompt_ids=(1, 2, 3, 4, 5), output_len=8),
            RequestSpec(prompt_len=50, output_len=8, arrival_s=2.0),
        )
    )
    r = evaluate(AWQ, G4080, K1, w)
    assert [x["prompt_tokens"] for x in r["requests"]] == [5, 50]
    with pytest.raises(ConfigError):
        closed_loop(1, 1, 10, 10, kind="poetry")


def test_too_long_request_is_reported_not_hung() -> None:
    w = Workload((RequestSpec(prompt_len=5000, output_len=10),), concurrency=1)
    r = evaluate(AWQ, G4080, {**K1, "max_total_tokens": 4096}, w)
    assert r["completed"] == 0 and r["failed"]


def test_fast_enough_for_exhaustive_sweeps() -> None:
    w = closed_loop(4, 16, 512, 256)
    cfg = {**K1, "max_running_requests": 4, "max_mamba_cache_size": 12}
    evaluate(AWQ, G4080, cfg, w)
    t0 = time.perf_counter()
    n = 20
    for i in range(n):
        evaluate(AWQ, G4080, cfg, w, seed=i)
    per = (time.perf_counter() - t0) / n
    assert per < 0.05, f"{per * 1e3:.1f} ms per evaluation"


def test_seeded_and_deterministic() -> None:
    w = closed_loop(2, 4, 300, 100)
    a = evaluate(AWQ, G4080, K1, w, seed=5)
    b = evaluate(AWQ, G4080, K1, w, seed=5)
    c = evaluate(AWQ, G4080, K1, w, seed=6)
    assert a["output_tok_s"] == b["output_tok_s"]
    assert a["output_tok_s"] != c["output_tok_s"]
    assert a["output_tok_s"] == pytest.approx(c["output_tok_s"], rel=0.05)


def test_c3_hicache_replay() -> None:
    """C3: L1 shrunk to 32K tokens, three distinct 17.9K prompts cold at 10.2 s each; replaying
    the first restores 16,384 tokens (its last full-chunk checkpoint, P12) from host in 1.25 s."""
    import numpy as np

    rng = np.random.default_rng(1)
    a, b, c = (tuple(int(x) for x in rng.integers(0, 2**31, 17900)) for _ in range(3))
    cfg = {
        **K1,
        "enable_hierarchical_cache": True,
        "hicache_size": 12,
        "hicache_write_policy": "write_through",
        "max_total_tokens": 32768,
    }
    w = Workload(
        tuple(RequestSpec(output_len=16, prompt_ids=p) for p in (a, b, c, a)), concurrency=1
    )
    r = evaluate(AWQ, G4080, cfg, w, host_free_gib=100.0)
    cold, _, _, replay = sorted(r["requests"], key=lambda x: x["index"])
    assert cold["e2e_s"] == pytest.approx(10.2, rel=0.15)
    assert replay["cached_host_tokens"] == replay["cached_tokens"] == 16384
    assert replay["e2e_s"] == pytest.approx(1.25, rel=0.25)
