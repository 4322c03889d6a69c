"""GraniteMoeHybrid (Mamba-2 + attention) and LFM2 (short convolution + attention) planned as
SGLang sizes their state pool, against the two public bench_one_batch launches
(tests/data/real_launches/sglang/repo-granite-4.0-h-micro-tp1, repo-lfm2-700m-tp1).

The records name no GPU. Both logs are of a 16 GB-class card, where SGLang 0.5.6 .. 0.5.8's
mem_fraction_static heuristic (reserve 512 + 2048 x 1.5 + 8 x 2 + 128 MiB) gives 0.770 for a
capacity of 16174 .. 16244 MiB and 0.771 for 16245 .. 16315 MiB: each record is planned at
both, with the logged free memory before weights and the logged weights, and its logged pool
must fall between the two plans, widened by what the log's rounding leaves open. The card's
weight count is checked apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.calibration.records import LaunchRecord, load_record
from autotune.calibration.replay import parse
from autotune.hardware.gpus import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.common import GIB, Plan
from autotune.planner.rules import default_mem_fraction
from autotune.planner.sglang import kv_cell_bytes, mamba_slot_bytes, plan_sglang

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "sglang"
GRANITE = "repo-granite-4.0-h-micro-tp1"
LFM2 = "repo-lfm2-700m-tp1"
CAPACITIES_MIB = (16174, 16315)  # the 16 GB-class range named in the module docstring
ROUNDING_GIB = 0.01  # two logged figures of 2 decimals (free before, mem usage)


def _record(name: str) -> LaunchRecord:
    return load_record(RECORDS / f"{name}.yaml")


def _plans(record: LaunchRecord, measured_weights: bool = False) -> tuple[Plan, ...]:
    """The record planned at both fractions; `measured_weights`: with the weights the log
    measured in place of the card's count (the pool split alone under test)."""
    card = config_card(record.model)
    assert card is not None, record.model
    report = parse(record)
    if measured_weights:
        assert report.weights_gib is not None
        gap = int(report.weights_gib * GIB) - card.weights.total
        card = card.model_copy(
            update={"weights": card.weights.model_copy(update={"load_overhead": gap})}
        )
    gpu = get_gpu("t4-16g")  # any 16 GB catalog card: the fraction is given below
    plans = []
    for mib in CAPACITIES_MIB:
        mfs = default_mem_fraction(mib, 2048, 8, 1, None, (0, 5, 8), None)
        cfg = {"mem_fraction_static": mfs}
        plans.append(
            plan_sglang(
                card,
                gpu,
                cfg,
                version=record.version or "",
                gpu_free_gib=report.free_before_weights_gib,
            )
        )
    return tuple(plans)


def test_the_capacity_range_gives_the_two_fractions() -> None:
    assert [
        default_mem_fraction(m, 2048, 8, 1, None, (0, 5, 8), None) for m in CAPACITIES_MIB
    ] == [
        0.77,
        0.771,
    ]


def test_state_shapes_are_sglangs() -> None:
    granite = config_card("ibm-granite/granite-4.0-h-micro")
    lfm2 = config_card("LiquidAI/LFM2-700M")
    assert granite is not None and lfm2 is not None
    # 36 Mamba-2 layers: conv (4096 + 2 x 128) x 3 bf16, SSM 64 x 64 x 128 fp32
    assert granite.linear_layers == tuple(i for i in range(40) if i not in (5, 15, 25, 35))
    assert mamba_slot_bytes(granite, 1) == (36 * 4352 * 3 * 2, 36 * 64 * 64 * 128 * 4)
    # 10 short-conv layers: a hidden_size x (conv_L_cache - 1) bf16 window, no SSM state
    assert mamba_slot_bytes(lfm2, 1) == (10 * 1536 * 2 * 2, 0)
    assert kv_cell_bytes(granite, "bfloat16", 1) == 4 * 8 * 64 * 2 * 2
    assert kv_cell_bytes(lfm2, "bfloat16", 1) == 6 * 8 * 64 * 2 * 2


@pytest.mark.parametrize("name", [GRANITE, LFM2])
def test_record_state_pool(name: str) -> None:
    record = _record(name)
    report = parse(record)
    plans = _plans(record, measured_weights=True)
    card = config_card(record.model)
    assert card is not None
    assert all(p.fits for p in plans), [p.reasons for p in plans]
    open_gib = ROUNDING_GIB  # what the log's rounding leaves open
    conv_b, ssm_b = mamba_slot_bytes(card, 1)
    slot_tol = open_gib * GIB / (conv_b + ssm_b)
    slots = [p.mamba_slots for p in plans]
    assert min(slots) - slot_tol <= report.mamba_slots <= max(slots) + slot_tol, slots
    share = open_gib / (conv_b + ssm_b)  # the slots left open, in GiB per state byte
    for p in plans:  # the log's conv_state / ssm_state sizes: (slots + 1) slots, 2 decimals
        conv_tol = 0.011 + conv_b * share
        assert p.mamba_conv_gib == pytest.approx(report.mamba_conv_gib or 0.0, abs=conv_tol)
        ssm_tol = 0.011 + ssm_b * share
        assert p.mamba_ssm_gib == pytest.approx(report.mamba_ssm_gib or 0.0, abs=ssm_tol)
    token_tol = open_gib * GIB / plans[0].kv_cell_bytes
    tokens = [p.kv_pool_tokens for p in plans]
    assert min(tokens) - token_tol <= report.kv_pool_tokens <= max(tokens) + token_tol, tokens


def test_granite_weights() -> None:
    """The count is the parameters; SGLang's `mem usage` adds the allocator's rounding of each
    large tensor (sglang_alloc, not modelled for hybrid layouts): under 0.04 GiB here."""
    report = parse(_record(GRANITE))
    plan = _plans(_record(GRANITE))[0]
    assert report.weights_gib is not None
    assert 0 <= report.weights_gib - plan.weights_gib <= 0.04 + ROUNDING_GIB / 2


@pytest.mark.xfail(
    strict=True,
    reason="SGLang 0.5.9's Lfm2ForCausalLM builds its own lm_head (1.57 GiB counted); the "
    "record's pre-release branch measured 1.52 GiB, below the untied count",
)
def test_lfm2_weights() -> None:
    report = parse(_record(LFM2))
    plan = _plans(_record(LFM2))[0]
    assert report.weights_gib is not None
    assert 0 <= report.weights_gib - plan.weights_gib <= 0.15
