"""Scenario runs against a MockTransport server: bodies sent, aggregation, failure policy."""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx
import pytest

from autotune.bench import (
    AgentScenario,
    BenchmarkReport,
    DecodeScenario,
    LongContextScenario,
    PrefillScenario,
    ScenarioFailed,
    ThroughputScenario,
    normalize_base_url,
    parse_scenario,
    run_benchmark,
    run_scenario,
)
from autotune.errors import BenchmarkError, ConfigError
from tests.bench.fakes import FakeServer
from tests.bench.test_metrics import sglang_exposition

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def run(srv: FakeServer, scenario: Any, model: str | None = None) -> Any:
    async with httpx.AsyncClient(transport=srv.transport()) as client:
        return await run_scenario(client, "http://test/v1/", scenario, model=model)


def measured(srv: FakeServer, warmups: int) -> list[dict[str, Any]]:
    return srv.bodies[warmups:]


async def test_decode_body_and_figures() -> None:
    srv = FakeServer()
    res = await run(srv, DecodeScenario(num_requests=2, output_len=8, prompt_len=50))
    body = srv.bodies[0]
    # SGLang bench_serving defaults: temperature 0, ignore_eos as an extra body field; usage on.
    assert body["model"] == "mock-model" and body["stream"] is True
    assert body["temperature"] == 0.0 and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"][0]["role"] == "user"
    assert srv.bodies[0]["max_tokens"] <= 8  # warm-up capped
    assert [b["max_tokens"] for b in measured(srv, 1)] == [8, 8]
    assert res.kind == "decode" and res.model == "mock-model"
    assert res.stats.completed == 2 and res.stats.output_tokens == 16
    assert res.main.figure == "decode_tok_s" and res.main.mean == res.stats.decode_tok_s
    assert res.figures["decode_tok_s"] == res.stats.decode_tok_s
    assert res.warmup_requests == 1 and res.warmup_errors == 0
    assert len(res.requests) == 2 and res.points == []
    assert not res.metrics.available
    assert any("no /metrics" in w for w in res.warnings)
    assert res.base_url == "http://test"


async def test_every_request_gets_a_distinct_prompt() -> None:
    srv = FakeServer()
    await run(srv, ThroughputScenario(concurrency=2, num_requests=4, repeats=2, output_len=2))
    prompts = [b["messages"][0]["content"] for b in srv.bodies]
    assert len(prompts) == 1 + 8 and len(set(prompts)) == len(prompts)


async def test_same_seed_same_prompts_other_seed_other_prompts() -> None:
    a, b, c = FakeServer(), FakeServer(), FakeServer()
    await run(a, DecodeScenario(num_requests=2, output_len=2, seed=1))
    await run(b, DecodeScenario(num_requests=2, output_len=2, seed=1))
    await run(c, DecodeScenario(num_requests=2, output_len=2, seed=2))
    assert a.bodies == b.bodies and a.bodies != c.bodies


async def test_throughput_respects_concurrency_and_count() -> None:
    srv = FakeServer(chunk_delay=0.002)
    sc = ThroughputScenario(concurrency=3, num_requests=7, output_len=5, warmup_requests=0)
    res = await run(srv, sc)
    assert len(srv.bodies) == 7 and srv.max_in_flight == 3
    assert res.stats.completed == 7 and res.stats.output_tokens == 35
    assert res.stats.output_tok_s == pytest.approx(35 / res.stats.duration_s)
    assert res.main.figure == "output_tok_s"
    assert [r.index for r in res.requests] == list(range(7))


async def test_throughput_for_a_duration() -> None:
    srv = FakeServer(chunk_delay=0.01)
    sc = ThroughputScenario(concurrency=2, duration_s=0.3, output_len=5, warmup_requests=0)
    t0 = time.perf_counter()
    res = await run(srv, sc)
    assert time.perf_counter() - t0 < 2.0
    # ~50 ms per request, 2 streams, 0.3 s: about 12 requests; in-flight ones finish.
    assert 4 <= res.stats.completed <= 20
    assert res.stats.duration_s is not None and res.stats.duration_s >= 0.3


