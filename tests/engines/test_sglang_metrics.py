"""METRICS names follow prometheus_client's families, as the simulator will expose them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from autotune.engines.sglang import METRICS


def test_metric_names_round_trip_through_prometheus_client() -> None:
    registry = CollectorRegistry()
    kinds = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
    for spec in METRICS.values():
        labels = ["model_name", *spec.labels]
        metric = kinds[spec.kind](spec.sample, spec.doc, labels, registry=registry)
        values = ["q"] + ["x"] * len(spec.labels)
        child = metric.labels(*values)
        if spec.kind == "counter":
            child.inc(3)
        elif spec.kind == "gauge":
            child.set(0.5)
        else:
            child.observe(0.25)
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    for spec in METRICS.values():
        family = families[spec.name]
        assert family.type == spec.kind
        sample_names = {s.name for s in family.samples}
        if spec.kind == "histogram":
            assert {
                spec.name + "_bucket",
                spec.name + "_sum",
                spec.name + "_count",
            } <= sample_names
        else:
            assert spec.sample in sample_names


def test_the_tuner_needs_these() -> None:
    needed = {
        "sglang:prompt_tokens": "counter",
        "sglang:generation_tokens": "counter",
        "sglang:cached_tokens": "counter",
        "sglang:spec_accept_length": "gauge",
        "sglang:spec_accept_rate": "gauge",
        "sglang:num_running_reqs": "gauge",
        "sglang:num_queue_reqs": "gauge",
        "sglang:token_usage": "gauge",
        "sglang:mamba_usage": "gauge",
        "sglang:max_total_num_tokens": "gauge",
        "sglang:num_retracted_reqs": "gauge",
        "sglang:num_retracted_requests": "counter",
        "sglang:time_to_first_token_seconds": "histogram",
        "sglang:inter_token_latency_seconds": "histogram",
        "sglang:e2e_request_latency_seconds": "histogram",
    }
    assert {n: METRICS[n].kind for n in needed} == needed
    assert METRICS["sglang:cached_tokens"].sample == "sglang:cached_tokens_total"
    assert METRICS["sglang:cached_tokens"].labels == ("cache_source",)
