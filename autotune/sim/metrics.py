"""`/metrics` of the simulated engine: the SGLang metrics the adapter reads (its `METRICS` table:
names, types, help texts, extra labels), with SGLang's scheduler labels, one prometheus_client
registry per server (sglang-internals §4.1).

Counters and gauges are read from the scheduler at scrape time, in SGLang's semantics: prompt and
generation token counters move when a request finishes, `cached_tokens_total` is split by
`cache_source` (device/host), gauges hold the latest state. Latency histograms are observed by
the server as requests stream. A few HiCache/eviction series SGLang also exports are added.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Protocol

import prometheus_client
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from autotune.engines.sglang import METRICS
from autotune.sim.scheduler import Scheduler

# SGLang's default buckets (metrics/collector.py); end-to-end latency extends the TTFT ones.
_TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
BUCKETS = {
    "sglang:time_to_first_token_seconds": _TTFT_BUCKETS,
    "sglang:e2e_request_latency_seconds": [*_TTFT_BUCKETS, 600, 1200, 1800, 2400],
    "sglang:inter_token_latency_seconds": [
        0.002,
        0.004,
        0.006,
        0.008,
        0.01,
        0.015,
        0.02,
        0.025,
        0.03,
        0.035,
        0.04,
        0.06,
        0.08,
        0.1,
        0.2,
        0.4,
        0.6,
        0.8,
        1.0,
        2.0,
    ],
    "sglang:queue_time_seconds": [
        0.0,
        0.1,
        0.2,
        0.5,
        1,
        2,
        3,
        4,
        5,
        10,
        15,
        20,
        30,
        40,
        50,
        60,
        100,
        200,
        300,
        600,
        1200,
        2400,
    ],
}
LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")

# SGLang never exposes `_created` samples (multiprocess registry); neither do we.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

# A counter's or gauge's value at scrape time: one sample, or one per value of an extra label.
SampleValue = float | dict[str, float]


class Observer(Protocol):
    def observe(self, value: float, /) -> None: ...


class ServerMetrics(Protocol):
    """What a simulated server needs of its /metrics registry: the latency histograms it
    observes as requests stream, and the exposition text."""

    @property
    def ttft(self) -> Observer: ...

    @property
    def itl(self) -> Observer: ...

    @property
    def e2e(self) -> Observer: ...

    @property
    def queue(self) -> Observer: ...

    def exposition(self) -> bytes: ...


class _SchedulerCollector:
    def __init__(self, sched: Scheduler, labels: list[str], extra: Callable[[], dict[str, float]]):
        self.sched = sched
        self.labels = labels
        self.extra = extra

    def _values(self) -> dict[str, SampleValue]:
        """Current value of each counter/gauge, by metric family name."""
        s, st, extra = self.sched, self.sched.stats, self.extra()
        hits = st.cached_device + st.cached_host
        return {
            "sglang:prompt_tokens": st.prompt_tokens,
            "sglang:generation_tokens": st.generation_tokens,
            "sglang:cached_tokens": {"device": st.cached_device, "host": st.cached_host},
            "sglang:num_requests": extra.get("num_requests", st.num_requests),
            "sglang:num_retracted_requests": 0,  # the simulator reserves, never retracts
            "sglang:spec_accept_length": st.spec_accept_length,
            "sglang:spec_accept_rate": st.spec_accept_rate,
            "sglang:num_running_reqs": len(s.running),
            "sglang:num_queue_reqs": s.num_queued(),
            "sglang:num_used_tokens": s.used_tokens(),
            "sglang:token_usage": s.token_usage(),
            "sglang:mamba_usage": s.mamba_usage(),
            "sglang:gen_throughput": extra.get("gen_throughput", st.gen_throughput),
            "sglang:cache_hit_rate": hits / st.prompt_tokens if st.prompt_tokens else 0.0,
            "sglang:max_total_num_tokens": s.kv_capacity,
            "sglang:num_retracted_reqs": {str(os.getpid()): 0},
            # not in the adapter's table; SGLang exports them too
            "sglang:num_aborted_requests": extra.get("num_aborted_requests", 0),
            "sglang:evicted_tokens": s.cache.evicted_tokens,
            "sglang:load_back_tokens": st.load_back_tokens,
            "sglang:backuped_tokens": s.cache.backup_tokens,
        }

    def collect(self) -> Iterator[Metric]:
        values = self._values()
        specs = {name: (spec.kind, spec.doc, spec.labels) for name, spec in METRICS.items()}
        for name, doc in (
            ("sglang:num_aborted_requests", "Number of requests aborted."),
            ("sglang:evicted_tokens", "Number of evicted tokens."),
            ("sglang:load_back_tokens", "Number of tokens loaded back from host."),
            ("sglang:backuped_tokens", "Number of backuped tokens."),
        ):
            specs[name] = ("counter", doc, ())
        for name, (kind, doc, extra_labels) in specs.items():
            if kind == "histogram" or name not in values:
                continue
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            fam = cls(name, doc, labels=[*LABELS, *extra_labels])
            value = values[name]
            if isinstance(value, dict):  # one sample per value of the extra label
                for label_value, v in value.items():
                    fam.add_metric([*self.labels, label_value], float(v))
            else:
                fam.add_metric(self.labels, float(value))
            yield fam
        s = self.sched
        info = GaugeMetricFamily(
            "sglang:cache_config_info",
            "Cache configuration information.",
            labels=["page_size", "num_pages"],
        )
        info.add_metric([str(s.page), str(s.kv_capacity // max(s.page, 1))], 1.0)
        yield info


class SimMetrics:
    """The registry behind one simulated server's /metrics."""

    def __init__(
        self, sched: Scheduler, model_name: str, extra: Callable[[], dict[str, float]] = dict
    ):
        self.registry = CollectorRegistry(auto_describe=False)
        self.labels = [model_name, "unified", "0", "0", "0"]
        self.registry.register(_SchedulerCollector(sched, self.labels, extra))
        docs = {n: s.doc for n, s in METRICS.items() if s.kind == "histogram"}
        docs["sglang:queue_time_seconds"] = "Histogram of queueing time in seconds."
        hists = {
            name: Histogram(
                name,
                doc,
                LABELS,
                buckets=BUCKETS.get(name, Histogram.DEFAULT_BUCKETS),
                registry=self.registry,
            ).labels(*self.labels)
            for name, doc in docs.items()
        }
        self.ttft = hists["sglang:time_to_first_token_seconds"]
        self.itl = hists["sglang:inter_token_latency_seconds"]
        self.e2e = hists["sglang:e2e_request_latency_seconds"]
        self.queue = hists["sglang:queue_time_seconds"]

    def exposition(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)


