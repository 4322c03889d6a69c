"""TP sizes the engines can shard a model with (QKVParallelLinear's divide() rule in SGLang's and
vLLM's linear.py; vLLM's verify_with_parallel_config), checked by `plan` and in every trial."""

from __future__ import annotations

import pytest

from autotune.models import BUILTIN_CARDS
from autotune.planner.dispatch import plan_for
from autotune.planner.tp_split import attention_tp, tp_split_problem

QWEN = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]  # 24 query heads, 4 KV heads, GDN 16 key / 48 value


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_sizes_that_split_every_head_pass(tp: int) -> None:
    assert tp_split_problem(QWEN, tp) is None


@pytest.mark.parametrize(
    ("tp", "says"),
    [
        (3, "4 KV heads cannot be split over 3 ranks"),  # 24 / 3 is fine, 4 KV heads are not
        (5, "24 attention heads"),
        (16, "24 attention heads"),
        (64, "24 attention heads"),
    ],
)
def test_sizes_that_break_a_split_are_named_with_the_ones_that_work(tp: int, says: str) -> None:
    why = tp_split_problem(QWEN, tp)
    assert why is not None and says in why and why.endswith(": 1, 2, 4, 8")


def test_kv_heads_are_replicated_beyond_their_count() -> None:
    # 8 ranks over 4 KV heads: each head on 2 ranks; 6 ranks would put 1.5 on each
    card = QWEN.model_copy(update={"num_attention_heads": 48, "linear_attention": None})
    assert tp_split_problem(card, 8) is None
    assert "4 KV heads cannot be split over 6 ranks" in (tp_split_problem(card, 6) or "")


def test_dp_attention_splits_heads_over_tp_over_dp() -> None:
    dp = {"enable_dp_attention": True, "dp_size": 4}
    assert attention_tp("sglang", 8, dp, "0.5.17") == 2
    assert attention_tp("sglang", 8, {"dp_size": 4}, "0.5.17") == 8
    assert attention_tp("sglang", 8, {"attn_dp_size": 8}, "0.5.22") == 1  # its own flag
    assert attention_tp("vllm", 8, {"data_parallel_size": 4}, "0.20.0") == 8  # replicas
    tiny = BUILTIN_CARDS["tiny-dense"]  # 4 query heads: TP 8 only with DP attention
    from autotune.hardware import get_gpu

    h100 = get_gpu("h100-80g")
    assert not plan_for("sglang", tiny, h100, {}, version="0.5.22", tp=8).fits
    for cfg in ({"attn_dp_size": 8}, {"enable_dp_attention": True, "dp_size": 8}):
        plan = plan_for("sglang", tiny, h100, cfg, version="0.5.22", tp=8)
        assert not any("heads" in r for r in plan.reasons), cfg


def test_the_plan_does_not_fit_with_the_reason() -> None:
    from autotune.hardware import get_gpu

    plan = plan_for("sglang", QWEN, get_gpu("h200-141g"), {}, version="0.5.17", tp=3)
    assert not plan.fits and "KV heads" in plan.reasons[0]
    plan = plan_for("vllm", QWEN, get_gpu("h200-141g"), {}, version="0.20.0", tp=2)
    assert not any("heads" in r for r in plan.reasons)


@pytest.mark.parametrize(
    ("engine", "version", "linear"),
    [
        ("sglang", "0.5.13", "sglang/srt/layers/linear.py"),
        ("sglang", "0.5.18", "sglang/srt/layers/linear.py"),
        ("vllm", "0.19.0", "vllm/model_executor/layers/linear.py"),
        ("vllm", "0.34.0", "vllm/model_executor/layers/linear.py"),
    ],
)
def test_the_rule_is_the_releases_own_qkv_sharding(engine: str, version: str, linear: str) -> None:
    # QKVParallelLinear: query heads divided over the ranks; KV heads divided, or replicated
    # on tp / kv ranks when there are more ranks (divide() asserts evenness in both)
    import re

    from tests.wheels import wheel_text

    src = " ".join(wheel_text(engine, version, linear).split())
    assert "self.num_heads = divide(self.total_num_heads, tp_size)" in src
    tp = r"(kv_tp_size|tp_size)"
    assert re.search(rf"if {tp} >= self\.total_num_kv_heads: self\.num_kv_heads = 1", src)
    assert re.search(
        rf"self\.num_kv_head_replicas = divide\({tp}, self\.total_num_kv_heads\)", src
    )
    assert re.search(rf"self\.num_kv_heads = divide\(self\.total_num_kv_heads, {tp}\)", src)
    if engine == "vllm":  # and the check before loading
        model = " ".join(wheel_text("vllm", version, "vllm/config/model.py").split())
        assert "must be divisible by tensor parallel size" in model
