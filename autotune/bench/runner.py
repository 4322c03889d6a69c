"""Run scenarios against a server: warm-up, repeats, phases of concurrent requests, /metrics.

A phase is a batch of requests sent by ``concurrency`` workers; its wall time is the denominator
of the rates. Prompts of count-bounded phases are generated before the clock starts so that text
generation does not steal time from the streams being measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from autotune.bench.client import ENDPOINT_PATHS, RequestSpec, discover_model, stream_request
from autotune.bench.metrics import metrics_delta, scrape_metrics
from autotune.bench.prompts import estimate_tokens, make_text
from autotune.bench.results import MetricsDelta, RequestResult, ScenarioResult
from autotune.bench.scenarios import (
    AgentScenario,
    AnyScenario,
    DecodeScenario,
    LongContextScenario,
    PrefillScenario,
    ScenarioBase,
    ThroughputScenario,
)
from autotune.bench.summary import Phase, figures, summarize, warnings_for
from autotune.errors import BenchmarkError, ConfigError

# Chat templates add a few tokens around the user text; only used for the estimate.
_CHAT_OVERHEAD_TOKENS = 8
_WARMUP_OUTPUT_CAP = 16
_LONG_CONTEXT_WARMUP_LEN = 512


class ScenarioFailed(BenchmarkError):
    """Too many requests of a scenario failed; `result` holds what was measured."""

    def __init__(self, message: str, result: ScenarioResult):
        self.result = result
        super().__init__(message)


def normalize_base_url(url: str) -> str:
    """``http://host:port`` without a trailing slash or ``/v1`` (both are accepted)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"expected an http(s) URL such as http://127.0.0.1:30000, got {url!r}", field="--url"
        )
    base = url.strip().rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base


def _timeout(s: ScenarioBase) -> httpx.Timeout:
    # pool: waiting for a free connection counts against the request's own deadline.
    return httpx.Timeout(
        connect=s.connect_timeout_s,
        read=s.read_timeout_s,
        write=s.read_timeout_s,
        pool=s.request_timeout_s,
    )


