"""The NVIDIA GB10 (DGX Spark) records' own arithmetic: where their KV budgets went.

On the Spark's unified memory both engines read free memory as psutil's available host memory
(test_vllm_release_rules.test_unified_memory_free_is_the_hosts; SGLang's get_available_gpu_memory,
props.is_integrated), so whatever host memory the box takes between two readings leaves the KV
budget. These tests check what each record's lines pin (the figures its notes quote): the KV
layout turns the logged budget into the logged tokens, so the misses sit in the budget, and the
budget's other terms leave the host's share. The replay takes SGLang's reading after the weights
from the log, so only what the host took after that line is left over. Nothing here is fitted:
the checks are the releases' own formulas (read from the wheels) on the logged figures.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest

from autotune.calibration.records import LaunchRecord, load_record
from autotune.calibration.replay import replay
from autotune.engines.vllm.logs import VLLMLaunchReport
from autotune.planner.vllm import VLLMPlan
from tests.wheels import function_def, wheel_text

DATA = Path(__file__).resolve().parents[1] / "data" / "real_launches"
GIB = 1 << 30
# CUDA's total on the Spark of sostrowsk/dgx-spark-local-llm, as its SGLang log states
# ('Reported total GPU memory per device (MiB): [124546]', sglang-versuch2.log).
SPARK_TOTAL_MIB = 124546
# The 0.5.11 runs of one setup (Qwen2.5-1.5B-Instruct) on jethac/dgx-spark-hijinks's Spark.
QWEN = sorted((DATA / "sglang").glob("s1[78]?-qwen2.5-1.5b-instruct-*gb10-tp1*.yaml"))
SOSTROWSK = [
    r
    for r in (load_record(p) for p in sorted((DATA / "vllm").glob("*gb10*.yaml")))
    if "sostrowsk/dgx-spark-local-llm" in r.source
]


def _gib(pattern: str, log: str) -> float:
    m = re.search(pattern, log)
    assert m is not None, pattern
    return float(m.group(1))


def _host_share(record: LaunchRecord) -> float:
    """The figure the record's unmodelled entry quotes as host memory."""
    text = " ".join(record.unmodelled)
    m = re.search(r"here ([\d.]+) GiB beyond the planner", text)
    assert m is not None, record.source
    return float(m.group(1))


def test_the_qwen_runs_are_one_setup() -> None:
    assert len(QWEN) == 13
    assert {load_record(p).version for p in QWEN} == {"0.5.11"}


@pytest.mark.parametrize("path", QWEN, ids=lambda p: p.stem)
def test_sglang_pool_is_the_rule_on_a_later_reading(path: Path) -> None:
    """0.5.11 sizes the pool from the free memory read after loading less the pre-load reading x
    (1 - mem_fraction_static). The pool's bytes (tokens x the planner's cell) are the logged K and
    V sizes (FP4: and their scales), and put that later reading below the `Load weight end` one: free memory only fell."""
    rule = ast.unparse(
        function_def(
            wheel_text(
                "sglang", "0.5.11", "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
            ),
            "_profile_available_bytes",
        )
    )
    assert "rest_memory = post_model_load_memory - pre_model_load_memory * (1 - " in rule
    record = load_record(path)
    got = replay(record)
    assert got.plan is not None
    log = record.log
    begin = _gib(r"Load weight begin\. avail mem=([\d.]+)", log)
    end = _gib(r"Load weight end.*?avail mem=([\d.]+)", log)
    usage = _gib(r"mem usage=([\d.]+) GB\.", log)
    assert begin - end == pytest.approx(usage, abs=0.015)  # the line's own subtraction
    tokens = got.observed.kv_pool_tokens or got.observed.max_total_num_tokens
    assert tokens is not None
    pool = tokens * got.plan.kv_cell_bytes / GIB
    k_size = _gib(r"K size: ([\d.]+) GB", log)
    if "float4_e2m1fn_x2" in log:  # the K and V lines count the packed values, not the scales
        k_size *= 9 / 8  # one fp8 scale per 16 FP4 values: 1/8 of their bytes beside them
    assert pool == pytest.approx(2 * k_size, abs=0.011)
    mfs = record.args["mem_fraction_static"]
    assert isinstance(mfs, float)
    read = pool + begin * (1 - mfs)
    assert 0 < end - read < 0.3
    # The replay plans from the logged reading after weights (planner.sglang._others_gib): what
    # it over-predicts is only what the host took between that line and the pool's reading.
    predicted = got.plan.kv_pool_tokens * got.plan.kv_cell_bytes / GIB
    assert predicted - pool == pytest.approx(end - read, abs=0.01)
    if not record.unmodelled:  # the runs with about 112 GiB free the notes quote
        assert 3.25 <= usage <= 3.30
        assert 0.04 <= end - read <= 0.065


