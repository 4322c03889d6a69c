"""Benchmark results as pydantic models (JSON-serialisable with ``model_dump(mode="json")``).

Units: seconds for times, tokens per second for rates. Figures that could not be measured are
None, never 0.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ErrorKind = Literal[
    "http_status",  # the server answered 4xx/5xx
    "connect",  # connection refused or connect timeout
    "read_timeout",  # no bytes for read_timeout_s
    "timeout",  # the whole request exceeded request_timeout_s
    "protocol",  # the connection broke mid-response (server died, reset)
    "malformed",  # a data line was not JSON / not an OpenAI chunk
    "server_error",  # the stream carried an error object
    "truncated",  # the stream ended without finish_reason and [DONE]
    "empty",  # the stream finished without any output token
    "transport",  # any other httpx transport error
]


class RequestResult(BaseModel):
    """One request as the client saw it. Times are relative to its own send time."""

    model_config = ConfigDict(frozen=True)

    index: int
    repeat: int
    point: str = Field(description="group key: 'prompt_len=512', 'turn=2' or ''")
    ok: bool
    error: str | None = None
    error_kind: ErrorKind | None = None
    status_code: int | None = None
    start_s: float = Field(description="send time relative to the start of its phase")
    ttft_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = Field(None, description="(e2e - ttft) / (output_tokens - 1)")
    itl_s: list[float] = Field(
        default_factory=list, description="per content chunk: gap / tokens per chunk"
    )
    prompt_tokens: int | None = Field(None, description="usage.prompt_tokens, else the estimate")
    prompt_tokens_estimated: int = Field(description="the client's own estimate")
    prompt_tokens_from_usage: bool = False
    output_tokens: int | None = Field(None, description="usage.completion_tokens, else chunks")
    output_tokens_source: Literal["usage", "chunks"] | None = None
    content_chunks: int = 0
    tokens_per_chunk: float | None = Field(
        None, description="usage tokens / content chunks; > 1 under speculative decoding"
    )
    cached_tokens: int | None = Field(None, description="usage.prompt_tokens_details")
    finish_reason: str | None = None
    done_seen: bool = False
    turn: int | None = None
    session: int | None = None


class LatencyStats(BaseModel):
    """Distribution of one latency over a set of samples (seconds)."""

    model_config = ConfigDict(frozen=True)

    count: int
    mean: float
    min: float
    max: float
    p50: float
    p90: float
    p95: float
    p99: float


class RunStats(BaseModel):
    """Aggregates over a set of requests. Token counts come from usage where the server sent it;
    rates need a wall duration and are None for groups without one (agent turns)."""

    model_config = ConfigDict(frozen=True)

    requests: int
    completed: int
    errors: int
    error_kinds: dict[str, int] = Field(default_factory=dict)
    error_examples: list[str] = Field(default_factory=list)
    duration_s: float | None = None
    ttft: LatencyStats | None = None
    itl: LatencyStats | None = None
    tpot: LatencyStats | None = None
    e2e: LatencyStats | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int | None = Field(None, description="sum of usage cached_tokens if reported")
    input_tok_s: float | None = None
    output_tok_s: float | None = None
    requests_per_s: float | None = None
    prefill_tok_s: float | None = Field(None, description="sum prompt tokens / sum TTFT")
    decode_tok_s: float | None = Field(None, description="mean per-request 1 / TPOT")
    tokens_per_chunk: float | None = Field(None, description="usage tokens / content chunks")
    usage_missing: int = Field(0, description="requests whose tokens came from chunk counts")


class Spread(BaseModel):
    """One figure over the repeats."""

    model_config = ConfigDict(frozen=True)

    figure: str
    higher_is_better: bool
    values: list[float]
    mean: float | None
    min: float | None
    max: float | None
    stdev: float | None = Field(None, description="sample stdev; None below 2 values")


class PointResult(BaseModel):
    """A group within a scenario: one prompt length (prefill, long_context) or one turn (agent)."""

    model_config = ConfigDict(frozen=True)

    key: str
    prompt_len: int | None = None
    turn: int | None = None
    stats: RunStats
    main: Spread


class MetricsDelta(BaseModel):
    """What the server's /metrics said about the scenario (after minus before).

    Counters move only when a request finishes (sglang-internals §4.1), so the scrape after the
    last request has completed holds every request. Ratios are unaffected by a counter exported
    once per TP rank, since both sides of the ratio are."""

    model_config = ConfigDict(frozen=True)

    available: bool = False
    error: str | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    cached_tokens: float | None = None
    host_cached_tokens: float | None = None
    cache_hit_rate: float | None = Field(None, description="cached / prompt tokens")
    spec_accept_length: float | None = Field(
        None, description="tokens per verify step, bonus incl."
    )
    spec_accept_rate: float | None = None
    deltas: dict[str, float] = Field(
        default_factory=dict, description="every counter that moved (after - before)"
    )


class ScenarioResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    kind: str
    scenario: dict[str, Any]
    base_url: str
    model: str
    endpoint: str
    started_at: datetime
    wall_s: float = Field(description="whole scenario including warm-up and scrapes")
    warmup_requests: int = 0
    warmup_errors: int = 0
    stats: RunStats = Field(description="all measured requests of all repeats")
    repeats: list[RunStats]
    points: list[PointResult]
    main: Spread
    figures: dict[str, float | None] = Field(
        default_factory=dict, description="flat named figures for objectives and tables"
    )
    metrics: MetricsDelta = Field(default_factory=MetricsDelta)
    warnings: list[str] = Field(default_factory=list)
    requests: list[RequestResult] = Field(default_factory=list)


class BenchmarkReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    base_url: str
    model: str | None
    started_at: datetime
    finished_at: datetime
    autotune_version: str
    scenarios: list[ScenarioResult]
