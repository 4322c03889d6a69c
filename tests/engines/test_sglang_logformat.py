"""The simulator's SGLang log lines: exact per-version formats and format -> parse round trips."""

from __future__ import annotations

import pytest

from autotune.engines.base import FailureClass, LaunchReport
from autotune.engines.sglang import (
    FAILURE_KINDS,
    SUPPORTED_VERSIONS,
    classify_failure,
    format_failure,
    format_startup_lines,
    parse_startup,
)
from autotune.engines.sglang.logformat import decode_capture_bs, format_size
from autotune.errors import ConfigError

# FIELD-NOTES C1 (0.5.17, 4080 SUPER, default 34 slots) with a prefill graph and HiCache.
C1 = LaunchReport(
    weights_gib=16.53,
    kv_pool_tokens=183838,
    kv_k_gib=2.81,
    kv_v_gib=2.81,
    mamba_slots=34,
    mamba_conv_gib=0.10,
    mamba_ssm_gib=4.92,
    graph_gib=0.55,
    max_total_num_tokens=183838,
    chunked_prefill_size=2048,
    max_prefill_tokens=16384,
    max_running_requests=2,
    context_len=131072,
    available_gpu_mem_gib=3.29,
    host_pool_tokens=393216,
    host_pool_gb=12.0,
    ready=True,
    warnings=[
        "max_total_tokens=200000 is larger than the profiled value 183838. Use the profiled value instead."
    ],
)
# 0.5.9 cannot log host-pool tokens nor a mamba host pool.
C1_OLD = C1.model_copy(update={"host_pool_tokens": None})
SPEC = C1.model_copy(update={"mamba_spec_gib": 2.27, "simulated": True})


def test_0_5_9_lines_verbatim() -> None:
    lines = format_startup_lines(
        "0.5.9", C1_OLD, kv_dtype_torch="torch.float8_e4m3fn", prefill_graph_gib=0.25
    )
    assert lines == [
        "[2026-03-01 12:00:00] Load weight begin. avail mem=31.01 GB",
        "[2026-03-01 12:00:00] Load weight end. elapsed=1.00 s, "
        "type=Qwen3_5ForConditionalGeneration, dtype=torch.bfloat16, avail mem=14.48 GB, "
        "mem usage=16.53 GB.",
        "[2026-03-01 12:00:00] KV Cache is allocated. #tokens: 183838, K size: 2.81 GB, "
        "V size: 2.81 GB",
        "[2026-03-01 12:00:00] Mamba Cache is allocated. max_mamba_cache_size: 34, "
        "conv_state size: 0.10GB, ssm_state size: 4.92GB ",
        "[2026-03-01 12:00:00] Capture cuda graph end. Time elapsed: 1.00 s. mem usage=0.30 GB. "
        "avail mem=3.54 GB.",
        "[2026-03-01 12:00:00] Capture piecewise CUDA graph end. Time elapsed: 1.00 s. "
        "mem usage=0.25 GB. avail mem=3.29 GB.",
        "[2026-03-01 12:00:00] Allocating 12.00 GB host memory for hierarchical KV cache.",
        "[2026-03-01 12:00:00] max_total_tokens=200000 is larger than the profiled value 183838. "
        "Use the profiled value instead.",
        "[2026-03-01 12:00:00] max_total_num_tokens=183838, chunked_prefill_size=2048, "
        "max_prefill_tokens=16384, max_running_requests=2, context_len=131072, "
        "available_gpu_mem=3.29 GB",
        "[2026-03-01 12:00:00] The server is fired up and ready to roll!",
    ]