# -- vLLM ---------------------------------------------------------------------------------------

# vLLM's default buckets (vllm/v1/metrics/buckets.py).
VLLM_LATENCY_BUCKETS = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
]  # fmt: skip
VLLM_TTFT_BUCKETS = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
]  # fmt: skip
VLLM_ITL_BUCKETS = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
]  # fmt: skip
VLLM_BUCKETS = {
    "vllm:time_to_first_token_seconds": VLLM_TTFT_BUCKETS,
    "vllm:inter_token_latency_seconds": VLLM_ITL_BUCKETS,
    "vllm:time_per_output_token_seconds": VLLM_ITL_BUCKETS,
    "vllm:e2e_request_latency_seconds": VLLM_LATENCY_BUCKETS,
    "vllm:request_queue_time_seconds": VLLM_LATENCY_BUCKETS,
}
VLLM_LABELS = ("model_name", "engine")


class _VLLMCollector:
    """Counters and gauges in vLLM's semantics, read from the scheduler at scrape time: prefix
    cache queries and hits in tokens, speculative drafts / draft tokens / accepted draft tokens
    (the bonus token not counted, so mean accepted length = 1 + accepted / drafts)."""

    def __init__(
        self,
        sched: Scheduler,
        labels: list[str],
        names: set[str],
        extra: Callable[[], dict[str, dict[str, int]]],
        cache_info: dict[str, str],
    ):
        self.sched, self.labels, self.names = sched, labels, names
        self.extra, self.cache_info = extra, cache_info

    def _values(self) -> dict[str, SampleValue]:
        s, st, extra = self.sched, self.sched.stats, self.extra()
        hits = st.cached_device + st.cached_host
        drafts = st.spec_verify_ct
        usage = s.token_usage()
        return {
            "vllm:num_requests_running": len(s.running),
            "vllm:num_requests_waiting": s.num_queued(),
            "vllm:kv_cache_usage_perc": usage,
            "vllm:gpu_cache_usage_perc": usage,
            "vllm:prompt_tokens": st.prompt_tokens,
            "vllm:generation_tokens": st.generation_tokens,
            "vllm:prompt_tokens_cached": hits,
            "vllm:prefix_cache_queries": st.prompt_tokens,
            "vllm:prefix_cache_hits": hits,
            "vllm:gpu_prefix_cache_queries": st.prompt_tokens,
            "vllm:gpu_prefix_cache_hits": hits,
            "vllm:num_preemptions": 0,  # the simulator reserves the output, never preempts
            "vllm:request_success": dict(extra.get("finished", {})),
            "vllm:spec_decode_num_drafts": drafts,
            "vllm:spec_decode_num_draft_tokens": drafts * s.spec_d,
            "vllm:spec_decode_num_accepted_tokens": max(st.spec_accepted - drafts, 0),
        }

    def collect(self) -> Iterator[Metric]:
        from autotune.engines.vllm.metrics import METRICS as VLLM_METRICS

        values = self._values()
        for name in sorted(self.names):
            spec = VLLM_METRICS[name]
            if spec.kind == "histogram" or name not in values:
                continue
            cls = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
            fam = cls(name, spec.doc, labels=[*VLLM_LABELS, *spec.labels])
            value = values[name]
            if isinstance(value, dict):
                for label_value, v in value.items():
                    fam.add_metric([*self.labels, label_value], float(v))
            else:
                fam.add_metric(self.labels, float(value))
            yield fam
        if "vllm:cache_config_info" in self.names:
            info = GaugeMetricFamily(
                "vllm:cache_config_info",
                "Information of the LLMEngine CacheConfig",
                labels=[*VLLM_LABELS, *self.cache_info],
            )
            info.add_metric([*self.labels, *self.cache_info.values()], 1.0)
            yield info


