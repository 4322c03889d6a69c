"""The simulator's vLLM log lines: per-release formats and format -> parse round trips, for the
startup figures and for every failure kind (-> classify_failure)."""

from __future__ import annotations

import pytest

from autotune.engines.base import FailureClass
from autotune.engines.vllm import (
    FAILURE_KINDS,
    VLLMLaunchReport,
    classify_failure,
    format_failure,
    format_startup_lines,
    parse_startup,
    supported_versions,
)
from autotune.engines.vllm.logformat import format_gib
from autotune.errors import ConfigError

# Figures of a 2 x 3090 TP2 Qwen3.6-27B launch (club-3090 issue 104), with settings spelled out.
REPORT = VLLMLaunchReport(
    weights_gib=8.85,
    kv_cache_gib=9.84,
    kv_pool_tokens=619202,
    max_concurrency=2.36,
    context_len=262144,
    graph_gib=0.41,
    graph_estimate_gib=0.49,
    gpu_memory_utilization=0.88,
    block_size=1568,
    max_num_batched_tokens=8192,
    max_num_seqs=2,
    kv_dtype="fp8_e5m2",
    quantization="auto_round",
    enforce_eager=False,
    enable_prefix_caching=True,
    enable_chunked_prefill=True,
    ready=True,
    simulated=True,
)
ROUND_TRIP = (
    "weights_gib",
    "kv_cache_gib",
    "kv_pool_tokens",
    "max_concurrency",
    "context_len",
    "graph_gib",
    "block_size",
    "max_num_batched_tokens",
    "chunked_prefill_size",
    "max_num_seqs",
    "max_running_requests",
    "kv_dtype",
    "quantization",
    "enforce_eager",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "engine_version",
    "ready",
    "simulated",
)


def _report_for(version: str) -> VLLMLaunchReport:
    from autotune.engines.vllm import at_least

    update: dict[str, object] = {
        "engine_version": version,
        "tensor_parallel_size": 2,
        "chunked_prefill_size": 8192,
        "max_running_requests": 2,
    }
    if not at_least(version, "0.18.0"):
        update["graph_estimate_gib"] = None  # no graph profiling before 0.18
    if not at_least(version, "0.11.1"):
        update["num_gpu_blocks"] = 411
    return REPORT.model_copy(update=update)


@pytest.mark.parametrize("version", supported_versions())
def test_round_trip_every_release(version: str) -> None:
    expected = _report_for(version)
    lines = format_startup_lines(version, expected, tp_size=2, total_gib=23.56)
    got = parse_startup("\n".join(lines))
    for key in ROUND_TRIP:
        assert getattr(got, key) == getattr(expected, key), (version, key)
    assert got.graph_estimate_gib == expected.graph_estimate_gib
    if expected.num_gpu_blocks is not None:
        assert got.num_gpu_blocks == 411


def test_release_specific_wording() -> None:
    old = "\n".join(format_startup_lines("0.10.0", _report_for("0.10.0"), tp_size=2))
    assert "(VllmWorker rank=1 pid=4242) INFO 03-01 12:00:00" in old
    assert "Model loading took 8.8500 GiB and 1.000000 seconds" in old
    assert "GPU KV cache size: 619,202 tokens\n" in old + "\n"
    assert "vLLM API server version 0.10.0" in old
    assert "Starting vLLM API server 0 on http://127.0.0.1:8000" in old
    assert "took 1.00 seconds" in old and "(APIServer" not in old
    mid = "\n".join(format_startup_lines("0.13.0", _report_for("0.13.0"), tp_size=2))
    assert "Model loading took 8.8500 GiB memory and" in mid and "(Worker_TP1 pid=" in mid
    new = "\n".join(format_startup_lines("0.33.0", _report_for("0.33.0"), tp_size=2,
                                         total_gib=23.56))  # fmt: skip
    assert "Model loading took 8.85 GiB memory and" in new
    assert ("GPU KV cache size: 619,202 tokens, Maximum concurrency for 262,144 tokens per "
            "request: 2.36x") in new  # fmt: skip
    assert "vLLM server version 0.33.0, serving model" in new
    assert (
        "--gpu-memory-utilization=0.8800 is equivalent to --gpu-memory-utilization=0.8592" in new
    )
    assert "Starting vLLM server on http://127.0.0.1:8000" in new
    assert "took 1.00 s\n" in new + "\n"
    assert format_gib(16.80) == "16.8"


