from __future__ import annotations

from autotune.sweep.known_good import KNOWN_GOOD, applicable, flags_to_config


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
        unknown = set(kg.config()) - ENGINE_FIELDS["sglang"]
        assert not unknown, (kg.id, unknown)
        assert "tp_size" not in kg.config()  # the target decides TP


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