class VLLMSimMetrics:
    """The registry behind a simulated vLLM server's /metrics: the `vllm:` families the vLLM
    adapter's table lists for the release (engines/vllm/metrics.py), labels model_name and
    engine."""

    def __init__(
        self,
        sched: Scheduler,
        model_name: str,
        version: str,
        extra: Callable[[], dict[str, dict[str, int]]],
        cache_info: dict[str, str],
    ):
        from autotune.engines.vllm.metrics import metrics_for

        specs = metrics_for(version)
        self.registry = CollectorRegistry(auto_describe=False)
        self.labels = [model_name, "0"]
        self.registry.register(_VLLMCollector(sched, self.labels, set(specs), extra, cache_info))
        hists = {
            name: Histogram(
                name,
                spec.doc,
                VLLM_LABELS,
                buckets=VLLM_BUCKETS.get(name, Histogram.DEFAULT_BUCKETS),
                registry=self.registry,
            ).labels(*self.labels)
            for name, spec in specs.items()
            if spec.kind == "histogram"
        }
        self.ttft = hists["vllm:time_to_first_token_seconds"]
        self.e2e = hists["vllm:e2e_request_latency_seconds"]
        self.queue = hists["vllm:request_queue_time_seconds"]
        # inter_token_latency from 0.10.2, time_per_output_token up to 0.14.1: both observed
        self._itl = [
            h
            for n, h in hists.items()
            if n in ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
        ]
        self.itl = self

    def observe(self, value: float) -> None:
        """The server observes inter-token gaps through `self.itl`."""
        for h in self._itl:
            h.observe(value)

    def exposition(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)
