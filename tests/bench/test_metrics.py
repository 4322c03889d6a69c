"""Percentiles, aggregation, spread, and /metrics parsing (sglang-internals §4.1)."""

from __future__ import annotations

import statistics

import httpx
import pytest

from autotune.bench.metrics import (
    compute_stats,
    latency_stats,
    metrics_delta,
    parse_metrics_text,
    percentiles,
    scrape_metrics,
    spread,
)
from autotune.bench.results import RequestResult
from autotune.errors import BenchmarkError

BASE = 'model_name="qwen3.8-27b",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"'


def sglang_exposition(prompt: int, generated: int, device: int, host: int, accept: float) -> str:
    """/metrics as SGLang 0.5.x writes it: HELP/TYPE lines, base labels, cache_source split."""
    return f"""# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{{BASE}}} {prompt}.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{{BASE}}} {generated}.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens by source (device/host/storage).
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{{{BASE},cache_source="device"}} {device}.0
sglang:cached_tokens_total{{{BASE},cache_source="host"}} {host}.0
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{{BASE}}} {accept}
# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{{{BASE}}} 0.231
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{{BASE}}} 0.0
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{BASE}}} 2.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{{{BASE},le="0.1"}} 1.0
sglang:time_to_first_token_seconds_bucket{{{BASE},le="0.5"}} 3.0
sglang:time_to_first_token_seconds_bucket{{{BASE},le="+Inf"}} 4.0
sglang:time_to_first_token_seconds_sum{{{BASE}}} 1.25
sglang:time_to_first_token_seconds_count{{{BASE}}} 4.0
# HELP sglang:num_retracted_reqs The number of retracted requests.
# TYPE sglang:num_retracted_reqs gauge
sglang:num_retracted_reqs{{{BASE},pid="101"}} 0.0
sglang:num_retracted_reqs{{{BASE},pid="102"}} 2.0
"""


def req(i: int, *, ok: bool = True, **kw: object) -> RequestResult:
    base: dict[str, object] = dict(
        index=i,
        repeat=0,
        point="",
        ok=ok,
        start_s=0.0,
        prompt_tokens_estimated=100,
    )
    if ok:
        base.update(
            ttft_s=0.1,
            e2e_s=1.1,
            tpot_s=0.01,
            itl_s=[0.01] * 3,
            prompt_tokens=100,
            prompt_tokens_from_usage=True,
            output_tokens=101,
            output_tokens_source="usage",
            content_chunks=101,
            tokens_per_chunk=1.0,
            done_seen=True,
        )
    else:
        base.update(error="HTTP 500: boom", error_kind="http_status", status_code=500)
    base.update(kw)
    return RequestResult.model_validate(base)


def test_percentiles_interpolate_linearly() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentiles(values) == pytest.approx([50.5, 90.1, 95.05, 99.01])
    assert percentiles([3.0]) == [3.0, 3.0, 3.0, 3.0]
    assert percentiles([1.0, 2.0], [0, 25, 100]) == [1.0, 1.25, 2.0]
    with pytest.raises(ValueError):
        percentiles([])


def test_latency_stats() -> None:
    assert latency_stats([]) is None
    st = latency_stats([4.0, 1.0, 3.0, 2.0])
    assert st is not None
    assert (st.count, st.mean, st.min, st.max) == (4, 2.5, 1.0, 4.0)
    assert st.p50 == 2.5 and st.p90 == pytest.approx(3.7) and st.p99 == pytest.approx(3.97)


def test_compute_stats_rates_and_errors() -> None:
    results = [
        req(0, ttft_s=0.2, prompt_tokens=1000),
        req(1, ttft_s=0.3, prompt_tokens=500, tpot_s=0.02, output_tokens=51),
        req(2, output_tokens=30, output_tokens_source="chunks", tokens_per_chunk=None),
        req(3, ok=False),
        req(4, ok=False, error="no data for 5 s", error_kind="read_timeout"),
    ]
    st = compute_stats(results, duration_s=2.0)
    assert (st.requests, st.completed, st.errors) == (5, 3, 2)
    assert st.error_kinds == {"http_status": 1, "read_timeout": 1}
    assert st.error_examples == ["[http_status] HTTP 500: boom", "[read_timeout] no data for 5 s"]
    assert st.prompt_tokens == 1600 and st.output_tokens == 101 + 51 + 30
    assert st.input_tok_s == 800 and st.output_tok_s == pytest.approx(182 / 2)
    assert st.requests_per_s == 1.5
    # Token-weighted prefill speed: sum prompt tokens / sum TTFT.
    assert st.prefill_tok_s == pytest.approx(1600 / 0.6)
    assert st.decode_tok_s == pytest.approx(statistics.fmean([100, 50, 100]))
    # tokens per chunk only over requests whose count came from usage.
    assert st.tokens_per_chunk == pytest.approx((101 + 51) / (101 + 101))
    assert st.usage_missing == 1
    assert st.ttft is not None and st.ttft.count == 3 and st.itl is not None
    assert st.itl.count == 9
    assert compute_stats(results, None).output_tok_s is None