def test_opt_in_graph_profiling_of_0_18() -> None:
    lines = format_startup_lines("0.18.1", _report_for("0.18.1"), total_gib=23.56)
    text = "\n".join(lines)
    assert "In v0.19, CUDA graph memory profiling will be enabled by default" in text
    on = format_startup_lines(
        "0.18.1", _report_for("0.18.1"), total_gib=23.56, estimate_cudagraphs=True
    )
    assert "This will become the default in v0.19" in "\n".join(on)
    assert parse_startup(text).gpu_memory_utilization == 0.88
    with pytest.raises(ConfigError, match="0.18.0"):
        format_startup_lines("0.17.1", REPORT.model_copy(update={"graph_estimate_gib": 0.5}))


def test_kv_line_needs_concurrency() -> None:
    with pytest.raises(ConfigError, match="max_concurrency"):
        format_startup_lines("0.20.2", REPORT.model_copy(update={"max_concurrency": None}))


OOM = dict(tried_gib=0.5, total_gib=23.56, free_gib=0.1, in_use_gib=23.4, allocated_gib=22.0)
EXPECTED = {
    "kv_cache_too_small": (
        FailureClass.KV_CACHE_OOM,
        dict(max_model_len=262144, needed_gib=12.1, available_gib=9.84, estimated_max_len=200000),
        "max_model_len 262144 needs 12.1",
    ),
    "no_cache_memory": (FailureClass.KV_CACHE_OOM, {}, "no memory for the KV cache"),
    "startup_free_memory": (
        FailureClass.CUDA_OOM,
        dict(free_gib=21.8, total_gib=22.0, gpu_memory_utilization=0.99),
        "less free memory at startup",
    ),
    "profile_oom": (FailureClass.CUDA_OOM, OOM, "profiling run"),
    "graph_capture_oom": (FailureClass.GRAPH_CAPTURE, OOM, "graph capture"),
    "engine_dead": (FailureClass.CRASH, dict(exit_code=-9), "exited before it was ready"),
}


@pytest.mark.parametrize("version", ["0.10.0", "0.14.0", "0.22.0", "0.33.0"])
@pytest.mark.parametrize("kind", FAILURE_KINDS)
def test_failure_round_trip(kind: str, version: str) -> None:
    cls, values, words = EXPECTED[kind]
    lines = format_failure(kind, version, **values)
    failure = classify_failure("\n".join(lines), 1, was_ready=False)
    assert failure.cls is cls, (kind, version, failure)
    assert words in failure.reason
    assert failure.evidence


def test_failure_wording_by_release() -> None:
    old = "\n".join(format_failure("kv_cache_too_small", "0.21.0", max_model_len=1, needed_gib=2,
                                   available_gib=1))  # fmt: skip
    new = "\n".join(format_failure("kv_cache_too_small", "0.22.0", max_model_len=1, needed_gib=2,
                                   available_gib=1))  # fmt: skip
    assert "the models's max seq len" in old and "the model's max seq len" in new
    dev = "\n".join(format_failure("startup_free_memory", "0.14.0", free_gib=1.0, total_gib=2.0,
                                   gpu_memory_utilization=0.9))  # fmt: skip
    assert "Free memory on device cuda:0 (1.0/2.0 GiB)" in dev
    with pytest.raises(ConfigError, match="unknown failure kind"):
        format_failure("nope", "0.20.2")
    with pytest.raises(ConfigError, match="needs exit_code"):
        format_failure("engine_dead", "0.20.2")
