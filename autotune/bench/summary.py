"""From measured phases to a scenario's aggregates: pooled stats, per-repeat spread, points
(prompt lengths, agent turns), flat named figures and the notes a reader should see."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from autotune.bench.metrics import compute_stats, figure_of, spread
from autotune.bench.results import (
    LatencyStats,
    MetricsDelta,
    PointResult,
    RequestResult,
    RunStats,
    Spread,
)
from autotune.bench.scenarios import (
    MAIN_FIGURE,
    AgentScenario,
    AnyScenario,
    LongContextScenario,
    PrefillScenario,
    ThroughputScenario,
)


class Phase(NamedTuple):
    """Requests sent together within one repeat (one prompt length, or the whole repeat)."""

    repeat: int
    key: str
    results: list[RequestResult]
    wall_s: float


@dataclass(frozen=True)
class Aggregate:
    stats: RunStats
    repeats: list[RunStats]
    points: list[PointResult]
    main: Spread


def describe(s: AnyScenario) -> str:
    """One line: kind, shape and size of a scenario."""
    parts = [s.label]
    if isinstance(s, PrefillScenario | LongContextScenario):
        parts.append(f"prompt_lens={'/'.join(map(str, s.prompt_lens))}")
        parts.append(f"{s.num_requests} requests each")
    elif isinstance(s, AgentScenario):
        parts.append(f"{s.num_sessions} sessions x {s.turns} turns, {s.concurrency} at once")
        parts.append(f"first prompt {s.prompt_len}, +{s.turn_len} per turn")
    else:
        parts.append(f"prompt_len={s.prompt_len}")
        if isinstance(s, ThroughputScenario) and s.duration_s:
            parts.append(f"for {s.duration_s:g} s")
        else:
            cap = s.request_cap if isinstance(s, ThroughputScenario) else s.num_requests
            parts.append(f"{cap} requests")
        parts.append(f"concurrency {s.concurrency}")
    parts.append(f"output_len={s.output_len}, {s.endpoint}, {s.text}")
    if s.repeats > 1:
        parts.append(f"x{s.repeats} repeats")
    return ", ".join(parts)


def points_of(s: AnyScenario) -> list[tuple[str, int | None, int | None]]:
    """(key, prompt_len, turn) of each group a scenario reports separately."""
    if isinstance(s, PrefillScenario | LongContextScenario):
        return [(f"prompt_len={n}", n, None) for n in s.prompt_lens]
    if isinstance(s, AgentScenario):
        return [(f"turn={t}", None, t) for t in range(1, s.turns + 1)]
    return []


def _stats(results: list[RequestResult], walls: list[float]) -> RunStats:
    # Agent turns share their phase with other turns: no wall time of their own, no rates.
    return compute_stats(results, sum(walls) if walls else None)


def summarize(s: AnyScenario, phases: Sequence[Phase]) -> Aggregate:
    """Pool all phases, compute each repeat's main figure and each point's stats."""
    figure, higher = MAIN_FIGURE[s.kind]
    every = [r for ph in phases for r in ph.results]
    stats = _stats(every, [ph.wall_s for ph in phases])
    repeats = [
        _stats(
            [r for ph in phases if ph.repeat == i for r in ph.results],
            [ph.wall_s for ph in phases if ph.repeat == i],
        )
        for i in range(s.repeats)
    ]
    main = spread(figure, (figure_of(r, figure) for r in repeats), higher_is_better=higher)
    points = []
    for key, prompt_len, turn in points_of(s):
        per_repeat = [
            _stats(
                [r for r in every if r.point == key and r.repeat == i],
                [ph.wall_s for ph in phases if ph.repeat == i and ph.key == key],
            )
            for i in range(s.repeats)
        ]
        pooled = _stats(
            [r for r in every if r.point == key], [ph.wall_s for ph in phases if ph.key == key]
        )
        point_main = spread(
            figure, (figure_of(r, figure) for r in per_repeat), higher_is_better=higher
        )
        points.append(
            PointResult(key=key, prompt_len=prompt_len, turn=turn, stats=pooled, main=point_main)
        )
    return Aggregate(stats=stats, repeats=repeats, points=points, main=main)


def warnings_for(stats: RunStats, results: Sequence[RequestResult]) -> list[str]:
    """Notes on how far the figures can be trusted (usage, chunking, prompt sizes)."""
    out: list[str] = []
    ok = [r for r in results if r.ok]
    if stats.usage_missing:
        out.append(
            f"{stats.usage_missing} of {len(ok)} responses had no usage: output tokens were "
            "counted from content chunks, which undercounts under speculative decoding (vllm#45678)"
        )
    if stats.tokens_per_chunk and stats.tokens_per_chunk > 1.05:
        out.append(
            f"the server sent {stats.tokens_per_chunk:.2f} tokens per chunk on average "
            "(speculative decoding or a stream interval); speeds use usage tokens"
        )
    no_done = sum(1 for r in ok if not r.done_seen)
    if no_done:
        out.append(f"{no_done} streams ended without 'data: [DONE]'")
    measured = [r for r in ok if r.prompt_tokens_from_usage]
    if measured:
        real = sum(r.prompt_tokens or 0 for r in measured)
        est = sum(r.prompt_tokens_estimated for r in measured)
        if est and not 0.75 <= real / est <= 1.33:
            out.append(
                f"prompts were {real / est:.2f}x the client's token estimate "
                f"({real} vs {est} tokens); figures use the server's counts"
            )
    elif ok:
        out.append("no usage.prompt_tokens: input tokens are the client's estimate")
    return out


def _get(st: LatencyStats | None, name: str) -> float | None:
    return float(getattr(st, name)) if st is not None else None


def figures(agg: Aggregate, metrics: MetricsDelta) -> dict[str, float | None]:
    """Flat named figures (for sweep objectives and tables); None where not measured.

    ``main`` is the scenario's main figure averaged over repeats; ``X@512`` and ``X@turn2``
    are per prompt length and per agent turn."""
    st = agg.stats
    figs: dict[str, float | None] = {
        "main": agg.main.mean,
        "output_tok_s": st.output_tok_s,
        "input_tok_s": st.input_tok_s,
        "requests_per_s": st.requests_per_s,
        "prefill_tok_s": st.prefill_tok_s,
        "decode_tok_s": st.decode_tok_s,
        "ttft_mean_s": _get(st.ttft, "mean"),
        "ttft_p50_s": _get(st.ttft, "p50"),
        "ttft_p99_s": _get(st.ttft, "p99"),
        "tpot_p50_s": _get(st.tpot, "p50"),
        "itl_p50_s": _get(st.itl, "p50"),
        "itl_p99_s": _get(st.itl, "p99"),
        "e2e_p50_s": _get(st.e2e, "p50"),
        "tokens_per_chunk": st.tokens_per_chunk,
        "error_rate": st.errors / st.requests if st.requests else None,
        "cache_hit_rate": metrics.cache_hit_rate,
        "cache_hit_rate_usage": (
            st.cached_tokens / st.prompt_tokens
            if st.cached_tokens is not None and st.prompt_tokens
            else None
        ),
        "spec_accept_length": metrics.spec_accept_length,
    }
    figs.setdefault(agg.main.figure, agg.main.mean)
    for p in agg.points:
        suffix = f"@{p.prompt_len}" if p.prompt_len is not None else f"@turn{p.turn}"
        figs[f"ttft_s{suffix}"] = _get(p.stats.ttft, "mean")
        if p.prompt_len is not None:
            figs[f"prefill_tok_s{suffix}"] = p.stats.prefill_tok_s
    return figs