def test_spread_over_repeats() -> None:
    sp = spread("output_tok_s", [10.0, None, 14.0, 12.0], higher_is_better=True)
    assert sp.values == [10.0, 14.0, 12.0]
    assert (sp.mean, sp.min, sp.max) == (12.0, 10.0, 14.0)
    assert sp.stdev == pytest.approx(2.0)
    one = spread("ttft_s", [0.5], higher_is_better=False)
    assert one.stdev is None and one.mean == 0.5
    assert spread("x", [], higher_is_better=True).mean is None


def test_parse_sglang_exposition() -> None:
    m = parse_metrics_text(sglang_exposition(1000, 200, 300, 100, 2.4))
    assert m["sglang:prompt_tokens_total"] == 1000
    # Counters summed over cache_source; the source stays addressable by label.
    assert m["sglang:cached_tokens_total"] == 400
    assert m['sglang:cached_tokens_total{cache_source="host"}'] == 100
    assert m['sglang:cached_tokens_total{cache_source="device"}'] == 300
    assert m["sglang:spec_accept_length"] == 2.4
    assert m["sglang:time_to_first_token_seconds_sum"] == 1.25
    assert m["sglang:time_to_first_token_seconds_count"] == 4
    assert not any(k.endswith("_bucket") or "_bucket{" in k for k in m)
    # Gauges exported once per process (pid label) are averaged, not summed.
    assert m["sglang:num_retracted_reqs"] == 1.0


def test_parse_rejects_non_prometheus_text() -> None:
    with pytest.raises(BenchmarkError, match="not Prometheus text"):
        parse_metrics_text("<html><body>metrics disabled</body></html>")


def test_sglang_deltas() -> None:
    before = parse_metrics_text(sglang_exposition(1000, 200, 300, 100, 1.0))
    after = parse_metrics_text(sglang_exposition(5000, 1200, 2300, 1100, 2.4))
    d = metrics_delta(before, after)
    assert d.available
    assert d.prompt_tokens == 4000 and d.generation_tokens == 1000
    assert d.cached_tokens == 3000 and d.host_cached_tokens == 1000
    assert d.cache_hit_rate == pytest.approx(0.75)
    assert d.spec_accept_length == 2.4 and d.spec_accept_rate == pytest.approx(0.231)
    assert d.deltas["sglang:prompt_tokens_total"] == 4000
    assert "sglang:time_to_first_token_seconds_count" not in d.deltas  # did not move


def test_vllm_deltas() -> None:
    def text(q: int, h: int, drafts: int, draft_tokens: int, accepted: int) -> str:
        lab = 'model_name="m",engine="0"'
        return f"""# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{{lab}}} {q}
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{{lab}}} {q}
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{{lab}}} {h}
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{{lab}}} {draft_tokens}
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}
"""

    d = metrics_delta(
        parse_metrics_text(text(100, 0, 10, 30, 5)),
        parse_metrics_text(text(1100, 500, 110, 330, 155)),
    )
    assert d.prompt_tokens == 1000 and d.cached_tokens == 500
    assert d.cache_hit_rate == pytest.approx(0.5)
    assert d.spec_accept_length == pytest.approx(1 + 150 / 100)
    assert d.spec_accept_rate == pytest.approx(150 / 300)


def test_no_metrics_means_none_figures() -> None:
    d = metrics_delta({}, {})
    assert not d.available and d.cache_hit_rate is None and d.spec_accept_length is None


@pytest.mark.anyio
async def test_scrape_metrics_404_is_empty_not_an_error() -> None:
    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(404)
        return httpx.Response(500)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        assert await scrape_metrics(client, "http://test/") == {}


@pytest.mark.anyio
async def test_scrape_metrics_parses_body() -> None:
    text = sglang_exposition(10, 2, 3, 1, 1.5)

    async def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=text, headers={"content-type": "text/plain"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        m = await scrape_metrics(client, "http://test")
    assert m["sglang:cached_tokens_total"] == 4


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