async def test_prefill_points_per_length_with_repeats() -> None:
    srv = FakeServer()
    sc = PrefillScenario(prompt_lens=[64, 256], num_requests=2, repeats=3, warmup_requests=1)
    res = await run(srv, sc)
    assert all(b["max_tokens"] == 1 for b in srv.bodies)
    assert [p.key for p in res.points] == ["prompt_len=64", "prompt_len=256"]
    assert [p.prompt_len for p in res.points] == [64, 256]
    for p in res.points:
        assert p.stats.completed == 6 and len(p.main.values) == 3
    # Actual prompt tokens come from usage (the fake counts words), not from the estimate.
    long_tokens = [r.prompt_tokens for r in res.requests if r.point == "prompt_len=256"]
    assert all(r.prompt_tokens_from_usage for r in res.requests)
    assert all(200 < t < 256 for t in long_tokens if t is not None)
    assert len(res.repeats) == 3 and len(res.main.values) == 3
    assert res.main.stdev is not None and res.main.min <= res.main.mean <= res.main.max  # type: ignore[operator]
    assert res.figures["prefill_tok_s@256"] == res.points[1].stats.prefill_tok_s
    assert res.figures["ttft_s@64"] == res.points[0].stats.ttft.mean  # type: ignore[union-attr]


async def test_long_context_warms_up_short() -> None:
    srv = FakeServer()
    res = await run(srv, LongContextScenario(prompt_lens=[4096], output_len=2))
    warm, real = srv.bodies[0], srv.bodies[1]
    assert len(warm["messages"][0]["content"].split()) < 600
    assert len(real["messages"][0]["content"].split()) > 3000
    assert res.main.figure == "ttft_s" and not res.main.higher_is_better


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
async def test_agent_turn_is_previous_prompt_plus_answer_plus_new_text(endpoint: str) -> None:
    srv = FakeServer(answer_word="reply")
    sc = AgentScenario(
        turns=3,
        concurrency=2,
        sessions=2,
        prompt_len=40,
        turn_len=10,
        output_len=3,
        endpoint=endpoint,  # type: ignore[arg-type]
        warmup_requests=0,
    )
    res = await run(srv, sc)
    assert len(srv.bodies) == 6 and res.stats.completed == 6
    answer = " reply reply reply"
    by_session: dict[str, list[dict[str, Any]]] = {}
    for b in srv.bodies:
        first = b["messages"][0]["content"] if endpoint == "chat" else b["prompt"][:30]
        by_session.setdefault(first[:30], []).append(b)
    assert len(by_session) == 2
    for turns in by_session.values():
        assert len(turns) == 3
        if endpoint == "chat":
            m1, m2, m3 = (t["messages"] for t in turns)
            assert len(m1) == 1 and len(m2) == 3 and len(m3) == 5
            assert m2[:1] == m1 and m2[1] == {"role": "assistant", "content": answer}
            assert m3[:3] == m2 and m3[3] == {"role": "assistant", "content": answer}
            assert m2[2]["role"] == "user" and m2[2]["content"] not in m1[0]["content"]
        else:
            p1, p2, p3 = (t["prompt"] for t in turns)
            assert p2.startswith(p1 + answer + "\n\n") and len(p2) > len(p1 + answer) + 20
            assert p3.startswith(p2 + answer + "\n\n")
    assert [p.key for p in res.points] == ["turn=1", "turn=2", "turn=3"]
    assert all(p.stats.completed == 2 for p in res.points)
    assert res.points[2].stats.prompt_tokens > res.points[0].stats.prompt_tokens
    assert {r.session for r in res.requests} == {0, 1}
    assert res.main.figure == "ttft_s" and "ttft_s@turn3" in res.figures


