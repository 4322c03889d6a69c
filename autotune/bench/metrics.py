"""Aggregation of request results (percentiles, rates, spread) and the /metrics scrape."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import httpx
import numpy as np

from autotune.bench.results import LatencyStats, MetricsDelta, RequestResult, RunStats, Spread
from autotune.errors import BenchmarkError

PERCENTILES = (50, 90, 95, 99)
MAX_ERROR_EXAMPLES = 5


def percentiles(values: Sequence[float], qs: Sequence[float] = PERCENTILES) -> list[float]:
    """Linearly interpolated percentiles (numpy's default method, as bench_serving uses)."""
    if not values:
        raise ValueError("percentiles of an empty sequence")
    return [float(v) for v in np.percentile(np.asarray(values, dtype=float), list(qs))]


def latency_stats(values: Sequence[float]) -> LatencyStats | None:
    """count, mean, min, max, p50/p90/p95/p99 of the samples; None when there are none."""
    if not values:
        return None
    arr = np.asarray(values, dtype=float)
    p50, p90, p95, p99 = (float(v) for v in np.percentile(arr, list(PERCENTILES)))
    return LatencyStats(
        count=len(values),
        mean=float(arr.mean()),
        min=float(arr.min()),
        max=float(arr.max()),
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
    )


def compute_stats(results: Sequence[RequestResult], duration_s: float | None) -> RunStats:
    """Aggregate request results; rates are over `duration_s` (the phase's wall time)."""
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    kinds = Counter(r.error_kind or "unknown" for r in failed)
    examples = error_examples(failed)

    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    output_tokens = sum(r.output_tokens or 0 for r in ok)
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    itl: list[float] = []
    for r in ok:
        itl.extend(r.itl_s)
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]

    # Prefill speed: token-weighted (sum of prompt tokens over sum of TTFT).
    with_ttft = [r for r in ok if r.ttft_s and r.prompt_tokens]
    prefill = (
        sum(r.prompt_tokens or 0 for r in with_ttft) / sum(r.ttft_s or 0.0 for r in with_ttft)
        if with_ttft
        else None
    )
    tpots = [r.tpot_s for r in ok if r.tpot_s]
    decode = statistics.fmean(1.0 / t for t in tpots) if tpots else None

    # Tokens per chunk only from requests where usage gave the token count (P8).
    usage_reqs = [r for r in ok if r.output_tokens_source == "usage" and r.content_chunks]
    tpc = (
        sum(r.output_tokens or 0 for r in usage_reqs) / sum(r.content_chunks for r in usage_reqs)
        if usage_reqs
        else None
    )

    rate_ok = duration_s is not None and duration_s > 0
    return RunStats(
        requests=len(results),
        completed=len(ok),
        errors=len(failed),
        error_kinds=dict(kinds),
        error_examples=examples,
        duration_s=duration_s,
        ttft=latency_stats(ttfts),
        itl=latency_stats(itl),
        tpot=latency_stats(tpots),
        e2e=latency_stats([r.e2e_s for r in ok if r.e2e_s is not None]),
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        cached_tokens=sum(cached) if cached else None,
        input_tok_s=prompt_tokens / duration_s if rate_ok and duration_s else None,
        output_tok_s=output_tokens / duration_s if rate_ok and duration_s else None,
        requests_per_s=len(ok) / duration_s if rate_ok and duration_s else None,
        prefill_tok_s=prefill,
        decode_tok_s=decode,
        tokens_per_chunk=tpc,
        usage_missing=sum(1 for r in ok if r.output_tokens_source == "chunks"),
    )


def error_examples(failed: Iterable[RequestResult]) -> list[str]:
    """The first MAX_ERROR_EXAMPLES distinct `[kind] error` texts of failed requests."""
    examples: list[str] = []
    for r in failed:
        text = f"[{r.error_kind}] {r.error}"
        if text not in examples:
            examples.append(text)
        if len(examples) >= MAX_ERROR_EXAMPLES:
            break
    return examples


def figure_of(stats: RunStats, figure: str) -> float | None:
    """A named figure of a RunStats: a field (``output_tok_s``) or ``ttft_s`` (mean TTFT)."""
    if figure == "ttft_s":
        return stats.ttft.mean if stats.ttft else None
    value = getattr(stats, figure)
    return float(value) if isinstance(value, int | float) else None


def spread(figure: str, values: Iterable[float | None], *, higher_is_better: bool) -> Spread:
    """mean/min/max/stdev of a figure over repeats (repeats without the figure are skipped)."""
    vals = [float(v) for v in values if v is not None]
    return Spread(
        figure=figure,
        higher_is_better=higher_is_better,
        values=vals,
        mean=statistics.fmean(vals) if vals else None,
        min=min(vals) if vals else None,
        max=max(vals) if vals else None,
        stdev=statistics.stdev(vals) if len(vals) >= 2 else None,
    )


# ----------------------------------------------------------------------------- /metrics

