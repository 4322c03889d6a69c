"""The Prometheus metrics autotune reads from vLLM's /metrics (on by default), by release.

Names and types are vLLM's own (vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py),
with the releases that expose them (checked against the wheels by tests/engines/
test_vllm_metrics.py). `name` is the family as prometheus_client's text parser reports it
(counters lose `_total`); `sample` is the exposed sample name. Semantics the tuner must respect:
prompt/generation counters move when a step finishes; the spec-decode counters give the
acceptance rate as accepted_tokens / draft_tokens and the mean accepted length as
1 + accepted_tokens / drafts; `kv_cache_usage_perc` is a fraction in [0, 1] despite its name
(`gpu_cache_usage_perc` before it, a deprecated alias up to 0.11.2); `cache_config_info` is a
gauge fixed at 1 whose labels carry block_size, num_gpu_blocks, gpu_memory_utilization, ...
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.engines._metrics import MetricKind, by_name
from autotune.engines._metrics import MetricSpec as BaseMetricSpec
from autotune.engines.vllm.releases import parse_version, version_index

__all__ = ["METRICS", "MetricKind", "MetricSpec", "metrics_for"]


@dataclass(frozen=True)
class MetricSpec(BaseMetricSpec):
    """A metric family with the releases that expose it (labels: beyond model_name and engine)."""

    first: str = "0.10.0"
    last: str | None = None  # None: still exposed by the newest catalogued release

    def exposed_by(self, version: str) -> bool:
        i = version_index(parse_version(version))
        if i < version_index(self.first):
            return False
        return self.last is None or i <= version_index(self.last)


def _m(
    name: str,
    kind: MetricKind,
    doc: str,
    first: str = "0.10.0",
    last: str | None = None,
    labels: tuple[str, ...] = (),
) -> MetricSpec:
    return MetricSpec("vllm:" + name, kind, doc, labels=labels, first=first, last=last)


METRICS: dict[str, MetricSpec] = by_name(
    _m("num_requests_running", "gauge", "Number of requests in model execution batches."),
    _m("num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
    _m("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."),
    _m(
        "gpu_cache_usage_perc",
        "gauge",
        "GPU KV-cache usage (deprecated alias of kv_cache_usage_perc).",
        last="0.11.2",
    ),
    _m("prompt_tokens", "counter", "Number of prefill tokens processed."),
    _m("generation_tokens", "counter", "Number of generation tokens processed."),
    _m(
        "prompt_tokens_cached",
        "counter",
        "Number of cached prompt tokens (local prefix cache and external KV).",
        first="0.16.0",
    ),
    _m("prefix_cache_queries", "counter", "Prefix cache queries, in queried tokens."),
    _m("prefix_cache_hits", "counter", "Prefix cache hits, in cached tokens."),
    _m(
        "gpu_prefix_cache_queries",
        "counter",
        "GPU prefix cache queries (deprecated alias of prefix_cache_queries).",
        last="0.11.2",
    ),
    _m(
        "gpu_prefix_cache_hits",
        "counter",
        "GPU prefix cache hits (deprecated alias of prefix_cache_hits).",
        last="0.11.2",
    ),
    _m("num_preemptions", "counter", "Cumulative number of preemptions from the engine."),
    _m(
        "request_success",
        "counter",
        "Count of successfully processed requests.",
        labels=("finished_reason",),
    ),
    _m("spec_decode_num_drafts", "counter", "Number of spec decoding drafts."),
    _m("spec_decode_num_draft_tokens", "counter", "Number of draft tokens."),
    _m("spec_decode_num_accepted_tokens", "counter", "Number of accepted tokens."),
    _m(
        "spec_decode_num_accepted_tokens_per_pos",
        "counter",
        "Accepted tokens per draft position.",
        labels=("position",),
    ),
    _m(
        "time_to_first_token_seconds",
        "histogram",
        "Histogram of time to first token in seconds.",
    ),
    _m(
        "inter_token_latency_seconds",
        "histogram",
        "Histogram of inter-token latency in seconds.",
        first="0.10.2",
    ),
    _m(
        "time_per_output_token_seconds",
        "histogram",
        "Histogram of time per output token in seconds (renamed inter_token_latency).",
        last="0.14.1",
    ),
    _m(
        "e2e_request_latency_seconds",
        "histogram",
        "Histogram of e2e request latency in seconds.",
    ),
    _m(
        "request_queue_time_seconds",
        "histogram",
        "Histogram of time spent in WAITING phase for request.",
    ),
    _m(
        "cache_config_info",
        "gauge",
        "Information of the LLMEngine CacheConfig (labels: block_size, num_gpu_blocks, "
        "gpu_memory_utilization, cache_dtype, ...).",
    ),
)


def metrics_for(version: str) -> dict[str, MetricSpec]:
    """The metrics `version` exposes (by family name)."""
    return {name: spec for name, spec in METRICS.items() if spec.exposed_by(version)}
