"""The Prometheus metrics llama-server exposes on /metrics (needs --metrics, which the adapter
adds by default). Names, types and help texts are llama.cpp's own (tools/server/server-task.cpp,
0.3.36 sdist). The counters are declared with `_total` already in their name, so
prometheus_client's text parser reports the family without it (`llamacpp:prompt_tokens`) and
the sample with it; gauges are averages since the last /metrics scrape or instantaneous counts.
"""

from __future__ import annotations

from autotune.engines._metrics import MetricKind, MetricSpec, by_name


def _m(name: str, kind: MetricKind, doc: str) -> MetricSpec:
    return MetricSpec("llamacpp:" + name, kind, doc)


METRICS: dict[str, MetricSpec] = by_name(
    _m(
        "prompt_tokens",
        "counter",
        "Number of prompt tokens processed, excluding cached tokens",
    ),
    _m("prompt_tokens_cached", "counter", "Number of prompt tokens reused from the cache"),
    _m("prompt_seconds", "counter", "Total time spent processing prompts"),
    _m("tokens_predicted", "counter", "Number of generation tokens processed"),
    _m("tokens_predicted_seconds", "counter", "Total time spent generating tokens"),
    _m(
        "n_decode",
        "counter",
        "Total number of llama_decode() calls, excluding speculative decoding and multimodal "
        "decoding",
    ),
    _m("spec_decode_num_draft_tokens", "counter", "Speculative: Total draft tokens generated"),
    _m(
        "spec_decode_num_accepted_tokens",
        "counter",
        "Speculative: Total draft tokens accepted by the target model",
    ),
    _m(
        "spec_decode_num_drafts",
        "counter",
        "Speculative: Total speculative decoding verification steps",
    ),
    # Declared a counter but exposed without `_total`: read it as a gauge (its sample name).
    _m("n_tokens_max", "gauge", "Largest observed sequence length (prompt + generation)"),
    _m("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s"),
    _m("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s"),
    _m("requests_processing", "gauge", "Number of requests processing"),
    _m("requests_deferred", "gauge", "Number of requests deferred"),
    _m(
        "n_busy_slots_per_decode",
        "gauge",
        "Average number of busy slots per llama_decode() call",
    ),
)
