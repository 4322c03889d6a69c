"""The simulated engine's scheduler: batching, chunking, the radix cache rules (P12), HiCache
restores (C3) and speculative acceptance (C4)."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.sim.records import RequestTooLong, SimRequest
from autotune.sim.scheduler import Scheduler
from autotune.sim.speculation import chain_p
from tests.sim.conftest import K1, ids, make_sched, run


def req(rid: str, prompt: np.ndarray, out: int, kind: str = "prose") -> SimRequest:
    return SimRequest(rid=rid, prompt=prompt, output_len=out, kind=kind, seed=int(prompt[0]))


def test_queueing_beyond_max_running_requests() -> None:
    s = make_sched(K1)  # max_running_requests 2
    reqs = [req(str(i), ids(300, i), 20) for i in range(5)]
    peak = 0
    for r in reqs:
        s.submit(r)
    while s.has_work():
        res = s.step()
        if res is None:
            s.advance_to(s.next_ready_time() or s.now)
            continue
        peak = max(peak, len(s.running) + len(res.finished))
        assert len(s.running) <= 2
    assert peak == 2
    first_two_done = max(r.finished_at for r in reqs[:2])  # type: ignore[type-var]
    for r in reqs[2:4]:
        assert r.admitted_at is not None and r.admitted_at >= min(x.finished_at for x in reqs[:2])  # type: ignore[type-var]
    assert reqs[4].admitted_at >= first_two_done  # type: ignore[operator]
    assert all(r.generated == 20 for r in reqs)


def test_chunked_prefill_splits_a_long_prompt() -> None:
    s = make_sched({**K1, "chunked_prefill_size": 2048})
    r = req("a", ids(10000, 1), 4)
    steps = run(s, [r])
    prefill = [st for st in steps if st.kind == "prefill"]
    assert [st.prefill_tokens for st in prefill] == [2048, 2048, 2048, 2048, 1808]
    assert r.first_token_at == pytest.approx(
        prefill[-1].duration + sum(st.duration for st in prefill[:-1]) + s.perf.request_overhead_s
    )


def test_prefill_has_priority_and_mixed_chunk_lets_decodes_run() -> None:
    for mixed in (False, True):
        s = make_sched({**K1, "chunked_prefill_size": 1024, "enable_mixed_chunk": mixed})
        short = req("short", ids(100, 2), 50)
        s.submit(short)
        while short.first_token_at is None:
            assert s.step() is not None or s.advance_to(s.next_ready_time() or 0.0) is None
        long = req("long", ids(8000, 3), 5)
        s.submit(long)
        s.advance_to(long.ready_at)
        before = short.generated
        while long.first_token_at is None:
            s.step()
        progressed = short.generated - before
        # 8 prefill chunks of 1024: mixed chunk decodes in each, otherwise decodes wait (P6)
        assert progressed == (8 if mixed else 0)


def test_radix_hit_follows_the_hybrid_checkpoint_rule() -> None:
    """P12: an exact replay reuses only up to the last chunk-boundary checkpoint; the agent's
    continuation (prompt + answer + new text) reuses everything up to the request's end."""
    s = make_sched({**K1, "chunked_prefill_size": 2048})
    prompt = ids(5000, 4)
    a = req("a", prompt, 10)
    run(s, [a])
    replay = req("replay", prompt.copy(), 10)
    run(s, [replay])
    assert replay.cached == 4096  # 2 full chunks; 5000 itself was never checkpointed
    assert a.output_ids is not None
    cont = req("cont", np.concatenate([prompt, a.output_ids[:10], ids(300, 5)]), 10)
    run(s, [cont])
    assert cont.cached == 5000 + 10 - 1  # state saved at the end of request a
    assert cont.cached_device == cont.cached and cont.cached_host == 0


def test_dense_model_reuses_any_prefix() -> None:
    s = make_sched({"chunked_prefill_size": 512}, card="tiny-dense", gpu="h200-141g")
    prompt = ids(3000, 6)
    run(s, [req("a", prompt, 5)])
    replay = req("b", prompt.copy(), 5)
    run(s, [replay])
    assert replay.cached == 2999  # at least one token is always computed


def test_page_granularity_floors_the_match() -> None:
    s = make_sched(
        {"chunked_prefill_size": 512, "page_size": 64}, card="tiny-dense", gpu="h200-141g"
    )
    prompt = ids(1000, 7)
    run(s, [req("a", prompt, 5)])
    other = req("b", np.concatenate([prompt[:700], ids(300, 8)]), 5)
    run(s, [other])
    assert other.cached == 640


def _three_sessions_then_continue_the_first(s: Scheduler) -> tuple[SimRequest, SimRequest]:
    """Three distinct 16K sessions one after the other, then a continuation of the first (its
    prompt + answer + new text); returns (first session, continuation)."""
    pa, pb = ids(16384, 10), ids(16384, 11)
    a = req("a", pa, 16)
    run(s, [a])
    run(s, [req("b", pb, 16)])
    run(s, [req("c", ids(16384, 14), 16)])
    assert a.output_ids is not None
    cont = req("a2", np.concatenate([pa, a.output_ids[:16], ids(200, 12)]), 16)
    run(s, [cont])
    return a, cont