def _body(
    s: ScenarioBase, model: str, text: str | list[dict[str, str]], max_tokens: int
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if s.endpoint == "chat":
        body["messages"] = text if isinstance(text, list) else [{"role": "user", "content": text}]
    else:
        body["prompt"] = text if isinstance(text, str) else "\n\n".join(m["content"] for m in text)
    body.update(
        max_tokens=max_tokens,
        temperature=s.temperature,
        stream=True,
        stream_options={"include_usage": True},
    )
    if s.ignore_eos:
        body["ignore_eos"] = True  # not OpenAI; SGLang, vLLM and llama-server accept it
    body.update(s.extra_body)
    return body


def _estimate(s: ScenarioBase, text: str) -> int:
    return estimate_tokens(text) + (_CHAT_OVERHEAD_TOKENS if s.endpoint == "chat" else 0)


def _single_spec(
    s: ScenarioBase,
    base_url: str,
    model: str,
    *,
    prompt_len: int,
    max_tokens: int,
    key: str,
    index: int,
    repeat: int,
    point: str,
) -> RequestSpec:
    text = make_text(s.text, prompt_len, f"{s.seed}:{key}")
    return RequestSpec(
        url=base_url + ENDPOINT_PATHS[s.endpoint],
        body=_body(s, model, text, max_tokens),
        estimated_prompt_tokens=_estimate(s, text),
        index=index,
        repeat=repeat,
        point=point,
    )


async def _phase(
    client: httpx.AsyncClient,
    s: ScenarioBase,
    make_spec: Callable[[int], RequestSpec],
    *,
    concurrency: int,
    cap: int | None,
    duration_s: float | None = None,
) -> tuple[list[RequestResult], float]:
    """`concurrency` workers send requests until `cap` requests or `duration_s` seconds.

    Requests are made lazily by one producer, a few ahead of the workers, in a thread: memory
    stays bounded whatever `cap` is, long prompts never block the event loop (timeouts and
    signals are answered), and making a request stays off the timed path."""
    timeout = _timeout(s)
    results: list[RequestResult] = []
    n_workers = min(concurrency, cap) if cap is not None else concurrency
    ready: asyncio.Queue[RequestSpec | None] = asyncio.Queue(maxsize=2 * n_workers)
    ahead = 2 * n_workers if cap is None else min(cap, 2 * n_workers)
    for i in range(ahead):  # the first ones before the clock starts
        ready.put_nowait(await asyncio.to_thread(make_spec, i))
    start = time.perf_counter()
    stop_at = start + duration_s if duration_s else None

    async def producer() -> None:
        for i in itertools.count(ahead):
            if (cap is not None and i >= cap) or (
                stop_at is not None and time.perf_counter() >= stop_at
            ):
                break
            await ready.put(await asyncio.to_thread(make_spec, i))
        for _ in range(n_workers):
            await ready.put(None)

    async def worker() -> None:
        while True:
            spec = await ready.get()
            if spec is None or (stop_at is not None and time.perf_counter() >= stop_at):
                return
            res, _ = await stream_request(
                client, spec, timeout=timeout, deadline_s=s.request_timeout_s, phase_start=start
            )
            results.append(res)

    feeding = asyncio.create_task(producer())
    try:
        await asyncio.gather(*(worker() for _ in range(n_workers)))
    finally:
        feeding.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeding
    results.sort(key=lambda r: r.index)
    return results, time.perf_counter() - start


async def _agent_phase(
    client: httpx.AsyncClient, s: AgentScenario, base_url: str, model: str, repeat: int
) -> tuple[list[RequestResult], float]:
    """Sessions of `turns` turns; turn k sends turn k-1's prompt + its answer + new text."""
    timeout = _timeout(s)
    url = base_url + ENDPOINT_PATHS[s.endpoint]
    sem = asyncio.Semaphore(s.concurrency)
    results: list[RequestResult] = []
    start = time.perf_counter()

    async def session(sid: int) -> None:
        async with sem:
            messages: list[dict[str, str]] = []
            prompt = ""
            estimate = 0
            for turn in range(1, s.turns + 1):
                length = s.prompt_len if turn == 1 else s.turn_len
                new = make_text(s.text, length, f"{s.seed}:r{repeat}:s{sid}:t{turn}")
                messages.append({"role": "user", "content": new})
                prompt = f"{prompt}\n\n{new}" if prompt else new
                estimate += estimate_tokens(new)
                spec = RequestSpec(
                    url=url,
                    body=_body(
                        s, model, list(messages) if s.endpoint == "chat" else prompt, s.output_len
                    ),
                    estimated_prompt_tokens=estimate
                    + (_CHAT_OVERHEAD_TOKENS * turn if s.endpoint == "chat" else 0),
                    index=sid * s.turns + turn - 1,
                    repeat=repeat,
                    point=f"turn={turn}",
                    turn=turn,
                    session=sid,
                )
                res, answer = await stream_request(
                    client,
                    spec,
                    timeout=timeout,
                    deadline_s=s.request_timeout_s,
                    phase_start=start,
                    collect_text=True,
                )
                results.append(res)
                if not res.ok:
                    return  # the session cannot continue without its answer
                messages.append({"role": "assistant", "content": answer})
                prompt += answer
                estimate += estimate_tokens(answer)
                if s.think_time_s and turn < s.turns:
                    await asyncio.sleep(s.think_time_s)

    await asyncio.gather(*(session(i) for i in range(s.num_sessions)))
    results.sort(key=lambda r: r.index)
    return results, time.perf_counter() - start


async def _run_repeat(
    client: httpx.AsyncClient, s: AnyScenario, base_url: str, model: str, repeat: int
) -> list[tuple[str, list[RequestResult], float]]:
    """One measured repetition -> [(point key, results, wall seconds)]."""
    if isinstance(s, AgentScenario):
        results, wall = await _agent_phase(client, s, base_url, model, repeat)
        return [("", results, wall)]
    if isinstance(s, PrefillScenario | LongContextScenario):
        out = []
        for n in s.prompt_lens:
            key = f"prompt_len={n}"

            def make(i: int, n: int = n, key: str = key) -> RequestSpec:
                return _single_spec(
                    s,
                    base_url,
                    model,
                    prompt_len=n,
                    max_tokens=s.output_len,
                    key=f"r{repeat}:{key}:i{i}",
                    index=i,
                    repeat=repeat,
                    point=key,
                )

            results, wall = await _phase(
                client, s, make, concurrency=s.concurrency, cap=s.num_requests
            )
            out.append((key, results, wall))
        return out
    assert isinstance(s, DecodeScenario | ThroughputScenario)
    cap = s.request_cap if isinstance(s, ThroughputScenario) else s.num_requests
    duration = s.duration_s if isinstance(s, ThroughputScenario) else None
    prompt_len = s.prompt_len

    def make_one(i: int) -> RequestSpec:
        return _single_spec(
            s,
            base_url,
            model,
            prompt_len=prompt_len,
            max_tokens=s.output_len,
            key=f"r{repeat}:i{i}",
            index=i,
            repeat=repeat,
            point="",
        )

    results, wall = await _phase(
        client, s, make_one, concurrency=s.concurrency, cap=cap, duration_s=duration
    )
    return [("", results, wall)]


async def _warmup(
    client: httpx.AsyncClient, s: AnyScenario, base_url: str, model: str
) -> list[RequestResult]:
    if not s.warmup_requests:
        return []
    if isinstance(s, LongContextScenario):
        prompt_len = _LONG_CONTEXT_WARMUP_LEN
    elif isinstance(s, PrefillScenario):
        prompt_len = s.prompt_lens[0]
    else:
        prompt_len = s.prompt_len

    def make(i: int) -> RequestSpec:
        return _single_spec(
            s,
            base_url,
            model,
            prompt_len=prompt_len,
            max_tokens=min(s.output_len, _WARMUP_OUTPUT_CAP),
            key=f"warmup:i{i}",
            index=i,
            repeat=-1,
            point="warmup",
        )

    results, _ = await _phase(
        client, s, make, concurrency=min(s.concurrency, s.warmup_requests), cap=s.warmup_requests
    )
    if not any(r.ok for r in results):
        examples = "; ".join(dict.fromkeys(f"[{r.error_kind}] {r.error}" for r in results))
        raise BenchmarkError(
            f"scenario {s.label!r}: all {len(results)} warm-up requests to {base_url} failed: "
            f"{examples}"
        )
    return results


async def _scrape(
    client: httpx.AsyncClient, base_url: str, warnings: list[str]
) -> dict[str, float] | None:
    try:
        return await scrape_metrics(client, base_url)
    except BenchmarkError as exc:
        warnings.append(f"metrics scrape failed: {exc}")
        return None


async def run_scenario(
    client: httpx.AsyncClient,
    base_url: str,
    scenario: AnyScenario,
    *,
    model: str | None = None,
) -> ScenarioResult:
    """Warm up, run the scenario's repeats, scrape /metrics before and after, aggregate.

    The model is ``scenario.model``, else `model`, else the first of ``/v1/models``. The client's
    connection pool must allow ``scenario.concurrency`` connections (httpx's default is 100).

    Raises:
        BenchmarkError: the server is unreachable or every warm-up request failed.
        ScenarioFailed: more than ``scenario.max_error_rate`` of the measured requests failed
            (a BenchmarkError carrying the partial result).
    """
    base_url = normalize_base_url(base_url)
    t_start = time.perf_counter()
    started_at = datetime.now(UTC)
    resolved = scenario.model or model or await discover_model(client, base_url)
    warmup = await _warmup(client, scenario, base_url, resolved)

    phases, metrics, warnings = await _measure(client, scenario, base_url, resolved)

    all_results = [r for ph in phases for r in ph.results]
    agg = summarize(scenario, phases)
    stats = agg.stats
    warnings.extend(warnings_for(stats, all_results))
    result = ScenarioResult(
        name=scenario.label,
        kind=scenario.kind,
        scenario=scenario.model_dump(mode="json"),
        base_url=base_url,
        model=resolved,
        endpoint=scenario.endpoint,
        started_at=started_at,
        wall_s=time.perf_counter() - t_start,
        warmup_requests=len(warmup),
        warmup_errors=sum(1 for r in warmup if not r.ok),
        stats=stats,
        repeats=agg.repeats,
        points=agg.points,
        main=agg.main,
        figures=figures(agg, metrics),
        metrics=metrics,
        warnings=warnings,
        requests=all_results,
    )
    _check_errors(scenario, result)
    return result


async def _measure(
    client: httpx.AsyncClient, scenario: AnyScenario, base_url: str, model: str
) -> tuple[list[Phase], MetricsDelta, list[str]]:
    """The scenario's repeats between two /metrics scrapes: the phases, the /metrics delta
    over them (unavailable when a scrape failed) and the warnings."""
    warnings: list[str] = []
    before = await _scrape(client, base_url, warnings)

    phases: list[Phase] = []
    for repeat in range(scenario.repeats):
        for key, results, wall in await _run_repeat(client, scenario, base_url, model, repeat):
            phases.append(Phase(repeat, key, results, wall))

    after = await _scrape(client, base_url, warnings)
    if before is None or after is None:
        return phases, MetricsDelta(available=False, error=warnings[-1]), warnings
    metrics = metrics_delta(before, after)
    if not metrics.available:
        warnings.append(
            "the server has no /metrics: cache hit rate and speculative accept length are "
            "unknown (SGLang: --enable-metrics)"
        )
    return phases, metrics, warnings


def _check_errors(scenario: AnyScenario, result: ScenarioResult) -> None:
    """ScenarioFailed when no request completed or too many failed."""
    stats = result.stats
    share = stats.errors / stats.requests if stats.requests else 1.0
    if stats.completed == 0 or share > scenario.max_error_rate:
        raise ScenarioFailed(
            f"scenario {scenario.label!r}: {stats.errors} of {stats.requests} requests failed "
            f"({share:.0%} > max_error_rate {scenario.max_error_rate:.0%}); "
            f"e.g. {'; '.join(stats.error_examples[:3])}",
            result,
        )
