"""The hybrid-state rules the planner applies to GraniteMoeHybrid, LFM2 and Qwen3.5's Gated
DeltaNet (planner.sglang_mamba, models.hf.fields), against the releases: each case reads the
release's PyPI wheel (tests.wheels: downloaded once, a skip without a registry) and runs or reads
its own code."""

from __future__ import annotations

import ast
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.models.config_cards import config_card
from autotune.planner import rules
from autotune.planner.sglang_mamba import mamba_pool, mamba_slot_bytes
from tests.wheels import function_def, wheel_text

# where handle_max_mamba_cache lives in each release (0.5.15: the last with the ratio rule's
# int(budget // per_req), no padding slot taken out of the slot count)
HANDLERS = {
    "0.5.4.post1": "sglang/srt/model_executor/model_runner.py",
    "0.5.6.post2": "sglang/srt/model_executor/model_runner.py",
    "0.5.8": "sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
    "0.5.15": "sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
}


def _source(version: str, path: str) -> str:
    return wheel_text("sglang", version, path)


def _run_handler(version: str, rest_gib: float, per_req: int) -> tuple[int, float]:
    """(max_mamba_cache_size, rest left for the KV pool) from the release's own
    handle_max_mamba_cache, radix cache on, no speculation, no size given."""
    fn = function_def(_source(version, HANDLERS[version]), "handle_max_mamba_cache")
    fn.decorator_list = []
    for a in fn.args.args:
        a.annotation = None  # `self: ModelRunner` names a class not imported here
    fn.returns = None
    ns: dict[str, Any] = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), version, "exec"), ns)
    params = SimpleNamespace(mamba_cache_per_req=per_req)
    server = SimpleNamespace(
        speculative_num_draft_tokens=None,
        disable_radix_cache=False,
        max_mamba_cache_size=None,
        max_running_requests=None,
        mamba_full_memory_ratio=0.9,
        enable_dp_attention=False,
        dp_size=1,
    )
    runner = SimpleNamespace(
        mambaish_config=SimpleNamespace(mamba2_cache_params=params),
        server_args=server,
        hybrid_gdn_config=None,
        spec_algorithm=SimpleNamespace(is_none=lambda: True),
        dp_size=1,
    )
    left = ns["handle_max_mamba_cache"](runner, rest_gib)
    return server.max_mamba_cache_size, left


@pytest.mark.parametrize("version", list(HANDLERS))
@pytest.mark.parametrize("model", ["ibm-granite/granite-4.0-h-micro", "LiquidAI/LFM2-700M"])
def test_pool_and_kv_budget_are_the_releases(version: str, model: str) -> None:
    card = config_card(model)
    assert card is not None
    per_req = sum(mamba_slot_bytes(card, 1))
    rest_gib = 5.75
    slots, left_gib = _run_handler(version, rest_gib, per_req)
    pool = _pool(card, version, rest_gib)
    assert pool.slots == slots
    assert rest_gib * 2**30 - pool.kv_budget_bytes == pytest.approx(left_gib * 2**30, abs=1)


def test_gdn_slots_are_the_0_5_15_release() -> None:
    """Qwen3.5-4B's Gated DeltaNet slot through 0.5.15's own handler: the rest the RTX 5090 launch
    edge-qwen3.5-4b-rtx5090-tp1 implies (its logged KV pool 327,852 x 32,768 B plus 187 slots)
    gives the 187 slots it logged, and the planner's ratio rule gives what the release gives at
    any rest: that launch's slot miss comes from the static budget, not from this rule."""
    card = config_card("Qwen/Qwen3.5-4B")
    assert card is not None
    per_req = sum(mamba_slot_bytes(card, 1))
    implied_rest_gib = (327_852 * 32_768 + 187 * per_req) / 2**30
    assert _run_handler("0.5.15", implied_rest_gib, per_req)[0] == 187
    for rest_gib in (implied_rest_gib, 17.43, 9.5):
        slots, left_gib = _run_handler("0.5.15", rest_gib, per_req)
        pool = _pool(card, "0.5.15", rest_gib)
        assert pool.slots == slots, rest_gib
        assert rest_gib * 2**30 - pool.kv_budget_bytes == pytest.approx(left_gib * 2**30, abs=1)


def _pool(card: Any, version: str, rest_gib: float) -> Any:
    """The planner's pool for `card` on one 16 GB-class rank, engine defaults, radix cache on."""
    r = rules.resolve(
        {},
        gpu_mem_mib=16300,
        tp=1,
        hybrid=True,
        version=version,
        context_default=card.max_position_embeddings,
        vision_factor=None,
    )
    return mamba_pool(card, {}, r, rules.planning_version(version), 1, rest_gib, [], [])


