from __future__ import annotations

import pytest

from autotune.hardware import get_gpu
from autotune.planner.dispatch import load_target_model, target_facts
from autotune.space import builtin_space
from autotune.sweep.known_good import KNOWN_GOOD, applicable, express, flags_to_config
from autotune.sweep.narrowing import narrow_to_target

# The card each entry's target resembles (same architecture and format where a card exists).
CARDS = {
    "K1": "qwen3.8-27b-awq-int4",
    "K2": "qwen3.8-27b-nvfp4",
    "K3": "qwen3.8-27b-awq-int4",
    "K4": "qwen3.8-27b-awq-int4",
    "K5": "qwen3.8-27b-fp8",
    "K6": "qwen3.8-27b-awq-int4",
}
# K3 and K4 give no release (a ROCm fork; a DFlash build), K6 a vLLM fork: the earliest
# release with every flag they use.
RELEASE = {"K3": "0.5.18", "K4": "0.5.18", "K6": "0.19.0"}


def test_flags_parse_to_engine_fields() -> None:
    cfg = flags_to_config(
        "--page-size 64 --enable-hierarchical-cache --cuda-graph-bs-decode 1 2 4 "
        "--mem-fraction-static 0.91 --tp 2 --schedule-policy lpm"
    )
    assert cfg == {
        "page_size": 64,
        "enable_hierarchical_cache": True,
        "cuda_graph_bs_decode": [1, 2, 4],
        "mem_fraction_static": 0.91,
        "tp_size": 2,
        "schedule_policy": "lpm",
    }


def test_k1_matches_field_notes() -> None:
    k1 = next(k for k in KNOWN_GOOD if k.id == "K1").config()
    assert k1["mem_fraction_static"] == 0.92 and k1["max_mamba_cache_size"] == 6
    assert k1["hicache_size"] == 12 and k1["page_size"] == 1
    assert k1["kv_cache_dtype"] == "fp8_e4m3" and k1["max_running_requests"] == 2


def test_every_entry_uses_known_engine_fields() -> None:
    from autotune.space.engine_fields import ENGINE_FIELDS

    for kg in KNOWN_GOOD:
        unknown = set(kg.config()) - ENGINE_FIELDS[kg.engine]
        assert not unknown, (kg.id, unknown)
        assert "tp_size" not in kg.config()  # the target decides TP


@pytest.mark.parametrize("kg", KNOWN_GOOD, ids=lambda k: k.id)
def test_every_known_good_is_a_point_of_the_builtin_space(kg: object) -> None:
    """Each K1..K6 command line in the built-in space of its engine, narrowed to its release
    and GPU the way a sweep narrows it: every knob it turns is a parameter holding its value."""
    from autotune.sweep.known_good import KnownGood

    assert isinstance(kg, KnownGood)
    version = kg.engine_version or RELEASE[kg.id]
    card = load_target_model(kg.engine, CARDS[kg.id])
    ctx, unknown = target_facts(kg.engine, card, get_gpu(kg.gpus[0]), version, kg.tp)
    space, _ = narrow_to_target(
        builtin_space(kg.engine), version=version, context=ctx, unknown=unknown
    )
    params, problems = express(kg, space)
    assert problems == []
    assert params  # it turns searched knobs, not only target fields


def test_known_good_in_the_new_knobs() -> None:
    by_id = {k.id: k.config() for k in KNOWN_GOOD}
    assert by_id["K3"]["attention_backend"] == "triton"
    assert by_id["K3"]["schedule_policy"] == "lpm"
    assert by_id["K3"]["cuda_graph_bs_decode"] == [1, 2, 4]
    assert by_id["K3"]["hicache_ratio"] == 2
    assert "speculative_num_draft_tokens" not in by_id["K3"]  # topk 1: the engine's steps + 1
    assert "hicache_ratio" not in by_id["K4"]  # hicache_size 15 overrides it
    assert by_id["K5"]["cuda_graph_max_bs_decode"] == 8  # --cuda-graph-max-bs, the old spelling
    assert by_id["K6"]["speculative_method"] == "mtp"
    assert by_id["K6"]["num_speculative_tokens"] == 2
    assert by_id["K6"]["enable_chunked_prefill"] is True


def test_applicable_picks_by_gpu_quantization_and_tp() -> None:
    seeds = applicable(engine="sglang", gpu="rtx-4080-super-32g", quantization="awq", tp=1)
    assert [s.id for s in seeds] == ["K1"]
    assert [
        s.id
        for s in applicable(
            engine="sglang", gpu="rtx-4080-super-32g", quantization="fp8_block", tp=2
        )
    ] == ["K5"]
    assert applicable(engine="sglang", gpu="h200-141g", quantization="awq", tp=1) == []


def test_requirement_the_target_lacks_is_explained() -> None:
    (k4,) = applicable(engine="sglang", gpu="rtx-3080-20g", quantization="awq", tp=2)
    assert k4.reason is not None and "speculative_draft_model_path" in k4.reason
    (k4,) = applicable(
        engine="sglang",
        gpu="rtx-3080-20g",
        quantization="awq",
        tp=2,
        provided={"speculative_draft_model_path": "/models/dflash"},
    )
    assert k4.reason is None