def test_0_5_23_lines_verbatim_tp2() -> None:
    lines = format_startup_lines(
        "0.5.23",
        SPEC,
        tp_size=2,
        quant_str="quant=compressed-tensors",
        speculative=True,
        capture_bs=[1, 2, 4],
        host_mamba_gb=6.16,
        host_mamba_slots=68,
        mamba_conv_window_gib=0.02,
    )
    assert lines[0].endswith(
        "autotune simulated SGLang engine: figures come from a model, not a GPU."
    )
    tp0 = [ln for ln in lines if " TP0] " in ln]
    tp1 = [ln for ln in lines if " TP1] " in ln]
    assert len(tp0) == len(tp1) + 3  # host pools and summary come from rank 0 only
    assert tp0[1] == (
        "[2026-03-01 12:00:00 TP0] Load weight end. elapsed=1.00 s, type="
        "Qwen3_5ForConditionalGeneration, quant=compressed-tensors, avail mem=16.75 GB, "
        "mem usage=16.53 GB."
    )
    assert tp0[2] == (
        "[2026-03-01 12:00:00 TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, "
        "#tokens: 183838, K size: 2.81 GB, V size: 2.81 GB"
    )
    assert tp0[3] == (
        "[2026-03-01 12:00:00 TP0] Mamba Cache is allocated. max_mamba_cache_size: 34, "
        "conv_state size: 0.10GB, ssm_state size: 4.92GB intermediate_ssm_state_cache size: "
        "2.25GB intermediate_conv_window_cache size: 0.02GB "
    )
    assert tp0[4] == (
        "[2026-03-01 12:00:00 TP0] Capture target verify CUDA graph end. bs=[1, 2, 4], "
        "elapsed=1.00 s, mem usage=0.55 GB, avail mem=3.29 GB."
    )
    assert tp0[5] == (
        "[2026-03-01 12:00:00 TP0] Allocating kv hierarchical KV host pool: 393216 tokens, "
        "5.84 GB host memory."
    )
    assert tp0[6] == (
        "[2026-03-01 12:00:00 TP0] Allocating 6.16 GB host memory for hierarchical Mamba cache "
        "(68 state slots, layout=page_first)."
    )
    assert lines[-1] == "[2026-03-01 12:00:00] The server is fired up and ready to roll!"


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize("tp_size", [1, 2])
def test_round_trip_every_version(version: str, tp_size: int) -> None:
    minor = int(version.split(".")[2])
    # The free memory before weights is printed by `Load weight begin` and read back.
    report = (C1 if minor >= 17 else C1_OLD).model_copy(
        update={"kv_dtype": None, "free_before_weights_gib": 30.9}
    )
    lines = format_startup_lines(version, report, tp_size=tp_size, prefill_graph_gib=0.25)
    parsed = parse_startup("\n".join(lines) + "\n")
    expected = report.model_copy(
        update={"kv_dtype": "torch.float8_e4m3fn" if minor >= 13 else None}
    )
    assert parsed == expected


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_round_trip_spec_and_simulated(version: str) -> None:
    report = SPEC.model_copy(update={"host_pool_tokens": None if version == "0.5.9" else 393216})
    kwargs = {} if version == "0.5.9" else {"host_mamba_gb": 6.16, "host_mamba_slots": 68}
    lines = format_startup_lines(
        version, report, speculative=True, kv_dtype_torch="torch.bfloat16", **kwargs
    )
    parsed = parse_startup("\n".join(lines))
    assert parsed.simulated and parsed.mamba_spec_gib == pytest.approx(2.27)
    assert parsed.host_pool_gb == pytest.approx(12.0)
    assert parsed.kv_dtype == (None if version == "0.5.9" else "torch.bfloat16")
    # The report did not state it; the formatter derives it from the figures after weights.
    assert parsed.free_before_weights_gib is not None and report.weights_gib is not None
    assert parsed.free_before_weights_gib > report.weights_gib
    derived = {"kv_dtype", "mamba_spec_gib", "host_pool_gb", "free_before_weights_gib"}
    assert parsed.model_dump(exclude=derived) == report.model_dump(exclude=derived)


def test_formats_the_version_cannot_express() -> None:
    with pytest.raises(ConfigError, match="host_pool_tokens"):
        format_startup_lines("0.5.17", C1_OLD)
    with pytest.raises(ConfigError, match="Mamba host pool"):
        format_startup_lines("0.5.9", C1_OLD, host_mamba_gb=1.0)
    with pytest.raises(ConfigError, match="--engine-version"):
        format_startup_lines("0.4.0", C1)


def test_capture_bs_and_sizes() -> None:
    assert decode_capture_bs(4) == [1, 2, 4]
    assert decode_capture_bs(24)[-3:] == [12, 16, 24]
    assert decode_capture_bs(6, speculative=True) == [1, 2, 3, 4, 5, 6]
    assert format_size(512) == "512 bytes"
    assert format_size(512 * 2**20) == "512.00 MiB"
    assert format_size(2 * 2**30) == "2.00 GiB"


# --- failures: SGLang's own text, then classified back -------------------------------------