def _create_kwargs(source: str) -> dict[str, str]:
    """The keyword arguments of the Mamba2StateShape.create call, as source text."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
            "Mamba2StateShape.create"
        ):
            return {k.arg: ast.unparse(k.value) for k in node.keywords if k.arg}
    raise AssertionError("no Mamba2StateShape.create call: the release changed its code")


def test_lfm2_state_shape_is_the_releases() -> None:
    """0.5.9 (the first release with LFM2): one group of state size 0, one head per rank of
    hidden_size, conv_L_cache wide; the card's short_conv shape is those arguments."""
    kwargs = _create_kwargs(_source("0.5.9", "sglang/srt/configs/lfm2.py"))
    assert kwargs["intermediate_size"] == "hidden_size"
    assert kwargs["head_dim"] == "hidden_size"
    assert kwargs["n_groups"] == "1" and kwargs["state_size"] == "0"
    assert kwargs["conv_kernel"] == "conv_kernel"
    card = config_card("LiquidAI/LFM2-700M")
    assert card is not None and card.linear_attention is not None
    la = card.linear_attention
    assert (la.kind, la.num_key_heads, la.key_head_dim) == ("short_conv", 1, 0)
    assert la.value_head_dim == card.hidden_size


def test_granite_state_shape_is_the_releases() -> None:
    kwargs = _create_kwargs(_source("0.5.9", "sglang/srt/configs/granitemoehybrid.py"))
    assert kwargs == {
        "tp_world_size": "get_attention_tp_size()",
        "intermediate_size": "self.mamba_intermediate_size",
        "n_groups": "self.mamba_n_groups",
        "num_heads": "self.mamba_n_heads",
        "head_dim": "self.mamba_d_head",
        "state_size": "self.mamba_d_state",
        "conv_kernel": "self.mamba_d_conv",
    }


# Where the KV budget's mamba share is computed from 0.5.9 on (the function's name changes
# nothing: the `mamba_state_memory = ...` assignment is read).
BUDGET_SOURCES = {
    "0.5.9": ("sglang/srt/model_executor/model_runner_kv_cache_mixin.py", False),
    "0.5.13": ("sglang/srt/model_executor/model_runner_kv_cache_mixin.py", False),
    "0.5.16": ("sglang/srt/mem_cache/kv_cache_configurator.py", False),
    "0.5.17": ("sglang/srt/mem_cache/kv_cache_configurator.py", True),
    "0.5.23": ("sglang/srt/mem_cache/kv_cache_configurator.py", True),
}


@pytest.mark.parametrize("version", list(BUDGET_SOURCES))
def test_the_padding_slot_joins_the_kv_budget_from_0_5_17(version: str) -> None:
    path, padded = BUDGET_SOURCES[version]
    exprs = [
        ast.unparse(node.value)
        for node in ast.walk(ast.parse(_source(version, path)))
        if isinstance(node, ast.Assign)
        and any(ast.unparse(t) == "mamba_state_memory" for t in node.targets)
    ]
    assert exprs, f"{version}: no mamba_state_memory assignment in {path}"
    assert all(("max_mamba_cache_size + 1" in e) == padded for e in exprs), exprs
    card = config_card("ibm-granite/granite-4.0-h-micro")
    assert card is not None
    pool = _pool(card, version, 5.75)
    per_slot = sum(mamba_slot_bytes(card, 1))
    assert pool.kv_budget_bytes == (pool.slots + padded) * per_slot


@pytest.mark.parametrize("version", ["0.5.9", "0.5.18", "0.5.23"])
def test_spec_intermediate_state_is_priced_per_slot_conv_included(version: str) -> None:
    """The speculative intermediate state the budget reserves is mamba_cache_per_req a request
    and draft token, conv window and temporal state together (planner.sglang_mamba)."""
    per_req = ast.unparse(
        function_def(_source(version, "sglang/srt/configs/mamba_utils.py"), "mamba_cache_per_req")
    )
    assert "conv_numel * self.dtype.conv.itemsize" in per_req
    assert "ssm_numel * self.dtype.temporal.itemsize" in per_req
    path = (
        "sglang/srt/mem_cache/kv_cache_configurator.py"
        if version != "0.5.9"
        else "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
    )
    name = "_handle_max_mamba_cache" if version != "0.5.9" else "handle_max_mamba_cache"
    handler = ast.unparse(function_def(_source(version, path), name))
    assert "mamba_cache_per_req" in handler and "speculative_num_draft_tokens" in handler


def test_planner_spec_intermediate_counts_the_conv_window() -> None:
    card = config_card("Qwen/Qwen3.5-4B")
    assert card is not None
    cfg = {
        "speculative_algorithm": "NEXTN",
        "speculative_num_draft_tokens": 4,
        "max_running_requests": 4,
        "max_mamba_cache_size": 20,
        "page_size": 64,
    }
    r = rules.resolve(
        cfg,
        gpu_mem_mib=24560,
        tp=1,
        hybrid=True,
        version="0.5.18",
        context_default=card.max_position_embeddings,
        vision_factor=None,
    )
    pool = mamba_pool(card, cfg, r, rules.planning_version("0.5.18"), 1, 10.0, [], [])
    reqs = min(4, 20 // pool.slots_per_request)
    # 0.5.17+: (capped requests + 1 padding slot) x draft tokens x (conv + ssm)
    assert pool.spec_bytes == (reqs + 1) * 4 * (pool.conv_bytes + pool.ssm_bytes)
