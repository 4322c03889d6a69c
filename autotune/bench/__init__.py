"""Benchmark client: streamed OpenAI-compatible requests against SGLang, vLLM, llama-server or
the simulator; scenarios, per-request measurements, aggregates and /metrics deltas.

Heavy-ish imports (httpx, numpy, prometheus_client) happen when this package is imported, never
from ``autotune`` or ``autotune.cli`` at start-up.
"""

from autotune.bench.benchmark import run_benchmark, run_benchmark_async
from autotune.bench.client import RequestSpec, discover_model, stream_request
from autotune.bench.metrics import (
    compute_stats,
    latency_stats,
    metrics_delta,
    parse_metrics_text,
    percentiles,
    scrape_metrics,
)
from autotune.bench.prompts import TEXT_KINDS, estimate_tokens, make_text
from autotune.bench.results import (
    BenchmarkReport,
    LatencyStats,
    MetricsDelta,
    PointResult,
    RequestResult,
    RunStats,
    ScenarioResult,
    Spread,
)
from autotune.bench.runner import ScenarioFailed, normalize_base_url, run_scenario
from autotune.bench.scenarios import (
    SCENARIO_CLASSES,
    AgentScenario,
    AnyScenario,
    DecodeScenario,
    LongContextScenario,
    PrefillScenario,
    Scenario,
    ThroughputScenario,
    load_scenarios_file,
    parse_scenario,
    scenario_from_dict,
)

__all__ = [
    "SCENARIO_CLASSES",
    "TEXT_KINDS",
    "AgentScenario",
    "AnyScenario",
    "BenchmarkReport",
    "DecodeScenario",
    "LatencyStats",
    "LongContextScenario",
    "MetricsDelta",
    "PointResult",
    "PrefillScenario",
    "RequestResult",
    "RequestSpec",
    "RunStats",
    "Scenario",
    "ScenarioFailed",
    "ScenarioResult",
    "Spread",
    "ThroughputScenario",
    "compute_stats",
    "discover_model",
    "estimate_tokens",
    "latency_stats",
    "load_scenarios_file",
    "make_text",
    "metrics_delta",
    "normalize_base_url",
    "parse_metrics_text",
    "parse_scenario",
    "percentiles",
    "run_benchmark",
    "run_benchmark_async",
    "run_scenario",
    "scenario_from_dict",
    "scrape_metrics",
    "stream_request",
]