# Labels that identify the process or rank exporting a sample rather than what it counts.
_IDENTITY_LABELS = frozenset(
    {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank", "pid", "engine"}
)


def parse_metrics_text(text: str) -> dict[str, float]:
    """Prometheus exposition text -> flat dict, with prometheus_client's parser.

    Keys: each sample name (``sglang:cached_tokens_total``) with counters and histogram
    ``_sum``/``_count`` summed over label sets and gauges averaged; plus ``name{label="v"}`` for
    every label other than the exporter's identity labels (``cache_source``, ``phase``, ...).
    Histogram buckets, summary quantiles and ``_created`` timestamps are left out.
    """
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    try:
        for family in text_string_to_metric_families(text):
            averaged = family.type in ("gauge", "untyped", "info", "stateset")
            for sample in family.samples:
                if sample.name.endswith(("_bucket", "_created")) or "quantile" in sample.labels:
                    continue
                value = float(sample.value)
                if value != value:  # NaN (e.g. an unset gauge)
                    continue
                keys = [sample.name]
                extra = sorted(
                    (k, v) for k, v in sample.labels.items() if k not in _IDENTITY_LABELS
                )
                if extra:
                    inner = ",".join(f'{k}="{v}"' for k, v in extra)
                    keys.append(f"{sample.name}{{{inner}}}")
                for key in keys:
                    sums[key] = sums.get(key, 0.0) + value
                    counts[key] = counts.get(key, 0) + (1 if averaged else 0)
    except (ValueError, IndexError, TypeError) as exc:
        raise BenchmarkError(f"/metrics is not Prometheus text: {exc}") from exc
    return {k: (v / counts[k] if counts[k] else v) for k, v in sums.items()}


async def scrape_metrics(client: httpx.AsyncClient, base_url: str) -> dict[str, float]:
    """GET {base_url}/metrics and parse it; {} when the server has none (404, or metrics off).

    Raises:
        BenchmarkError: the server cannot be reached or the body is not Prometheus text.
    """
    from autotune.bench.client import STALE_CONNECTION_RETRIES

    url = base_url.rstrip("/") + "/metrics"
    for attempt in range(STALE_CONNECTION_RETRIES + 1):
        try:
            resp = await client.get(url, timeout=httpx.Timeout(10.0))
            break
        except httpx.RemoteProtocolError as exc:
            # a keep-alive connection the server had closed (see client.py): GET again
            if attempt == STALE_CONNECTION_RETRIES:
                raise BenchmarkError(f"cannot scrape {url}: {type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise BenchmarkError(f"cannot scrape {url}: {type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        return {}
    return parse_metrics_text(resp.text)


def _delta(before: Mapping[str, float], after: Mapping[str, float], name: str) -> float | None:
    if name not in after:
        return None
    return after[name] - before.get(name, 0.0)


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def metrics_delta(before: Mapping[str, float], after: Mapping[str, float]) -> MetricsDelta:
    """Scenario figures from two scrapes (SGLang and vLLM names; sglang-internals §4.1)."""
    if not after:
        return MetricsDelta(available=False)
    moved = {
        k: after[k] - before.get(k, 0.0)
        for k in after
        if k.partition("{")[0].endswith(("_total", "_sum", "_count"))
        and after[k] != before.get(k, 0.0)
    }
    prompt = _first(
        _delta(before, after, "sglang:prompt_tokens_total"),
        _delta(before, after, "vllm:prompt_tokens_total"),
    )
    generation = _first(
        _delta(before, after, "sglang:generation_tokens_total"),
        _delta(before, after, "vllm:generation_tokens_total"),
    )
    cached = _delta(before, after, "sglang:cached_tokens_total")
    host = _delta(before, after, 'sglang:cached_tokens_total{cache_source="host"}')
    hit_rate = _ratio(cached, prompt)
    # vLLM counts prefix-cache queries and hits in tokens.
    v_hits = _delta(before, after, "vllm:prefix_cache_hits_total")
    if hit_rate is None and v_hits is not None:
        cached = v_hits
        hit_rate = _ratio(v_hits, _delta(before, after, "vllm:prefix_cache_queries_total"))

    # SGLang exports accept length/rate as gauges over the last log interval; vLLM as counters.
    accept_len = after.get("sglang:spec_accept_length")
    accept_rate = after.get("sglang:spec_accept_rate")
    v_acc = _delta(before, after, "vllm:spec_decode_num_accepted_tokens_total")
    v_drafts = _delta(before, after, "vllm:spec_decode_num_drafts_total")
    if accept_len is None and v_acc is not None and v_drafts:
        accept_len = 1.0 + v_acc / v_drafts
        accept_rate = _ratio(
            v_acc, _delta(before, after, "vllm:spec_decode_num_draft_tokens_total")
        )
    return MetricsDelta(
        available=True,
        prompt_tokens=prompt,
        generation_tokens=generation,
        cached_tokens=cached,
        host_cached_tokens=host,
        cache_hit_rate=hit_rate,
        spec_accept_length=accept_len or None,
        spec_accept_rate=accept_rate if accept_len else None,
        deltas=moved,
    )
