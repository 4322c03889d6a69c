"""A DP-attention rank's mamba slot count (planner.sglang_mamba.mamba_slots) against each
release's own handle_max_mamba_cache, run on stand-ins for its server args and model (no
speculative decoding): an explicit max_mamba_cache_size, the max_running_requests (or 512) it
falls back to without the radix cache, and the ratio rule, for a Gated DeltaNet model and
another hybrid."""

from __future__ import annotations

import ast
from types import SimpleNamespace
from typing import Any

import pytest

from autotune.planner.rules import planning_version
from autotune.planner.sglang_mamba import (
    PADDING_SLOT_SINCE,
    mamba_slots,
    spec_requests_per_rank,
    spec_state_requests,
)
from tests.wheels import function_def, wheel_text

MIXIN = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
CONFIGURATOR = "sglang/srt/mem_cache/kv_cache_configurator.py"
RUNNER = "sglang/srt/model_executor/model_runner.py"
HANDLERS = {
    "0.5.4.post1": (RUNNER, "handle_max_mamba_cache"),
    "0.5.6.post2": (RUNNER, "handle_max_mamba_cache"),
    "0.5.7": (MIXIN, "handle_max_mamba_cache"),
    "0.5.8": (MIXIN, "handle_max_mamba_cache"),
    "0.5.9": (MIXIN, "handle_max_mamba_cache"),
    "0.5.13": (MIXIN, "handle_max_mamba_cache"),
    "0.5.15": (MIXIN, "handle_max_mamba_cache"),
    "0.5.16": (CONFIGURATOR, "_handle_max_mamba_cache"),
    "0.5.17": (CONFIGURATOR, "_handle_max_mamba_cache"),
    "0.5.21": (CONFIGURATOR, "_handle_max_mamba_cache"),
    "0.5.22": (CONFIGURATOR, "_handle_max_mamba_cache"),
    "0.5.23": (CONFIGURATOR, "_handle_max_mamba_cache"),
}
PER_REQ = 1_000  # bytes of one slot
REST_GIB = 0.001


def _engine_slots(
    version: str, explicit: int | None, mrr: int | None, radix: bool, dp: int, gdn: bool
) -> int:
    """max_mamba_cache_size as the release's handler leaves it on one rank."""
    return _engine_run(version, explicit, mrr, radix, dp, gdn)[0]


def _engine_run(
    version: str,
    explicit: int | None,
    mrr: int | None,
    radix: bool,
    dp: int,
    gdn: bool,
    d: int = 0,
) -> tuple[int, float]:
    """(max_mamba_cache_size, the rest in GiB it returns) from the release's handler on one
    rank, with `d` draft tokens (0: no speculative decoding; one slot a request)."""
    path, name = HANDLERS[version]
    fn = function_def(wheel_text("sglang", version, path), name)
    fn.decorator_list = []
    args = SimpleNamespace(
        max_mamba_cache_size=explicit,
        max_running_requests=mrr,
        disable_radix_cache=not radix,
        dp_size=dp,
        enable_dp_attention=dp > 1,
        mamba_full_memory_ratio=0.9,
        speculative_num_draft_tokens=d or None,
        max_speculative_num_draft_tokens=None,
    )
    params = SimpleNamespace(mamba_cache_per_req=PER_REQ, layers=[0, 1])
    runner = SimpleNamespace(
        mambaish_config=SimpleNamespace(mamba2_cache_params=params),
        server_args=args,
        dp_size=dp,
        attn_dp_size=dp,
        pp_size=1,
        ps=SimpleNamespace(attn_dp_size=dp, pp_size=1),
        spec_algorithm=SimpleNamespace(is_none=lambda: d == 0),
        _calculate_mamba_ratio=lambda: 1,
        hybrid_gdn_config=object() if gdn else None,
        hybrid_kda_config=None,
        fused_entry_bytes=lambda name: None,
        extra_mamba_cache_bytes_per_req=0,
    )

    def override(_name: str, **values: Any) -> None:
        for key, value in values.items():
            setattr(args, key, value)

    args.override = override  # 0.5.16: ServerArgs.override
    ns: dict[str, Any] = {
        "get_schedule": lambda: args,
        "get_memory": lambda: args,
        "get_spec": lambda: args,
        "get_context": lambda: SimpleNamespace(override=override),
        "get_exec": lambda: SimpleNamespace(
            mamba=SimpleNamespace(enable_linear_replayssm_spec=False)
        ),
        "kimi_linear_config": lambda model_config: None,
        "_pd_prefill_skips_mamba_spec_state": lambda: False,
    }
    exec(ast.unparse(fn), ns)
    rest = 0.0
    try:
        rest = float(ns[name](runner, REST_GIB))
    except RuntimeError as exc:  # 0.5.13 on refuse a pool of no slot
        assert "max_mamba_cache_size=0" in str(exc)
    return int(args.max_mamba_cache_size), rest