OOM_VALUES = {
    "tried_gib": 2.0,
    "total_gib": 31.99,
    "free_gib": 1.12,
    "in_use_gib": 30.85,
    "allocated_gib": 29.5,
    "reserved_unallocated_gib": 0.5,
}
CASES: list[tuple[str, dict[str, object], FailureClass]] = [
    ("kv_cache_oom", {"mem_fraction_static": 0.85}, FailureClass.KV_CACHE_OOM),
    (
        "weights_leave_no_memory",
        {"mem_fraction_static": 0.5, "available_gib": 10.0, "pre_gib": 31.0},
        FailureClass.KV_CACHE_OOM,
    ),
    (
        "mamba_cache_oom",
        {"max_mamba_cache_size": 0, "total_rest_gib": 0.1, "per_req_mb": 146.81},
        FailureClass.MAMBA_CACHE_OOM,
    ),
    (
        "mamba_too_small",
        {"max_mamba_cache_size": 4, "ratio": 5, "max_num_reqs": 0},
        FailureClass.MAMBA_CACHE_OOM,
    ),
    ("mamba_alloc", {}, FailureClass.MAMBA_CACHE_OOM),
    ("cuda_oom", OOM_VALUES, FailureClass.CUDA_OOM),
    ("graph_capture", OOM_VALUES, FailureClass.GRAPH_CAPTURE),
    ("host_memory", {"requested_gb": 48.0, "available_gb": 20.5}, FailureClass.HOST_MEMORY),
    ("scheduler_dead", {"exit_code": -9}, FailureClass.CRASH),
]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.17", "0.5.23"])
@pytest.mark.parametrize(("kind", "values", "cls"), CASES)
def test_failure_text_classifies_back(
    version: str, kind: str, values: dict[str, object], cls: FailureClass
) -> None:
    if kind.startswith("mamba_") and kind != "mamba_alloc" and version == "0.5.9":
        with pytest.raises(ConfigError, match="no message of its own"):
            format_failure(kind, version, **values)
        return
    text = "\n".join(format_failure(kind, version, **values))
    failure = classify_failure(text, -9, was_ready=kind == "mamba_alloc")
    assert failure.cls is cls, text
    assert failure.evidence and failure.reason


def test_failure_texts_verbatim() -> None:
    old = format_failure("kv_cache_oom", "0.5.9", mem_fraction_static=0.85)
    assert (
        old[0]
        == "[2026-03-01 12:00:00] Scheduler hit an exception: Traceback (most recent call last):"
    )
    assert (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: self.server_args.mem_fraction_static=0.85"
    ) in old
    assert old[-1] == (
        "[2026-03-01 12:00:00] Received sigquit from a child process. It usually means the "
        "child failed."
    )
    new = format_failure("kv_cache_oom", "0.5.23", mem_fraction_static=0.85, tp_size=2)
    assert new[0].startswith("[2026-03-01 12:00:00 TP0] Scheduler hit an exception")
    assert new[-3].endswith("Current value: mem_fraction_static=0.85")
    # before 0.5.14 weights that leave nothing surface as the plain KV message
    assert format_failure(
        "weights_leave_no_memory", "0.5.12", mem_fraction_static=0.5, available_gib=1, pre_gib=2
    ) == format_failure("kv_cache_oom", "0.5.12", mem_fraction_static=0.5)
    w = "\n".join(
        format_failure(
            "weights_leave_no_memory",
            "0.5.23",
            mem_fraction_static=0.5,
            available_gib=10.0,
            pre_gib=31.0,
        )
    )
    assert (
        "Raise --mem-fraction-static above 0.678 (minimum viable = 1 - available/pre = 0.6774)"
        in w
    )
    g = format_failure("graph_capture", "0.5.9", **OOM_VALUES)
    assert any(
        ln.startswith("Exception: Capture cuda graph failed: CUDA out of memory.") for ln in g
    )
    assert "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)" in g
    g = format_failure("graph_capture", "0.5.23", **OOM_VALUES)
    assert "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)" in g
    h = format_failure("host_memory", "0.5.17", requested_gb=48.0, available_gb=20.5)
    assert (
        "ValueError: Not enough host memory available. Requesting 48.00 GB but only have 20.50 "
        "GB free. Please reduce the size of the hierarchical cache."
    ) in h
    assert format_failure("scheduler_dead", "0.5.9", exit_code=-9) == [
        "[2026-03-01 12:00:00] Rank 0 scheduler is dead. Please check if there are relevant logs.",
        "[2026-03-01 12:00:00] Exit code: -9",
    ]


def test_failure_bad_requests() -> None:
    with pytest.raises(ConfigError, match="unknown failure kind"):
        format_failure("meteor", "0.5.23")
    with pytest.raises(ConfigError, match="mem_fraction_static"):
        format_failure("kv_cache_oom", "0.5.23")
    assert "kv_cache_oom" in FAILURE_KINDS
