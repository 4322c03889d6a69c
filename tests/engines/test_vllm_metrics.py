"""vLLM's /metrics names by release, read from a Prometheus exposition with prometheus_client."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from autotune.engines.vllm import METRICS, metrics_for

EXPOSITION = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.41
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 12000.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 210.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="1.0",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 3.2
"""


def test_family_names_match_the_parser() -> None:
    families = {f.name: f for f in text_string_to_metric_families(EXPOSITION)}
    for name, fam in families.items():
        spec = METRICS[name]
        assert spec.kind == fam.type, name
        assert any(s.name.startswith(spec.sample) for s in fam.samples)
    accepted = families["vllm:spec_decode_num_accepted_tokens"].samples[0].value
    drafted = families["vllm:spec_decode_num_draft_tokens"].samples[0].value
    assert accepted / drafted == 0.7  # acceptance rate


@pytest.mark.parametrize("newest", ["0.33.0", "0.34.0"])
def test_metrics_by_release(newest: str) -> None:
    old, new = metrics_for("0.10.0"), metrics_for(newest)
    assert "vllm:gpu_cache_usage_perc" in old and "vllm:gpu_cache_usage_perc" not in new
    assert "vllm:time_per_output_token_seconds" in old
    assert (
        "vllm:inter_token_latency_seconds" not in old and "vllm:inter_token_latency_seconds" in new
    )
    assert "vllm:prompt_tokens_cached" in new and "vllm:prompt_tokens_cached" not in old
    for name in ("vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits", "vllm:num_requests_waiting",
                 "vllm:spec_decode_num_drafts", "vllm:generation_tokens"):  # fmt: skip
        assert name in old and name in new
    assert METRICS["vllm:prompt_tokens"].sample == "vllm:prompt_tokens_total"


def test_0_34_0_exposes_what_0_33_0_does() -> None:
    # vllm/v1/metrics/loggers.py and vllm/v1/spec_decode/metrics.py define the same families in
    # both wheels (tests/engines/test_vllm_catalog.py reads 0.34.0's)
    assert metrics_for("0.34.0") == metrics_for("0.33.0")