@pytest.mark.parametrize("record", SOSTROWSK, ids=lambda r: Path(r.source).stem)
def test_vllm_budget_leaves_the_host_share(record: LaunchRecord) -> None:
    """0.25.1: KV = ceil(total x utilisation) - weights - the profile's torch peak increase - the
    non-torch increase - the CUDA graph estimate. On the logged weights, KV and estimate, the
    remainder beyond the planner's torch peak and non-torch figures is the host share the notes
    quote; the planner's cells turn the logged KV memory into the logged tokens."""
    worker = wheel_text("vllm", "0.25.1", "vllm/v1/worker/gpu_worker.py")
    budget = ast.unparse(function_def(worker, "determine_available_memory"))
    assert "profile_result.non_torch_increase + profile_result.torch_peak_increase" in budget
    assert "self.requested_memory - profile_result.non_kv_cache_memory" in budget
    assert "- cudagraph_memory_estimate_applied" in budget
    got = replay(record)
    plan, obs = got.plan, got.observed
    assert isinstance(plan, VLLMPlan) and isinstance(obs, VLLMLaunchReport)
    weights, kv, graph = obs.weights_gib, obs.kv_cache_gib, obs.graph_estimate_gib
    assert weights is not None and kv is not None and graph is not None
    util = record.args["gpu_memory_utilization"]
    assert isinstance(util, float)
    requested = math.ceil(SPARK_TOTAL_MIB * (1 << 20) * util) / GIB
    rest = requested - weights - kv - graph
    host = rest - plan.activation_gib - plan.non_torch_gib
    assert host == pytest.approx(_host_share(record), abs=0.011)
    assert host > 1.5  # beyond the three 2-decimal roundings, whatever the planner's terms
    tokens = plan.kv_pool_tokens * kv / plan.kv_cache_gib
    assert tokens == pytest.approx(obs.kv_pool_tokens, rel=1e-3)


@pytest.mark.parametrize("record", SOSTROWSK, ids=lambda r: Path(r.source).stem)
def test_vllm_advice_line_brackets_the_box_total(record: LaunchRecord) -> None:
    """0.25.1 logs the graph estimate (2 decimals) and `equiv_util = round(util - estimate /
    total, 4)`: both readings hold for the box's stated CUDA total."""
    worker = wheel_text("vllm", "0.25.1", "vllm/v1/worker/gpu_worker.py")
    assert "cg_util_delta = cudagraph_memory_estimate / total_mem" in worker
    assert "equiv_util = round(current_util - cg_util_delta, 4)" in worker
    log = record.log
    estimate = _gib(r"Estimated CUDA graph memory: ([\d.]+) GiB total", log)
    m = re.search(r"--gpu-memory-utilization=([\d.]+) is equivalent to [^=]+=([\d.]+)", log)
    assert m is not None
    util, equiv = float(m.group(1)), float(m.group(2))
    total = SPARK_TOTAL_MIB / 1024
    low, high = (estimate - 0.005) / total, (estimate + 0.005) / total
    assert round(util - high, 4) <= equiv <= round(util - low, 4)


@pytest.mark.parametrize("record", SOSTROWSK, ids=lambda r: Path(r.source).stem)
def test_vllm_checkpoint_line_reads_psutil(record: LaunchRecord) -> None:
    """The `Available RAM` the notes compare is psutil's available memory (0.25.1 weight_utils),
    read as each checkpoint's weights start to stream."""
    utils = wheel_text("vllm", "0.25.1", "vllm/model_executor/model_loader/weight_utils.py")
    ram = ast.unparse(function_def(utils, "_get_available_ram_bytes"))
    assert "psutil.virtual_memory().available" in ram
    assert "avail_bytes = _get_available_ram_bytes()" in ast.unparse(
        function_def(utils, "safetensors_weights_iterator")
    )
    assert "Available RAM: " in record.log


def test_sglang_reads_an_integrated_gpus_free_memory_from_the_host() -> None:
    """The reading the replay takes from `Load weight end` on GB10 (planner.sglang._others_gib)
    is the release's own: on an integrated GPU get_available_gpu_memory returns psutil's
    available host memory, not CUDA's free memory (0.5.11 wheel, utils/common.py)."""
    probe = ast.unparse(
        function_def(
            wheel_text("sglang", "0.5.11", "sglang/srt/utils/common.py"),
            "get_available_gpu_memory",
        )
    )
    integrated = probe.split("if props.is_integrated:")[1].split("else:")[0]
    assert "free_gpu_memory = psutil.virtual_memory().available" in integrated
