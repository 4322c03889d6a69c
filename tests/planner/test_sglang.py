"""Planner against FIELD-NOTES C1 (SGLang 0.5.17, RTX 4080 SUPER 32G, AWQ-INT4 pack, fp8 KV)."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.hardware import get_gpu
from autotune.models import BUILTIN_CARDS
from autotune.planner import plan_sglang
from autotune.planner.sglang import kv_cell_bytes, mamba_slot_bytes

AWQ = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]
G4080 = get_gpu("rtx-4080-super-32g")
C1_BASE = dict(
    kv_cache_dtype="fp8_e4m3", page_size=1, context_length=131072, max_running_requests=2
)


def test_f1_per_token_and_per_slot_bytes() -> None:
    assert kv_cell_bytes(AWQ, "fp8_e4m3", 1) == 32 * 1024  # F1: fp8 32 KiB/token
    assert kv_cell_bytes(AWQ, "bf16", 1) == 64 * 1024
    assert kv_cell_bytes(AWQ, "bf16", 2) == 32 * 1024  # halves at TP2
    conv, ssm = mamba_slot_bytes(AWQ, 1)
    assert ssm == 150_994_944 and conv == 2_949_120  # F1: 144 MiB + 2.81 MiB
    assert mamba_slot_bytes(AWQ, 1, "bfloat16")[1] == ssm // 2


@pytest.mark.parametrize(
    ("extra", "kv_tokens", "slots", "ssm_gb"),
    [
        ({"mem_fraction_static": 0.88}, 183_838, 34, 4.92),
        ({"mem_fraction_static": 0.92, "max_mamba_cache_size": 6}, 356_237, 6, 0.98),
    ],
)
def test_c1_rows(extra: dict[str, object], kv_tokens: int, slots: int, ssm_gb: float) -> None:
    plan = plan_sglang(AWQ, G4080, {**C1_BASE, **extra}, version="0.5.17")
    assert plan.fits, plan.reasons
    assert abs(plan.kv_pool_tokens / kv_tokens - 1) <= 0.02
    assert plan.mamba_slots == slots
    assert plan.mamba_ssm_gib == pytest.approx(ssm_gb, abs=0.005)  # the log's "ssm_state size"
    assert plan.max_running_requests == 2  # C1: two 123K requests ran concurrently


def test_c1_default_slots_come_from_the_ratio_rule() -> None:
    plan = plan_sglang(AWQ, G4080, {**C1_BASE, "mem_fraction_static": 0.88}, version="0.5.17")
    assert any("ratio rule" in a for a in plan.assumptions)
    # the older (0.5.9) formula has no padding-slot term and gives one slot more
    old = plan_sglang(AWQ, G4080, {**C1_BASE, "mem_fraction_static": 0.88}, version="0.5.9")
    assert old.mamba_slots == plan.mamba_slots + 1


def test_c4_ngram_shrinks_the_kv_pool() -> None:
    cfg = {**C1_BASE, "mem_fraction_static": 0.92, "max_mamba_cache_size": 6}
    spec = {
        **cfg,
        "speculative_algorithm": "NGRAM",
        "speculative_num_steps": 5,
        "speculative_num_draft_tokens": 6,
    }
    plan = plan_sglang(AWQ, G4080, spec, version="0.5.17")
    assert abs(plan.kv_pool_tokens / 271_673 - 1) <= 0.02  # C4: 356,237 -> 271,673
    assert not plan.mixed_chunk


def test_too_low_mem_fraction_does_not_fit() -> None:
    plan = plan_sglang(AWQ, G4080, {**C1_BASE, "mem_fraction_static": 0.5}, version="0.5.17")
    assert not plan.fits
    assert "no GPU memory for the KV cache" in plan.reasons[0]


def test_too_many_mamba_slots_leave_no_kv() -> None:
    cfg = {**C1_BASE, "mem_fraction_static": 0.88, "max_mamba_cache_size": 80}
    plan = plan_sglang(AWQ, G4080, cfg, version="0.5.17")
    assert not plan.fits and "mamba" in " ".join(plan.reasons)


def test_mamba_slots_below_one_request() -> None:
    cfg = {**C1_BASE, "mem_fraction_static": 0.9, "max_mamba_cache_size": 2}
    plan = plan_sglang(AWQ, G4080, cfg, version="0.5.17")
    assert not plan.fits and "too small to serve any requests" in " ".join(plan.reasons)


def test_nextn_without_mtp_weights_is_rejected() -> None:
    cfg = {**C1_BASE, "speculative_algorithm": "NEXTN"}
    plan = plan_sglang(AWQ, G4080, cfg, version="0.5.17")
    assert not plan.fits and "MTP" in " ".join(plan.reasons)  # P6


def test_hicache_host_ram_check() -> None:
    cfg = {
        **C1_BASE,
        "mem_fraction_static": 0.92,
        "max_mamba_cache_size": 6,
        "enable_hierarchical_cache": True,
        "hicache_size": 12,
    }
    ok = plan_sglang(AWQ, G4080, cfg, version="0.5.17", host_free_gib=64)
    assert ok.fits and ok.host_pool_tokens and ok.host_pool_tokens > 0
    # P3: hicache_size is split between the KV and mamba host pools
    assert ok.host_pool_gb is not None and ok.host_pool_gb < 12
    tight = plan_sglang(AWQ, G4080, cfg, version="0.5.17", host_free_gib=16)
    assert not tight.fits and "Not enough host memory" in " ".join(tight.reasons)


def test_hicache_hybrid_unsupported_on_059() -> None:
    cfg = {**C1_BASE, "enable_hierarchical_cache": True}
    plan = plan_sglang(AWQ, G4080, cfg, version="0.5.9", host_free_gib=64)
    assert not plan.fits and "0.5.16" in " ".join(plan.reasons)


def test_default_mem_fraction_matches_reference_h200() -> None:
    # sglang-internals §1.4: H200, tp1, text-only, no spec -> 0.907 (0.5.9)
    dense = BUILTIN_CARDS["tiny-dense"]
    plan = plan_sglang(dense, get_gpu("h200-141g"), {}, version="0.5.9")
    assert plan.mem_fraction_static == 0.907


def test_vision_tower_scales_default_mem_fraction() -> None:
    fp8 = BUILTIN_CARDS["qwen3.8-27b-fp8"]
    text = plan_sglang(BUILTIN_CARDS["tiny-dense"], get_gpu("h200-141g"), {}, version="0.5.9")
    vl = plan_sglang(fp8, get_gpu("h200-141g"), {}, version="0.5.9")
    assert vl.mem_fraction_static == pytest.approx(text.mem_fraction_static * 0.9248, abs=2e-3)


def test_gpu_free_override_and_tp() -> None:
    fp8 = BUILTIN_CARDS["qwen3.8-27b-fp8"]
    h200 = get_gpu("h200-141g")
    one = plan_sglang(fp8, h200, {"mem_fraction_static": 0.85}, version="0.5.23")
    two = plan_sglang(fp8, h200, {"mem_fraction_static": 0.85}, version="0.5.23", tp=2)
    assert two.weights_gib < one.weights_gib
    assert two.kv_cell_bytes == one.kv_cell_bytes // 2
    low = plan_sglang(fp8, h200, {"mem_fraction_static": 0.85}, version="0.5.23", gpu_free_gib=60)
    assert low.kv_pool_tokens < one.kv_pool_tokens


def test_unsupported_version_is_a_clear_error() -> None:
    # 0.1.17 .. 0.5.8 are planned from their wheels' rules (sglang_history, sglang_early); newer
    # than the catalog and older than 0.1.17 are refused, naming the flag and the ranges.
    with pytest.raises(ConfigError, match="--engine-version.*0.5.9 to 0.5.23"):
        plan_sglang(AWQ, G4080, {}, version="0.5.99")
    with pytest.raises(ConfigError, match="--engine-version.*0.1.17 .. 0.5.23"):
        plan_sglang(AWQ, G4080, {}, version="0.1.16")


def test_bad_kv_dtype() -> None:
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        plan_sglang(AWQ, G4080, {"kv_cache_dtype": "fp9"}, version="0.5.17")


def test_page_size_needs_a_buffered_mamba_cache() -> None:
    cfg = {**C1_BASE, "mem_fraction_static": 0.9, "page_size": 64}
    old = plan_sglang(AWQ, G4080, cfg, version="0.5.12")  # auto -> no_buffer, asserts page 1
    assert not old.fits and "page_size == 1" in " ".join(old.reasons)
    new = plan_sglang(AWQ, G4080, cfg, version="0.5.18")  # K5: page 64 with auto works
    assert new.fits and new.mamba_strategy == "extra_buffer"
    explicit = plan_sglang(
        AWQ, G4080, {**cfg, "mamba_radix_cache_strategy": "no_buffer"}, version="0.5.18"
    )
    assert not explicit.fits


def test_dsa_cell_divides_by_the_profile_cell_and_allocates_the_pool_cell() -> None:
    """GLM-5-FP8 on SGLang 0.5.8 (tests/data/real_launches/sglang/more-glm-5-fp8-mi355x-tp8):
    #tokens 3,262,823 = 167.84 GiB / 55,224 B (get_cell_size_per_token: 576 fp8 + the 132-byte
    indexer key, x 78 layers), and "KV size: 186.77 GB" = tokens x 61,464 B (the pool's fp8
    latent carries scales and a bf16 rope key: 656 + 132 per layer)."""
    from autotune.models.config_cards import config_card
    from autotune.planner.sglang import kv_cell_bytes, pool_cell_bytes

    card = config_card("zai-org/GLM-5-FP8")
    assert card is not None
    assert kv_cell_bytes(card, "fp8_e4m3", 8) == 55_224
    assert pool_cell_bytes(card, "fp8_e4m3", 8) == 61_464
    assert abs(3_262_823 * 61_464 / 2**30 - 186.77) < 0.02
    # bf16 latents: no scales, the pool cell is the profile cell.
    assert pool_cell_bytes(card, "bf16", 8) == kv_cell_bytes(card, "bf16", 8)


def test_before_0_5_3_post1_the_budget_cell_leaves_the_dsa_indexer_out() -> None:
    """DeepSeek-V3.2-Exp on 8 x B200, main before sglang PR #11309: the logged 'KV size: 54.52
    GB' for 1,462,784 tokens is 656 B x 61 layers a token, the indexer not counted in the cell;
    the PR's author puts the pool with it at 65.49 GB."""
    from autotune.models.config_cards import config_card

    card = config_card("deepseek-ai/DeepSeek-V3.2-Exp")
    assert card is not None
    without = kv_cell_bytes(card, "fp8_e4m3", 8, indexer=False)
    assert without == 576 * 61
    assert kv_cell_bytes(card, "fp8_e4m3", 8) == (576 + 132) * 61
    gpu, cfg = get_gpu("b200-180g"), {"mem_fraction_static": 0.8}
    old = plan_sglang(card, gpu, cfg, version="0.5.3", tp=8)
    new = plan_sglang(card, gpu, cfg, version="0.5.3.post1", tp=8)
    assert old.kv_pool_tokens > new.kv_pool_tokens * 1.1  # 708 / 576 - 1 = 23 % more tokens