async def test_agent_session_stops_after_a_failed_turn() -> None:
    def fail(i: int, body: dict[str, Any]) -> httpx.Response | None:
        return httpx.Response(500, text="boom") if len(body["messages"]) == 3 else None

    srv = FakeServer(fail=fail)
    sc = AgentScenario(turns=4, concurrency=1, prompt_len=10, turn_len=5, output_len=2)
    with pytest.raises(ScenarioFailed) as info:
        await run(srv, sc)
    res = info.value.result
    # warm-up + turn 1 ok + turn 2 failed; turns 3 and 4 never sent.
    assert len(srv.bodies) == 3 and res.stats.requests == 2 and res.stats.errors == 1


async def test_errors_below_threshold_are_counted() -> None:
    def fail(i: int, body: dict[str, Any]) -> httpx.Response | None:
        return httpx.Response(500, text="overloaded") if i == 3 else None

    srv = FakeServer(fail=fail)
    sc = ThroughputScenario(concurrency=1, num_requests=10, output_len=2, max_error_rate=0.2)
    res = await run(srv, sc)
    assert res.stats.errors == 1 and res.stats.completed == 9
    assert res.stats.error_kinds == {"http_status": 1}
    assert "overloaded" in res.stats.error_examples[0]
    assert res.figures["error_rate"] == pytest.approx(0.1)


async def test_errors_above_threshold_fail_the_scenario_with_the_result() -> None:
    def fail(i: int, body: dict[str, Any]) -> httpx.Response | None:
        return httpx.Response(500, text="overloaded") if i % 2 == 0 and i > 0 else None

    srv = FakeServer(fail=fail)
    sc = ThroughputScenario(concurrency=1, num_requests=6, output_len=2, max_error_rate=0.2)
    with pytest.raises(
        ScenarioFailed, match=r"3 of 6 requests failed \(50% > max_error_rate 20%\)"
    ):
        await run(srv, sc)


async def test_all_warmups_failing_stops_early() -> None:
    def fail(i: int, body: dict[str, Any]) -> httpx.Response | None:
        return httpx.Response(404, json={"detail": "Not Found"})

    srv = FakeServer(fail=fail)
    with pytest.raises(BenchmarkError, match="all 2 warm-up requests .* failed: .*HTTP 404"):
        await run(srv, DecodeScenario(warmup_requests=2, num_requests=50))
    assert len(srv.bodies) == 2


async def test_usage_missing_and_speculation_are_reported() -> None:
    res = await run(FakeServer(send_usage=False), DecodeScenario(num_requests=1, output_len=4))
    assert res.stats.usage_missing == 1
    assert any("no usage" in w and "vllm#45678" in w for w in res.warnings)
    assert any("client's estimate" in w for w in res.warnings)
    spec = await run(FakeServer(tokens_per_chunk=3), DecodeScenario(num_requests=2, output_len=9))
    assert spec.stats.tokens_per_chunk == pytest.approx(3.0)
    assert spec.figures["tokens_per_chunk"] == pytest.approx(3.0)
    assert any("3.00 tokens per chunk" in w for w in spec.warnings)
    assert spec.stats.output_tokens == 18


