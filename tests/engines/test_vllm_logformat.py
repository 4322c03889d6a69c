"""The simulator's vLLM log lines: per-release formats and format -> parse round trips, for the
startup figures and for every failure kind (-> classify_failure)."""

from __future__ import annotations

from typing import Any

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
from autotune.engines.vllm.printer import format_gib
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
    if at_least(version, "0.34.0"):
        update.update(EXTENSIBLE)  # vLLM's default from 0.34.0 (no graph estimate with it)
    return REPORT.model_copy(update=update)


# 0.34.0's extensible KV cache: kv_cache_gib (9.84) is then the size committed after warmup.
EXTENSIBLE: dict[str, object] = {
    "extensible_kv_cache": True,
    "graph_estimate_gib": None,
    "kv_reserve_gib": 10.12,
    "free_after_warmup_gib": 12.05,
    "warmup_kv_gib": 0.06,
    "transient_reserve_gib": 0.92,
    "transient_peak_gib": 0.92,
    "torch_reserve_growth_gib": 0.31,
    "requested_gib": 20.73,
    "torch_limit_gib": 11.1,
    "num_gpu_blocks": 411,
}


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
    if expected.extensible_kv_cache:
        for key in EXTENSIBLE:
            assert getattr(got, key) == getattr(expected, key), (version, key)
    else:
        assert got.kv_reserve_gib == expected.kv_cache_gib and got.extensible_kv_cache is None


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
EXPECTED: dict[str, tuple[FailureClass, dict[str, Any], str]] = {
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


@pytest.mark.parametrize("version", ["0.10.0", "0.14.0", "0.22.0", "0.33.0", "0.34.0"])
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


def _lines_0_34(**update: object) -> list[str]:
    report = _report_for("0.34.0").model_copy(update=update)
    return format_startup_lines("0.34.0", report, tp_size=2, total_gib=23.56)


def test_0_34_extensible_lines_in_vllms_order_and_wording() -> None:
    lines = _lines_0_34()
    text = "\n".join(lines)
    # Written by hand from the 0.34.0 wheel's format strings (format_gib: round(b / GiB, 2)):
    # v1/worker/gpu_worker.py determine_available_memory `Available KV cache memory: %s GiB`;
    # v1/worker/extensible_kv_cache.py measure_kv_cache_blocks `Memory after warmup: %s GiB free,
    # %s GiB committed to the KV cache, %s GiB kept for transient activations (%s GiB allocated
    # at peak, %s GiB of torch reservation growth); %d KV cache blocks (%s GiB) fit within the
    # requested %s GiB. Torch may reserve up to %s GiB.` and extend_kv_cache `Extended KV cache
    # to %d blocks (%.2f GiB).`; v1/core/kv_cache_utils.py update_kv_cache_capacity, called by
    # kv_cache_planning.py finalize_extensible_kv_cache after warmup.
    head = "(Worker_TP{} pid=4242) INFO 03-01 12:00:00 [{}] "
    available = "Available KV cache memory: 10.12 GiB"
    warmup = (
        "Memory after warmup: 12.05 GiB free, 0.06 GiB committed to the KV cache, 0.92 GiB kept "
        "for transient activations (0.92 GiB allocated at peak, 0.31 GiB of torch reservation "
        "growth); 411 KV cache blocks (9.84 GiB) fit within the requested 20.73 GiB. Torch may "
        "reserve up to 11.1 GiB."
    )
    extended = "Extended KV cache to 411 blocks (9.84 GiB)."
    capacity = (
        "(EngineCore_DP0 pid=4242) INFO 03-01 12:00:00 [kv_cache_utils.py:1305] GPU KV cache "
        "size: 619,202 tokens, Maximum concurrency for 262,144 tokens per request: 2.36x"
    )
    for rank in (0, 1):
        assert head.format(rank, "gpu_worker.py:359") + available in lines
        assert head.format(rank, "extensible_kv_cache.py:693") + warmup in lines
        assert head.format(rank, "extensible_kv_cache.py:536") + extended in lines
    # profile_cudagraph_memory returns 0 with the extensible cache: no estimate, no advice
    assert "Estimated CUDA graph memory" not in text and "--gpu-memory-utilization=" not in text

    def at(needle: str) -> list[int]:
        return [i for i, line in enumerate(lines) if needle in line]

    order = [
        at("Model loading took"),
        at(available),
        at("Graph capturing finished"),
        at("Memory after warmup"),
        [lines.index(capacity)],
        at("Extended KV cache"),
        at("init engine"),
        at("Starting vLLM server"),
    ]
    assert all(len(o) == (1 if i in (4, 6, 7) else 2) for i, o in enumerate(order))
    assert [i for o in order for i in o] == sorted(i for o in order for i in o)


def test_0_34_warning_remap_and_round_trip() -> None:
    lines = _lines_0_34(kv_withheld_gib=6.2, kv_remapped_from_blocks=420, enforce_eager=True)
    text = "\n".join(lines)
    # extensible_kv_cache.py: the logger.warning_once before the measurement (`%s` of the float)
    assert (
        "(Worker_TP0 pid=4242) WARNING 03-01 12:00:00 [extensible_kv_cache.py:662] "
        "gpu_memory_utilization=0.88 caps this instance at 20.73 GiB, keeping 6.2 GiB of free "
        "device memory out of the KV cache. The extensible KV cache is sized from the memory "
        "measured after warmup and CUDA graph capture, so vLLM's own use needs no headroom below "
        "1.0. Leave gpu_memory_utilization unset unless it leaves room for memory vLLM does not "
        "measure: other processes sharing the GPU (including ones that allocate on it later), the "
        "CPU on a unified-memory device, weight transfer buffers for weight updates, or a KV "
        "connector's own device buffers."
    ) in lines
    assert "Remapping the KV cache from 420 to 411 blocks to fit the measured budget." in text
    assert text.index("Remapping the KV cache") < text.index("Extended KV cache")
    assert "Graph capturing" not in text
    got = parse_startup(text)
    assert got.kv_withheld_gib == 6.2 and got.kv_remapped_from_blocks == 420
    assert got.kv_cache_gib == 9.84 and got.kv_reserve_gib == 10.12 and got.num_gpu_blocks == 411
    assert got.gpu_memory_utilization == 0.88 and got.requested_gib == 20.73
    assert any("caps this instance at 20.73 GiB" in w for w in got.warnings)


def test_0_34_without_the_extensible_cache() -> None:
    report = _report_for("0.33.0").model_copy(update={"engine_version": "0.34.0"})
    lines = format_startup_lines("0.34.0", report, tp_size=2, total_gib=23.56)
    text = "\n".join(lines)
    # the V1 model runner, the one that logged the estimate, is gone from 0.34.0
    assert "Estimated CUDA graph memory" not in text
    assert "Available KV cache memory: 9.84 GiB" in text and "Memory after warmup" not in text
    assert "--gpu-memory-utilization=0.8800 is equivalent to" in text
    assert text.index("GPU KV cache size") < text.index("Graph capturing finished")
    got = parse_startup(text)
    assert got.kv_cache_gib == 9.84 and got.gpu_memory_utilization == 0.88
    assert got.graph_estimate_gib is None and got.extensible_kv_cache is None
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0: gpu_worker.py's 0.34.0 logger.warning names no
    # utilisation any more, and is not printed with the extensible cache
    off = "\n".join(
        format_startup_lines("0.34.0", report, total_gib=23.56, estimate_cudagraphs=False)
    )
    assert (
        "WARNING 03-01 12:00:00 [gpu_worker.py:359] CUDA graph memory profiling is disabled "
        "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not "
        "accounted for during KV cache allocation, which may require lowering "
        "--gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of "
        "v0.21.0).\n"
    ) in off + "\n"
    ext = "\n".join(
        format_startup_lines(
            "0.34.0", _report_for("0.34.0"), total_gib=23.56, estimate_cudagraphs=False
        )
    )
    assert "CUDA graph memory profiling is disabled" not in ext


def test_0_34_figures_the_format_cannot_express() -> None:
    with pytest.raises(ConfigError, match="no extensible KV cache"):
        format_startup_lines("0.33.0", REPORT.model_copy(update=EXTENSIBLE))
    with pytest.raises(ConfigError, match="no graph estimate"):
        _lines_0_34(graph_estimate_gib=0.49)
    with pytest.raises(ConfigError, match="needs torch_limit_gib"):
        _lines_0_34(torch_limit_gib=None)
    with pytest.raises(ConfigError, match="needs requested_gib"):
        _lines_0_34(kv_withheld_gib=2.0, requested_gib=None)
    # transient_reserve_gib unset: the larger of the peak and the torch growth
    assert "1.5 GiB kept for transient activations" in "\n".join(
        _lines_0_34(transient_reserve_gib=None, torch_reserve_growth_gib=1.5)
    )


@pytest.mark.parametrize("version", ["0.10.0", "0.20.2", "0.33.0"])
def test_older_releases_ignore_the_0_34_figures(version: str) -> None:
    """Byte-identical lines: the new figures print nothing before 0.34.0 (extensible unset)."""
    report = _report_for(version)
    figures = {k: v for k, v in EXTENSIBLE.items() if k not in ("extensible_kv_cache",)}
    figures["graph_estimate_gib"] = report.graph_estimate_gib
    figures["num_gpu_blocks"] = report.num_gpu_blocks
    figures.update(kv_withheld_gib=6.2, kv_remapped_from_blocks=420)
    with_figures = report.model_copy(update=figures)
    assert format_startup_lines(version, with_figures, tp_size=2, total_gib=23.56) == (
        format_startup_lines(version, report, tp_size=2, total_gib=23.56)
    )
