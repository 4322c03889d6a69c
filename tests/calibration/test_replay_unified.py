"""calibration.replay on a GPU whose memory the host shares (Jetson AGX Orin): SGLang 0.4.1.post7
budgets the KV pool from the free memory it measured before weights, which its log states only
as the free memory after them; the replay adds the planner's weights back. The release's own
budget code runs here on those figures (tests.wheels: the PyPI wheel, a skip without a registry).
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import card_of, replay
from autotune.engines.sglang.logs import free_after_weights_gib, parse_startup
from tests.wheels import function_def, wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "sglang"
JETSON = RECORDS / "repo-tinyllama-1.1b-chat-jetson-agx-orin-tp1.yaml"
VERSION = "0.4.1.post7"
GIB = 1 << 30


def _runner() -> str:
    return wheel_text("sglang", VERSION, "sglang/srt/model_executor/model_runner.py")


def test_the_release_reads_cuda_free_memory_before_weights_and_logs_it_after_only() -> None:
    """The pool's `total_gpu_memory` is init_torch_distributed's reading (before load_model),
    torch.cuda.mem_get_info's free figure; `Load weight end` prints the free memory, no usage."""
    runner = _runner()
    init = ast.unparse(function_def(runner, "init_torch_distributed"))
    assert "min_per_gpu_memory = get_available_gpu_memory(" in init
    assert "return min_per_gpu_memory" in init
    utils = wheel_text("sglang", VERSION, "sglang/srt/utils.py")
    probe = ast.unparse(function_def(utils, "get_available_gpu_memory"))
    assert "free_gpu_memory, _ = torch.cuda.mem_get_info(gpu_id)" in probe
    end = ast.unparse(function_def(runner, "load_model")).split("Load weight end")[1]
    assert "avail mem=" in end.split("logger")[0] and "mem usage" not in end.split("logger")[0]
    line = (
        "[2026-05-14 10:55:36 TP0] Load weight end. type=LlamaForCausalLM, "
        "dtype=torch.bfloat16, avail mem=19.81 GB\n"
    )
    report = parse_startup(line)
    assert free_after_weights_gib(line) == 19.81
    assert report.free_before_weights_gib is None and report.weights_gib is None


def test_the_jetson_pool_is_the_releases_budget_on_the_free_memory_the_log_implies() -> None:
    """The release's profile_max_num_token, run on the replay's free memory before weights and
    that less the planned weights, gives the replay's pool; both within 2% of the log's."""
    record = load_record(JETSON)
    got = replay(record)
    assert got.plan is not None and got.kv_ratio is not None
    assert abs(got.kv_ratio - 1) < 0.02
    logged_after = free_after_weights_gib(record.log)
    assert logged_after == 19.81
    assert got.plan.pre_weights_free_gib == pytest.approx(
        logged_after + got.plan.weights_gib, abs=0.01
    )
    assert got.note is not None and "19.81 GiB logged after" in got.note
    card = card_of(record)
    assert card is not None
    ns: dict[str, object] = {}
    exec(
        ast.unparse(function_def(_runner(), "profile_max_num_token")),
        {
            "get_available_gpu_memory": lambda *a, **k: (
                got.plan.pre_weights_free_gib - got.plan.weights_gib
            ),
            "AttentionArch": SimpleNamespace(MLA="mla"),
            "torch": SimpleNamespace(_utils=SimpleNamespace(_element_size=lambda dtype: 2)),
            "get_attention_tp_size": lambda: 1,
        },
        ns,
    )
    config = SimpleNamespace(
        attention_arch="mha",
        get_num_kv_heads=lambda tp: card.num_kv_heads // tp,
        head_dim=card.head_dim,
        num_hidden_layers=card.num_layers,
    )
    runner = SimpleNamespace(
        device="cuda",
        gpu_id=0,
        tp_size=1,
        model_config=config,
        server_args=SimpleNamespace(disable_mla=False),
        kv_cache_dtype="bf16",
        mem_fraction_static=record.args["mem_fraction_static"],
    )
    tokens = ns["profile_max_num_token"](runner, got.plan.pre_weights_free_gib)  # type: ignore[operator]
    # the plan's weights_gib is rounded to 1e-3 GiB: a few dozen tokens of 420,000
    assert tokens == pytest.approx(got.plan.kv_pool_tokens, rel=1e-4)
    assert got.plan.kv_cell_bytes == card.num_kv_heads * card.head_dim * card.num_layers * 2 * 2


def test_a_discrete_gpu_keeps_the_catalog_capacity() -> None:
    """Only a pool shared with the host (or an unnamed GPU) trades the catalog's capacity for
    the free memory after weights: the H800 launch's log states it too, and is planned from
    capacity less the context, as before a first launch."""
    record = load_record(RECORDS / "dc-deepseek-r1-h800-tp16.yaml")
    assert free_after_weights_gib(record.log) == 36.51
    got = replay(record)
    assert got.plan is not None and got.note is None
    assert any("= capacity" in a for a in got.plan.assumptions)