def test_hicache_host_restore_at_least_5x_faster_than_cold() -> None:
    """C3: L1 shrunk to 32K tokens; three distinct 16K sessions push the first to host; its
    continuation restores from host over PCIe instead of recomputing."""
    cfg = {
        **K1,
        "enable_hierarchical_cache": True,
        "hicache_size": 12,
        "hicache_write_policy": "write_through",
        "max_total_tokens": 32768,
        "chunked_prefill_size": 2048,
    }
    a, cont = _three_sessions_then_continue_the_first(make_sched(cfg))
    assert cont.cached == 16384 + 15
    assert cont.cached_host == cont.cached, "the first session comes back from the host pool"
    cold = a.first_token_at - a.arrival  # type: ignore[operator]
    warm = cont.first_token_at - cont.arrival  # type: ignore[operator]
    assert cold / warm >= 5.0
    # without HiCache the same continuation is a cold prefill
    s2 = make_sched({k: v for k, v in cfg.items() if not k.startswith(("enable_hier", "hicache"))})
    _, cont2 = _three_sessions_then_continue_the_first(s2)
    assert cont2.cached == 0


def _accept(kind: str) -> tuple[float, float]:
    cfg = {
        **K1,
        "speculative_algorithm": "NGRAM",
        "speculative_num_steps": 5,
        "speculative_num_draft_tokens": 6,
    }
    s = make_sched(cfg, seed=3)
    r = req("x", ids(200, 13), 3000, kind)
    steps = run(s, [r])
    decode_time = sum(st.duration for st in steps if st.kind == "decode")
    return r.spec_accepted / r.spec_steps, (r.generated - 1) / decode_time


def test_ngram_accept_length_ordered_extraction_code_prose() -> None:
    """C4: NGRAM gains ordered extraction > code > prose, over plain decoding."""
    acc = {k: _accept(k) for k in ("extraction", "code", "prose")}
    assert acc["extraction"][0] > acc["code"][0] > acc["prose"][0] > 1.0
    s = make_sched(K1)
    r = req("plain", ids(200, 13), 500)
    steps = run(s, [r])
    plain = (r.generated - 1) / sum(st.duration for st in steps if st.kind == "decode")
    assert acc["extraction"][1] > acc["code"][1] > acc["prose"][1] > plain
    assert acc["extraction"][1] == pytest.approx(75.1, rel=0.12)


def test_chain_acceptance_matches_the_mean() -> None:
    for mean, d in ((1.5, 6), (3.0, 4), (1.0, 3)):
        p = chain_p(mean, d)
        assert 1 + sum(p**i for i in range(1, d + 1)) == pytest.approx(mean, abs=1e-6)


def test_fused_decode_matches_step_by_step() -> None:
    """The analytic fast path (fuse) and one-step-at-a-time agree on timing."""
    times = []
    for fuse in (False, True):
        s = make_sched({**K1, "max_running_requests": 3, "max_mamba_cache_size": 12})
        reqs = [req(str(i), ids(400 + 50 * i, 20 + i), 100 + 37 * i) for i in range(3)]
        run(s, reqs, fuse=fuse)
        times.append([r.finished_at for r in reqs])
    assert times[1] == pytest.approx(times[0], rel=1e-3)


def test_kv_pool_bounds_admission() -> None:
    s = make_sched({**K1, "max_total_tokens": 4000, "max_running_requests": 2})
    a, b = req("a", ids(2500, 30), 100), req("b", ids(2500, 31), 100)
    run(s, [a, b])
    assert b.admitted_at >= a.finished_at  # type: ignore[operator]
    with pytest.raises(RequestTooLong):
        s.submit(req("c", ids(3990, 32), 100))


def test_abort_releases_the_request() -> None:
    s = make_sched(K1)
    r = req("a", ids(1000, 40), 1000)
    s.submit(r)
    s.advance_to(r.ready_at)
    for _ in range(5):
        s.step()
    assert s.kv_used > 0
    s.abort(r)
    assert not s.running and s.kv_used == 0 and s.cache.locked_device_tokens == 0
    assert not s.has_work()
    assert s.flush_cache()


def test_lpm_admits_the_longest_cached_prefix_first() -> None:
    """schedule_policy lpm (SGLang's default is fcfs): of two waiting requests, the one whose
    prompt continues a cached one runs first; fcfs keeps arrival order."""
    for policy, first in (("fcfs", "cold"), ("lpm", "warm")):
        s = make_sched({"chunked_prefill_size": 512, "schedule_policy": policy,
                        "max_running_requests": 1}, card="tiny-dense", gpu="h200-141g")  # fmt: skip
        prompt = ids(2000, 20)
        run(s, [req("seed", prompt, 4)])
        busy = req("busy", ids(50, 21), 30)
        cold = req("cold", ids(2000, 22), 4)
        warm = req("warm", np.concatenate([prompt, ids(100, 23)]), 4)
        run(s, [busy, cold, warm])  # both wait behind `busy` (one request at a time)
        order = sorted((cold, warm), key=lambda r: r.admitted_at or 0.0)
        assert order[0].rid == first, policy


def test_long_prefill_cap_limits_one_requests_chunk() -> None:
    """vLLM's long_prefill_token_threshold: a long prompt prefills at most that many tokens
    per step."""
    s = make_sched({"chunked_prefill_size": 4096, "long_prefill_token_threshold": 1000},
                   card="tiny-dense", gpu="h200-141g")  # fmt: skip
    steps = run(s, [req("long", ids(3500, 24), 2)])
    assert [st.prefill_tokens for st in steps if st.kind == "prefill"] == [1000, 1000, 1000, 500]