def test_dp_attention_holds_the_attention_and_the_embedding_on_every_rank() -> None:
    """SGLang's DP attention splits attention projections over tp / dp ranks (get_attention_tp_size)
    and the embedding over them too from 0.5.8 (whole before): at dp = tp both are whole on each
    rank either way; the LM head stays split over the TP group."""
    from autotune.models.config_cards import config_card
    from autotune.planner.sglang_dp import dp_attention_weights

    card = config_card("deepseek-ai/DeepSeek-V3.2-Exp")
    assert card is not None
    w = card.weights
    assert 0 < w.attention < w.decoder
    extra = dp_attention_weights(card, 8, 1, (5, 9, 0))
    assert extra == w.attention - w.attention // 8 + w.embed_tokens - w.embed_tokens // 8
    assert dp_attention_weights(card, 8, 1, (5, 7, 0)) == extra
    assert dp_attention_weights(card, 8, 8, (5, 9, 0)) == 0
    # dp 2 of tp 8: attention and (0.5.8+) embedding over 4 ranks; before 0.5.8 the embedding whole
    four = dp_attention_weights(card, 8, 4, (5, 9, 0))
    assert four == w.attention // 4 - w.attention // 8 + w.embed_tokens // 4 - w.embed_tokens // 8
    whole = dp_attention_weights(card, 8, 4, (5, 7, 0))
    assert whole - four == w.embed_tokens - w.embed_tokens // 4
    # --enable-dp-lm-head (0.4.6.post4 on): the LM head over the attention-TP group too
    head = dp_attention_weights(card, 8, 4, (5, 9, 0), dp_lm_head=True)
    assert head - four == w.lm_head // 4 - w.lm_head // 8
    # up to 0.4.4 the LM head is a ReplicatedLinear under DP attention: whole on every rank
    old = dp_attention_weights(card, 8, 1, (4, 4, 0))
    assert old - extra == w.lm_head - w.lm_head // 8
    gpu = get_gpu("b200-180g")
    plain = plan_sglang(card, gpu, {"mem_fraction_static": 0.8}, version="0.5.9", tp=8)
    dp = plan_sglang(
        card,
        gpu,
        {"mem_fraction_static": 0.8, "enable_dp_attention": True, "dp_size": 8},
        version="0.5.9",
        tp=8,
    )
    # and the absorbed w_kc / w_vc copies (planner.sglang_mla) of all heads rather than 1/8
    from autotune.planner.sglang_mla import absorbed_bytes

    kc = absorbed_bytes(card, 1, "nvidia", (5, 9, 0)) - absorbed_bytes(
        card, 8, "nvidia", (5, 9, 0)
    )
    assert kc == 61 * 128 * 256 * 512 * 2 * 7 // 8
    assert dp.weights_gib == pytest.approx(plain.weights_gib + (extra + kc) / 2**30, abs=0.01)
    # and the chunk divided by dp_size after the memory defaults (planner.sglang_dp)
    assert dp.chunked_prefill_size == plain.chunked_prefill_size // 8