def _planned_slots(
    version: str,
    explicit: int | None,
    mrr: int | None,
    radix: bool,
    dp: int,
    gdn: bool,
    d: int = 0,
) -> int:
    v = planning_version(version)
    cfg = {} if explicit is None else {"max_mamba_cache_size": explicit}
    r: Any = SimpleNamespace(
        mamba_full_memory_ratio=0.9, radix_cache=radix, max_running_requests=mrr, dp_attention=dp
    )
    return mamba_slots(
        cfg,
        r,
        v,
        rest_b=REST_GIB * 2**30,
        ssm_b=PER_REQ,
        per_slot=PER_REQ,
        slots_per_req=1,
        d=d,
        assumptions=[],
        gdn=gdn,
    )


@pytest.mark.parametrize("version", list(HANDLERS))
@pytest.mark.parametrize(
    ("explicit", "mrr", "radix"),
    [(101, None, False), (None, 101, False), (None, None, False), (None, 3, False)],
)
@pytest.mark.parametrize("gdn", [True, False])
@pytest.mark.parametrize("dp", [1, 4])
def test_radix_off_slots_are_the_releases(
    version: str, explicit: int | None, mrr: int | None, radix: bool, gdn: bool, dp: int
) -> None:
    engine = _engine_slots(version, explicit, mrr, radix, dp, gdn)
    assert _planned_slots(version, explicit, mrr, radix, dp, gdn) == engine


@pytest.mark.parametrize("version", list(HANDLERS))
@pytest.mark.parametrize("gdn", [True, False])
def test_slots_with_radix_are_the_releases(version: str, gdn: bool) -> None:
    """With the radix cache: the ratio rule's count, divided before 0.5.7 for a Gated DeltaNet
    model only; an explicit max_mamba_cache_size is overwritten by it before 0.5.7, one rank's
    share from then."""
    for explicit, mrr in ((None, 101), (101, None)):
        engine = _engine_slots(version, explicit, mrr, True, 4, gdn)
        assert _planned_slots(version, explicit, mrr, True, 4, gdn) == engine


@pytest.mark.parametrize(
    "version", [v for v in HANDLERS if v not in ("0.5.4.post1", "0.5.6.post2")]
)
@pytest.mark.parametrize(("explicit", "radix"), [(101, True), (None, False), (None, True)])
def test_spec_state_requests_are_one_ranks_share(
    version: str, explicit: int | None, radix: bool
) -> None:
    """With speculative decoding (3 draft tokens) the intermediate state the handler reserves
    is priced on one DP rank's share of max_running_requests (40 over 4 ranks) from 0.5.8."""
    if version == "0.5.7" and (explicit is not None or not radix):
        pytest.skip("0.5.7 reserves the intermediate state in the ratio branch only")
    d, dp, mrr = 3, 4, 40
    slots, rest = _engine_run(version, explicit, mrr, radix, dp, True, d)
    pad = 1 if planning_version(version) >= PADDING_SLOT_SINCE else 0
    engine = REST_GIB * 2**30 - rest * 2**30 - (slots + pad) * PER_REQ
    r: Any = SimpleNamespace(
        mamba_full_memory_ratio=0.9, radix_cache=radix, max_running_requests=mrr, dp_attention=dp
    )
    planned_slots = _planned_slots(version, explicit, mrr, radix, dp, True, d)
    assert planned_slots == slots
    reqs = spec_state_requests(
        planning_version(version), slots, 1, spec_requests_per_rank(r, planning_version(version))
    )
    assert reqs * PER_REQ * d == pytest.approx(engine, abs=2), (version, reqs)