async def test_metrics_deltas_over_the_scenario() -> None:
    srv = FakeServer(cached_tokens=5)
    counter = {"n": 0}

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            counter["n"] += 1
            k = counter["n"]
            return httpx.Response(200, text=sglang_exposition(1000 * k, 10 * k, 600 * k, 0, 2.5))
        return await srv.handle(request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        res = await run_scenario(client, "http://test", DecodeScenario(num_requests=1))
    assert counter["n"] == 2
    assert res.metrics.available and res.metrics.cache_hit_rate == pytest.approx(0.6)
    assert res.figures["cache_hit_rate"] == pytest.approx(0.6)
    assert res.figures["spec_accept_length"] == 2.5
    assert res.stats.cached_tokens == 5
    assert res.figures["cache_hit_rate_usage"] == pytest.approx(5 / res.stats.prompt_tokens)


async def test_model_resolution_order() -> None:
    srv = FakeServer(model="served")
    await run(srv, DecodeScenario(num_requests=1, warmup_requests=0), model="given")
    await run(srv, DecodeScenario(num_requests=1, warmup_requests=0, model="own"), model="given")
    await run(srv, DecodeScenario(num_requests=1, warmup_requests=0))
    assert [b["model"] for b in srv.bodies] == ["given", "own", "served"]
    assert srv.paths.count("/v1/models") == 1


def test_run_benchmark_sync_and_json_round_trip() -> None:
    srv = FakeServer()
    scenarios = [
        parse_scenario("decode:num_requests=2,output_len=4"),
        parse_scenario("agent:turns=2"),
    ]
    report = run_benchmark("http://test", scenarios, transport=srv.transport())
    assert [s.name for s in report.scenarios] == ["decode", "agent"]
    assert report.model == "mock-model" and report.finished_at >= report.started_at
    again = BenchmarkReport.model_validate_json(report.model_dump_json())
    assert again == report


def test_run_benchmark_connection_refused_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BenchmarkError, match=f"cannot reach http://127.0.0.1:{port}/v1/models"):
        run_benchmark(f"http://127.0.0.1:{port}", [DecodeScenario()])
    # With the model given, the failure surfaces at the warm-up, still as BenchmarkError.
    with pytest.raises(BenchmarkError, match="warm-up requests .* failed: .*connect"):
        run_benchmark(f"http://127.0.0.1:{port}", [DecodeScenario()], model="m")


def test_normalize_base_url() -> None:
    assert normalize_base_url("http://h:1/") == "http://h:1"
    assert normalize_base_url("http://h:1/v1") == "http://h:1"
    assert normalize_base_url(" https://h/api/ ") == "https://h/api"
    for bad in ("h:1", "ftp://h", "http://"):
        with pytest.raises(ConfigError, match="--url"):
            normalize_base_url(bad)
    with pytest.raises(ConfigError, match="no scenario"):
        run_benchmark("http://h:1", [])


def test_describe_names_shape_and_size() -> None:
    from autotune.bench.summary import describe

    assert describe(parse_scenario("prefill:prompt_lens=512/2048")) == (
        "prefill, prompt_lens=512/2048, 3 requests each, output_len=1, chat, prose"
    )
    text = describe(parse_scenario("throughput:duration_s=30,concurrency=8,repeats=2"))
    assert "for 30 s" in text and "concurrency 8" in text and "x2 repeats" in text
    assert "4 sessions x 4 turns" in describe(parse_scenario("agent"))


async def test_requests_are_made_lazily_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A huge request count with a duration: only the requests sent (plus a few ahead) are ever
    made, so memory stays bounded and the duration ends the phase (issue: 10**12 requests held
    a sweep for minutes while every request was built first)."""
    from autotune.bench import runner as R

    made = {"n": 0}
    real = R._single_spec

    def counting(*args: Any, **kwargs: Any) -> Any:
        made["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(R, "_single_spec", counting)
    srv = FakeServer()
    s = ThroughputScenario(
        num_requests=100_000, duration_s=0.3, concurrency=2, output_len=4, warmup_requests=0
    )
    res = await run(srv, s)
    sent = len(srv.bodies)
    assert 0 < sent < 100_000
    assert made["n"] <= sent + 2 * 2 + 2  # a queue of 2 x concurrency made ahead, at most
    assert res.stats.requests == sent


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_requests", 10**12), ("prompt_len", 10**9), ("concurrency", 10**6), ("repeats", 10**4)],
)
def test_absurd_sizes_are_refused_when_read(field: str, value: int) -> None:
    from autotune.bench.scenarios import scenario_from_dict

    with pytest.raises(ConfigError, match=field):
        scenario_from_dict({"kind": "throughput", field: value})
