from __future__ import annotations

import pytest

from autotune.bench.scenarios import scenario_from_dict
from autotune.hardware import get_gpu
from autotune.models import load_card
from autotune.space import builtin_space
from autotune.sweep.planning import TrialPlanner, longest_request_tokens


@pytest.fixture(scope="module")
def planner() -> TrialPlanner:
    return TrialPlanner(
        card=load_card("qwen3.8-27b-awq-int4"),
        gpu=get_gpu("rtx-4080-super-32g"),
        space=builtin_space("sglang"),
        version="0.5.17",
        host_free_gib=64,
        headroom_gib=0.25,
        need_tokens=4096,
    )


K1 = {  # FIELD-NOTES K1 with hicache_io_backend direct (P2)
    "context_length": 131072,
    "max_running_requests": 2,
    "mem_fraction_static": 0.92,
    "kv_cache_dtype": "fp8_e4m3",
    "page_size": 1,
    "max_mamba_cache_size": 6,
    "enable_hierarchical_cache": True,
    "hicache_size": 12,
    "hicache_io_backend": "direct",
    "hicache_write_policy": "write_through",
}


def test_k1_fits_and_matches_c1(planner: TrialPlanner) -> None:
    a = planner.assess(K1)
    assert a.fits, a.reasons
    # FIELD-NOTES C1: 356,237 KV tokens with 6 mamba slots at mfs 0.92 (planner within 1%)
    assert a.predicted_kv_pool_tokens == pytest.approx(356_237, rel=0.01)
    assert a.constraints["rules"] == 0 and a.constraints["vram_headroom"] <= 0


def test_rule_violation_is_pruned_with_its_reason(planner: TrialPlanner) -> None:
    a = planner.assess({**K1, "hicache_io_backend": "kernel"})
    assert not a.fits and a.rule_ids == ["P2"]
    assert "P2" in a.reasons[0] and "sglang#24121" in a.reasons[0]
    assert a.constraints["rules"] > 0


def test_planner_misfit_is_pruned(planner: TrialPlanner) -> None:
    a = planner.assess({"mem_fraction_static": 0.5})
    assert not a.fits
    assert any(r.startswith("planner:") for r in a.reasons)
    assert a.constraints["planner"] > 0


def test_kv_correction_from_launches_changes_the_verdict(planner: TrialPlanner) -> None:
    p = TrialPlanner(
        card=planner.card,
        gpu=planner.gpu,
        space=planner.space,
        version="0.5.17",
        host_free_gib=64,
        need_tokens=120_000,  # within K1's context_length 131072
    )
    cfg = {**K1}
    assert p.assess(cfg).fits  # 356K predicted >= 120K needed
    for _ in range(3):  # the engine kept allocating 30 % of what was predicted
        p.observe(predicted_kv=100_000, actual_kv=30_000)
    a = p.assess(cfg)
    assert p.kv_ratio == pytest.approx(0.3)
    assert a.corrected_kv_pool_tokens == pytest.approx(a.predicted_kv_pool_tokens * 0.3, rel=1e-3)
    assert not a.fits and "corrected by the launches so far" in a.reasons[0]
    assert p.correction()["launches"] == 3
    p.observe(None, 1000)  # a launch without a figure teaches nothing
    assert p.correction()["launches"] == 3


def test_one_request_is_limited_by_its_context(planner: TrialPlanner) -> None:
    """A pool that holds the longest request does not help when the context per request is
    shorter (K1 sets context_length 131072; the pool holds ~356K tokens)."""
    p = TrialPlanner(
        card=planner.card,
        gpu=planner.gpu,
        space=planner.space,
        version="0.5.17",
        host_free_gib=64,
        need_tokens=200_000,
    )
    a = p.assess(K1)
    assert a.predicted_kv_pool_tokens is not None and a.predicted_kv_pool_tokens > 200_000
    assert not a.fits and a.reasons[0].startswith("context too short for the workload: 131072")
    assert a.constraints["kv_fit"] == pytest.approx((200_000 - 131_072) / 200_000)


def test_headroom_requirement(planner: TrialPlanner) -> None:
    strict = TrialPlanner(
        card=planner.card,
        gpu=planner.gpu,
        space=planner.space,
        version="0.5.17",
        host_free_gib=64,
        headroom_gib=5.0,
    )
    a = strict.assess(K1)
    assert not a.fits and "VRAM headroom" in a.reasons[0]
    assert a.constraints["vram_headroom"] > 0


def test_longest_request_tokens() -> None:
    scs = [
        scenario_from_dict({"kind": "decode", "prompt_len": 128, "output_len": 64}),
        scenario_from_dict({"kind": "prefill", "prompt_lens": [512, 8192]}),
        scenario_from_dict(
            {"kind": "agent", "prompt_len": 1000, "turn_len": 100, "output_len": 50, "turns": 3}
        ),
    ]
    assert longest_request_tokens(scs) == 8193
    assert longest_request_tokens(scs[2:]) == 1000 + 2 * 100 + 3 * 50


def test_the_correction_model_that_predicts_the_launches_best_wins(planner: TrialPlanner) -> None:
    """A machine that takes a fixed amount of memory beyond the planner's reserve misses by
    bytes; an engine that sizes its cell differently misses by a share. With two launches or
    more the leave-one-out error picks the model, and a third configuration is then predicted
    exactly."""
    cell = 16_384
    by_bytes = TrialPlanner(card=planner.card, gpu=planner.gpu, space=planner.space,
                            version="0.5.17")  # fmt: skip
    for pred in (100_000, 300_000):  # 0.5 GiB fewer bytes each time: 32768 tokens
        by_bytes.observe(pred, pred - 32_768, cell_bytes=cell)
    assert by_bytes.correction()["model"] == "bytes"
    assert by_bytes.corrected_kv(200_000, cell) == 200_000 - 32_768
    assert by_bytes.correction()["offset_gib"] == pytest.approx(-0.5)
    by_share = TrialPlanner(card=planner.card, gpu=planner.gpu, space=planner.space,
                            version="0.5.17")  # fmt: skip
    for pred in (100_000, 300_000):
        by_share.observe(pred, int(pred * 0.9), cell_bytes=cell)
    assert by_share.correction()["model"] == "ratio"
    assert by_share.corrected_kv(200_000, cell) == 180_000


def test_the_curve_records_each_launchs_corrected_error(planner: TrialPlanner) -> None:
    p = TrialPlanner(card=planner.card, gpu=planner.gpu, space=planner.space, version="0.5.17")
    p.observe(100_000, 97_000, cell_bytes=8192, corrected_kv=100_000)  # before any launch
    p.observe(200_000, 197_000, cell_bytes=8192, corrected_kv=p.corrected_kv(200_000, 8192))
    curve = p.correction()["curve"]
    assert curve[0] == pytest.approx(3_000 / 97_000, rel=1e-3) and curve[1] == 0.0


def test_vllm_launches_teach_the_available_kv_memory(planner: TrialPlanner) -> None:
    """vLLM logs "Available KV cache memory": its shift from the plan scales later pools."""
    p = TrialPlanner(card=planner.card, gpu=planner.gpu, space=planner.space, version="0.5.17")
    p.observe(100_000, 95_000, cell_bytes=8192, plan={"kv_cache_gib": 10.0},
              report={"kv_cache_gib": 9.5})  # fmt: skip
    assert p.correction()["model"] == "kv_memory"
    assert p.corrected_kv(100_000, 8192, kv_memory_gib=20.0) == 97_500
