"""SGLang's mamba-slot ratio rule with and without speculative decoding, release by release
(planner.sglang_mamba.ratio_rule_slots), read off the 0.5.4.post1 .. 0.5.23 wheels, and its
arithmetic on round numbers."""

from __future__ import annotations

import ast
import re

import pytest

from autotune.planner.sglang_mamba import (
    JOINT_SOLVE_SINCE,
    PADDING_SLOT_SINCE,
    RESERVE_BEFORE_SPLIT_SINCE,
    ratio_rule_slots,
    spec_state_requests,
)
from tests.wheels import function_def, wheel_text

MIXIN = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
CONFIGURATOR = "sglang/srt/mem_cache/kv_cache_configurator.py"
HANDLERS = {
    "0.5.4.post1": ("sglang/srt/model_executor/model_runner.py", "handle_max_mamba_cache"),
    "0.5.6.post2": ("sglang/srt/model_executor/model_runner.py", "handle_max_mamba_cache"),
    "0.5.7": (MIXIN, "handle_max_mamba_cache"),
    "0.5.9": (MIXIN, "handle_max_mamba_cache"),
    "0.5.12": (MIXIN, "handle_max_mamba_cache"),
    "0.5.13": (MIXIN, "handle_max_mamba_cache"),
    "0.5.15": (MIXIN, "handle_max_mamba_cache"),
    "0.5.16": (CONFIGURATOR, "_handle_max_mamba_cache"),
    "0.5.17": (CONFIGURATOR, "_handle_max_mamba_cache"),
    "0.5.23": (CONFIGURATOR, "_handle_max_mamba_cache"),
}


def _release(version: str) -> tuple[int, int, int]:
    parts = version.split(".")
    return int(parts[0]), int(parts[1]), int(parts[2])


def _handler(version: str) -> ast.FunctionDef:
    path, name = HANDLERS[version]
    return function_def(wheel_text("sglang", version, path), name)


@pytest.mark.parametrize("version", list(HANDLERS))
def test_the_rule_is_the_releases(version: str) -> None:
    fn = _handler(version)
    text = ast.unparse(fn)
    v = _release(version)
    # 0.5.4 .. 0.5.6: the share over (1 + D) slots per slot
    assert ("// (1 + speculativa_ratio)" in text) == (v < RESERVE_BEFORE_SPLIT_SINCE)
    # 0.5.7 .. 0.5.12: max_running_requests x D slots off the rest, before the split
    reserved = [
        n.lineno
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign)
        and ast.unparse(n)
        == "total_rest_memory = total_rest_memory - mamba_state_intermediate_size / (1 << 30)"
    ]
    split = [
        n.lineno
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "mamba_state_memory_raw"
    ]
    before_split = bool(reserved and split and reserved[0] < split[0])
    assert before_split == (RESERVE_BEFORE_SPLIT_SINCE <= v < JOINT_SOLVE_SINCE)
    if before_split:
        reserve = next(
            ast.unparse(n.value)
            for n in ast.walk(fn)
            if isinstance(n, ast.Assign)
            and ast.unparse(n.targets[0]) == "mamba_state_intermediate_size"
        )
        assert "max_running_requests" in reserve and "speculative_num_draft_tokens" in reserve
    # 0.5.13 .. 0.5.16: the joint solve inside the share; 0.5.17: less the padding slot's states
    joint = "mamba_budget_bytes // (per_req * (1 + D / ratio))" in text
    # (0.5.23 adds a replay-SSM ring's bytes to both sides, 0 unless that option is on)
    padded = "(mamba_budget_bytes - per_req * (1 + D)" in text
    assert joint == (JOINT_SOLVE_SINCE <= v < PADDING_SLOT_SINCE)
    assert padded == (v >= PADDING_SLOT_SINCE)
    # without speculative decoding: the share over the slot, less one slot from 0.5.17
    if JOINT_SOLVE_SINCE <= v < PADDING_SLOT_SINCE:
        assert "int(mamba_budget_bytes // per_req)" in text
    if v >= PADDING_SLOT_SINCE:
        assert re.search(
            r"\(mamba_budget_bytes -( replayssm_fixed_bytes -)? per_slot\) // per_slot", text
        )


# 1,900,000 B of rest at ratio 0.9: a 900,000 B mamba share; 1,000 B slots, D = 3, 3 slots a
# request, 10 running requests.
@pytest.mark.parametrize(
    ("v", "d", "slots"),
    [
        ((0, 5, 6), 0, 900),
        ((0, 5, 6), 3, 225),  # 900 // 4
        ((0, 5, 9), 0, 900),
        ((0, 5, 9), 3, 885),  # (1,900,000 - 30,000) x 0.9 / 1.9 // 1,000
        ((0, 5, 15), 0, 900),
        ((0, 5, 16), 3, 450),  # 900,000 // (1,000 x 2)
        ((0, 5, 17), 0, 899),  # (900,000 - 1,000) // 1,000
        ((0, 5, 17), 3, 448),  # (900,000 - 4,000) // 2,000
    ],
)
def test_ratio_rule_slots(v: tuple[int, int, int], d: int, slots: int) -> None:
    assert ratio_rule_slots(v, 1_900_000, 0.9, 1_000, 3, d, 10) == slots


@pytest.mark.parametrize("version", list(HANDLERS))
def test_intermediate_requests_are_the_releases(version: str) -> None:
    """Which requests' D intermediate states the ratio branch takes off the KV budget."""
    text = ast.unparse(_handler(version))
    v = _release(version)
    assert ("per_req * capped_reqs * D" in text) == (JOINT_SOLVE_SINCE <= v < PADDING_SLOT_SINCE)
    assert ("(capped_reqs + 1) * D" in text) == (v >= PADDING_SLOT_SINCE)
    if v < RESERVE_BEFORE_SPLIT_SINCE:  # the state memory is N slots x (1 + D)
        assert "* (1 + speculativa_ratio)" in text.replace("\n", " ")


@pytest.mark.parametrize(
    ("v", "slots", "reqs"),
    [
        ((0, 5, 6), 900, 900),  # every slot's D states
        ((0, 5, 12), 9, 10),  # max_running_requests, uncapped
        ((0, 5, 13), 9, 3),  # capped at 9 slots // 3 a request
        ((0, 5, 16), 900, 10),
        ((0, 5, 17), 9, 4),  # and the padding slot's
        ((0, 5, 23), 900, 11),
    ],
)
def test_spec_state_requests(v: tuple[int, int, int], slots: int, reqs: int) -> None:
    assert spec_state_requests(v, slots, 3, 10) == reqs