def test_auto_mamba_strategy_follows_the_releases_architecture_list() -> None:
    """0.5.14+ buffers `auto` when overlap is wanted on an architecture in SGLang's list: the
    vision pack (Qwen3_5ForConditionalGeneration) from 0.5.14, the text-only Qwen3_5ForCausalLM
    pack only from 0.5.19 (C1 ran no_buffer on 0.5.17)."""
    fp8 = BUILTIN_CARDS["qwen3.8-27b-fp8"]
    g = get_gpu("rtx-pro-4500-32g")
    cfg = {"context_length": 32768}
    assert plan_sglang(AWQ, G4080, cfg, version="0.5.17").mamba_strategy == "no_buffer"
    assert plan_sglang(AWQ, G4080, cfg, version="0.5.19").mamba_strategy == "extra_buffer"
    assert plan_sglang(fp8, g, cfg, version="0.5.17").mamba_strategy == "extra_buffer"
    assert plan_sglang(fp8, g, cfg, version="0.5.13").mamba_strategy == "no_buffer"
    off = {**cfg, "disable_overlap_schedule": True}
    assert plan_sglang(fp8, g, off, version="0.5.17").mamba_strategy == "no_buffer"


def test_unified_memory_plans_from_the_reading_after_weights() -> None:
    """On an integrated GPU SGLang's second free-memory reading is the host's available memory,
    so what other processes took while the weights loaded leaves the KV budget (the GB10 records,
    tests/calibration/test_gb10_records.py); a discrete GPU's pool ignores the figure."""
    card = BUILTIN_CARDS["tiny-dense"]
    cfg = {"mem_fraction_static": 0.4}
    spark = get_gpu("gb10-128g")
    base = plan_sglang(card, spark, cfg, version="0.5.11", gpu_free_gib=100.0)
    expected_after = base.pre_weights_free_gib - base.weights_gib
    same = plan_sglang(
        card,
        spark,
        cfg,
        version="0.5.11",
        gpu_free_gib=100.0,
        gpu_free_after_weights_gib=expected_after,
    )
    assert same.kv_pool_tokens == pytest.approx(base.kv_pool_tokens, rel=1e-4)  # rounded inputs
    taken = plan_sglang(
        card,
        spark,
        cfg,
        version="0.5.11",
        gpu_free_gib=100.0,
        gpu_free_after_weights_gib=expected_after - 8.0,
    )
    lost = (base.kv_pool_tokens - taken.kv_pool_tokens) * base.kv_cell_bytes / 2**30
    assert lost == pytest.approx(8.0, abs=0.01)
    assert any("unified memory" in a for a in taken.assumptions)
    h200 = get_gpu("h200-141g")
    discrete = plan_sglang(card, h200, cfg, version="0.5.11", gpu_free_gib=100.0)
    ignored = plan_sglang(
        card, h200, cfg, version="0.5.11", gpu_free_gib=100.0, gpu_free_after_weights_gib=50.0
    )
    assert ignored.kv_pool_tokens == discrete.kv_pool_tokens


def test_a_draft_loaded_before_the_pool_is_in_the_second_reading() -> None:
    """NEXTN on 0.5.17 loads the MTP draft, with its own embedding and LM head held, before
    the target sizes its pool: the reading after them with nothing else on the box leaves the
    pool as planned (nothing counted twice)."""
    card, spark = BUILTIN_CARDS["qwen3.8-27b-nvfp4"], get_gpu("gb10-128g")
    cfg = {
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "mem_fraction_static": 0.8,
    }
    base = plan_sglang(card, spark, cfg, version="0.5.17", gpu_free_gib=115.0)
    assert any("held while the target sizes" in a for a in base.assumptions)
    # SGLang's rest = second reading - pre x (1 - mem_fraction_static)
    after = 115.0 * (1 - 0.8) + base.static_budget_gib
    again = plan_sglang(
        card, spark, cfg, version="0.5.17", gpu_free_gib=115.0, gpu_free_after_weights_gib=after
    )
    assert again.kv_pool_tokens == pytest.approx(base.kv_pool_tokens, rel=1e-4)
