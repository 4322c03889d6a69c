"""The Prometheus metrics autotune reads from SGLang's /metrics (needs --enable-metrics).

Names, types and help texts are SGLang's own (metrics collector, identical in 0.5.9 and 0.5.23
for these). `name` is the metric family as prometheus_client's text parser reports it (counter
families lose `_total`); `sample` is the exposed sample name (histograms add _bucket/_sum/_count).
Semantics the tuner must respect (reference §4.1): prompt/generation counters move only when a
request finishes; gauges refresh only on scheduler log intervals; `cache_hit_rate` resets at every
decode log, so prefer cached_tokens_total / prompt_tokens_total.
"""

from __future__ import annotations

from autotune.engines._metrics import MetricKind, MetricSpec, by_name

__all__ = ["METRICS", "MetricKind", "MetricSpec"]


def _m(name: str, kind: MetricKind, doc: str, labels: tuple[str, ...] = ()) -> MetricSpec:
    return MetricSpec("sglang:" + name, kind, doc, labels)


METRICS: dict[str, MetricSpec] = by_name(
    _m("prompt_tokens", "counter", "Number of prefill tokens processed."),
    _m("generation_tokens", "counter", "Number of generation tokens processed."),
    _m(
        "cached_tokens",
        "counter",
        "Number of cached prompt tokens by source (device/host/storage).",
        ("cache_source",),
    ),
    _m("num_requests", "counter", "Number of requests processed."),
    _m("num_retracted_requests", "counter", "Total number of retracted requests."),
    _m(
        "spec_accept_length",
        "gauge",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per "
        "forward).",
    ),
    _m(
        "spec_accept_rate",
        "gauge",
        "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
    ),
    _m("num_running_reqs", "gauge", "The number of running requests."),
    _m("num_queue_reqs", "gauge", "The number of requests in the waiting queue."),
    _m("num_used_tokens", "gauge", "The number of used tokens."),
    _m("token_usage", "gauge", "The token usage."),
    _m("mamba_usage", "gauge", "The token usage for Mamba layers."),
    _m("gen_throughput", "gauge", "The generation throughput (token/s)."),
    _m("cache_hit_rate", "gauge", "The prefix cache hit rate."),
    _m("max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool."),
    # Gauge with a pid label (multiprocess mode "all"), reference §4.
    _m("num_retracted_reqs", "gauge", "The number of retracted requests.", ("pid",)),
    _m(
        "time_to_first_token_seconds",
        "histogram",
        "Histogram of time to first token in seconds.",
    ),
    _m(
        "inter_token_latency_seconds",
        "histogram",
        "Histogram of inter-token latency in seconds.",
    ),
    _m(
        "e2e_request_latency_seconds",
        "histogram",
        "Histogram of End-to-end request latency in seconds",
    ),
)
