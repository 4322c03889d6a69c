"""The vLLM planner on releases before the current model (0.4.0 .. 0.9.2: V0, early V1): the
planner's version parse, the engine a launch runs, the defaults, KV geometry and budget of each
release range (autotune/planner/vllm_history.py, vllm_legacy.py), with golden figures from the
rules and from public logs (tests/data/real_launches/vllm):

- PR #12126 (V0, ~0.7.0, H100, Llama-3.2-11B-Vision): total_gpu_memory (79.22GiB) x 0.90 =
  71.29GiB; weights 19.86, non_torch 0.16, activation 36.63, KV 14.65 GiB; "# CUDA blocks: 6001,
  # CPU blocks: 1638" (40 layers x 16 x 8 heads x 128 x 2 x 2 B per block).
- 0.6.4.post1, RTX 3090, Llama-3.1-8B: "# CPU blocks: 2048" (2 MiB blocks), kv_cache_size=3.81GiB
  -> 1952 blocks.
- 0.6.6 dev, H100 TP8 x PP2, DeepSeek-V3 before MLA: "# CPU blocks: 528" (31 layers x 16 x 16
  heads x 256 x 2 x 2 B).
"""

from __future__ import annotations

import pytest

from autotune.engines.vllm.flags import at_least as catalog_at_least
from autotune.engines.vllm.flags import parse_version, supported_versions
from autotune.errors import ConfigError
from autotune.hardware import get_gpu
from autotune.models.card import (
    Experts,
    LatentAttention,
    LinearAttention,
    ModelCard,
    VisionTower,
    WeightBytes,
)
from autotune.planner.vllm import VLLMPlan, plan_vllm, planner_version
from autotune.planner.vllm_history import (
    at_least,
    engine_of,
    history_bytes_per_token,
    history_capture_sizes,
    v1_defaults,
)
from autotune.planner.vllm_legacy import (
    NON_TORCH_MIB,
    ROCM_TP_NON_TORCH_MIB,
    WHOLE_DEVICE_NON_TORCH_MIB,
    history_layout,
    sampler_bytes_per_logit,
    v0_activation_bytes,
)
from autotune.planner.vllm_memory import (
    HOPPER_TP_NON_TORCH_MIB,
    NON_TORCH_TP_MIB,
    ProfiledMemory,
)
from autotune.planner.vllm_parts import BatchLimits

GIB = 2**30
LLAMA_8B = ModelCard(
    name="llama-3.1-8b",
    architecture="LlamaForCausalLM",
    num_layers=32,
    hidden_size=4096,
    intermediate_size=14336,
    vocab_size=128256,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    full_attention_layers=tuple(range(32)),
    max_position_embeddings=131072,
    weights=WeightBytes(embed_tokens=0, lm_head=0, decoder=int(14.99 * GIB)),
)
# Llama-3.2-11B-Vision's KV geometry (40 layers, 8 KV heads of 128) and weights (19.86 GiB).
VISION_11B = LLAMA_8B.model_copy(
    update={
        "name": "llama-3.2-11b-vision",
        "num_layers": 40,
        "full_attention_layers": tuple(range(40)),
        "vision": VisionTower(layers=32, hidden_size=1280),
        "weights": WeightBytes(embed_tokens=0, lm_head=0, decoder=int(19.86 * GIB)),
    }
)
DEEPSEEK = ModelCard(
    name="deepseek-v3",
    architecture="DeepseekV3ForCausalLM",
    num_layers=61,
    hidden_size=7168,
    intermediate_size=18432,
    vocab_size=129280,
    num_attention_heads=128,
    num_kv_heads=128,
    head_dim=192,
    v_head_dim=128,
    full_attention_layers=tuple(range(61)),
    latent_attention=LatentAttention(
        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, q_lora_rank=1536
    ),
    experts=Experts(
        num_experts=256,
        experts_per_token=8,
        moe_intermediate_size=2048,
        shared_intermediate_size=2048,
        moe_layers=58,
    ),
    max_position_embeddings=163840,
    weights=WeightBytes(embed_tokens=0, lm_head=0, decoder=int(600 * GIB)),
)
HYBRID = LLAMA_8B.model_copy(
    update={
        "name": "gdn-hybrid",
        "architecture": "Qwen3NextForCausalLM",
        "full_attention_layers": tuple(range(3, 32, 4)),
        "linear_attention": LinearAttention(
            num_key_heads=16,
            num_value_heads=32,
            key_head_dim=128,
            value_head_dim=128,
            conv_kernel=4,
        ),  # fmt: skip
    }
)
H100, A100, T4 = get_gpu("h100-80g"), get_gpu("a100-80g"), get_gpu("t4-16g")
G3090, MI300X, A10 = get_gpu("rtx-3090-24g"), get_gpu("mi300x-192g"), get_gpu("a10-24g")


def _with_total(gpu_name: str, total_gib: float):  # type: ignore[no-untyped-def]
    """A catalog GPU with the device total a log states (what the replay does)."""
    return get_gpu(gpu_name).model_copy(
        update={"memory_mib": round(total_gib * 1024), "driver_reserved_mib": 0}
    )


def test_planner_version_range_and_forms() -> None:
    assert planner_version("0.4.0") == "0.4.0"
    assert planner_version("0.4.0.post1") == "0.4.0"
    assert planner_version("v0.6.4.post1") == "0.6.4"
    assert planner_version("0.6.3.dev114+g4f95ffee") == "0.6.3"
    assert planner_version("0.6.6.post2.dev5+g5ce4627a") == "0.6.6"
    assert planner_version("0.9.2") == "0.9.2"
    assert planner_version("0.20.2rc1.dev9+g01d4d1ad3") == "0.20.2"
    assert planner_version("0.11.0+torch271") == "0.11.0"
    assert planner_version("0.33.4") == "0.33.0"
    assert planner_version("0.34.1") == "0.34.0"
    for bad in ("0.3.3", "0.35.0", "1.0.0", "banana", ""):
        with pytest.raises(ConfigError, match="--engine-version"):
            planner_version(bad)
    # the flag catalog keeps its own range for launching
    with pytest.raises(ConfigError, match="--engine-version"):
        parse_version("0.9.2")


def test_catalogued_releases_parse_and_order_as_the_flag_catalog() -> None:
    releases = supported_versions()
    for v in (*releases, "0.11.0.post2", "v0.20.1", "0.20.2+cu128"):
        assert planner_version(v) == parse_version(v)
    for a in releases:
        for b in releases:
            assert at_least(a, b) == catalog_at_least(a, b)


def test_dev_build_plans_as_its_release() -> None:
    cfg = {"max_model_len": 32768}
    assert plan_vllm(LLAMA_8B, H100, cfg, version="0.20.2rc1.dev9+g01d4d1ad3") == plan_vllm(
        LLAMA_8B, H100, cfg, version="0.20.2"
    )


def test_hybrid_models_need_0_10() -> None:
    with pytest.raises(ConfigError, match="--engine-version"):
        plan_vllm(HYBRID, H100, {}, version="0.9.2")
    assert not plan_vllm(HYBRID, H100, {}, version="0.10.0").fits  # not in 0.10.0's registry


def test_engine_by_release_and_fallback() -> None:
    def engine(gpu, cfg, version):  # type: ignore[no-untyped-def]
        notes: list[str] = []
        return engine_of(LLAMA_8B, gpu, cfg, version, notes), notes

    assert engine(H100, {}, "0.7.3")[0] == "v0"
    assert engine(H100, {"vllm_use_v1": True}, "0.7.3")[0] == "v1"
    assert engine(H100, {}, "0.8.0")[0] == "v1"
    kind, notes = engine(T4, {}, "0.8.5")
    assert kind == "v0" and "compute capability < 8.0" in notes[0]
    assert engine(H100, {"kv_cache_dtype": "fp8"}, "0.8.1")[0] == "v0"
    assert engine(H100, {"kv_cache_dtype": "fp8"}, "0.8.2")[0] == "v1"  # FA3 on Hopper
    assert engine(A100, {"kv_cache_dtype": "fp8"}, "0.8.2")[0] == "v0"
    assert engine(MI300X, {}, "0.9.0")[0] == "v0"
    assert engine(H100, {"num_scheduler_steps": 8}, "0.8.5")[0] == "v0"
    assert engine(H100, {"speculative_method": "eagle"}, "0.8.4")[0] == "v0"
    assert engine(H100, {"speculative_method": "eagle"}, "0.8.5")[0] == "v1"
    assert engine(H100, {"vllm_use_v1": False}, "0.9.0")[0] == "v0"
    # from 0.11.0 the wheel's vllm/engine/llm_engine.py is V1's: no fallback is left
    for cfg in ({}, {"kv_cache_dtype": "fp8"}, {"vllm_use_v1": False}):
        assert engine(A100, cfg, "0.11.0")[0] == "v1"
    assert engine(MI300X, {}, "0.24.0")[0] == "v1" and engine(T4, {}, "0.24.0")[0] == "v1"


def test_0_9_x_follows_the_current_model_unless_on_v0() -> None:
    tight = plan_vllm(LLAMA_8B, A100, {"max_model_len": 8192}, version="0.9.2", gpu_free_gib=50)
    assert any("Free memory on device" in r for r in tight.reasons)  # 0.9.1+ startup check
    assert tight.non_torch_gib == round(150 / 1024, 3)
    old = plan_vllm(LLAMA_8B, T4, {"max_model_len": 2048}, version="0.9.2", gpu_free_gib=1)
    assert not any("Free memory" in r for r in old.reasons)  # V0: no startup check
    assert any("V0 engine" in a for a in old.assumptions)


def test_pr12126_breakdown_identity_and_blocks() -> None:
    # 79.22 x 0.90 - 19.86 - 0.16 - 36.63 = 14.64 (the log rounds to 14.65)
    assert 79.22 * 0.90 - 19.86 - 0.16 - 36.63 == pytest.approx(14.64, abs=0.01)
    h100 = _with_total("h100-80g", 79.22)
    cfg = {"max_model_len": 65536, "max_num_seqs": 128, "enforce_eager": True}
    plan = plan_vllm(VISION_11B, h100, cfg, version="0.6.6.post1")
    assert (plan.total_gib, plan.requested_gib) == (79.22, 71.298)
    assert plan.weights_gib == 19.86 and plan.non_torch_gib == round(NON_TORCH_MIB / 1024, 3)
    left = plan.requested_gib - plan.weights_gib - plan.activation_gib - plan.non_torch_gib
    assert plan.kv_cache_gib == pytest.approx(left, abs=0.002)
    assert plan.max_num_batched_tokens == 65536  # multimodal: chunked prefill off by default
    assert plan.capture_sizes == [] and not plan.graph_in_budget
    block = plan.page_bytes * plan.layers_per_group
    assert block == 40 * 16 * 8 * 128 * 2 * 2 == 2_621_440
    assert 4 * GIB // block == 1638  # "# CPU blocks: 1638" (swap_space 4 GiB)
    assert abs(plan.num_gpu_blocks - plan.kv_cache_gib * GIB / block) < 1.5  # floor(kv/block)
    # the logged 14.65 GiB gives the logged 6001 blocks (within the log's rounding)
    lay = _layout(VISION_11B, H100, "0.6.6", kv_gib=14.65, max_len=65536)
    assert abs(lay.num_blocks - 6001) <= 2 and lay.kv_tokens == lay.num_blocks * 16


def _layout(card: ModelCard, gpu, version: str, *, kv_gib: float, max_len: int, tp: int = 1,
            cfg: dict | None = None, engine: str = "v0"):  # type: ignore[no-untyped-def]  # fmt: skip
    mem = ProfiledMemory(0, 0, 0, [], 0, False, kv_gib)
    limits = BatchLimits(256, max_len, False, max_len)
    return history_layout(card, gpu, cfg or {}, version, engine, tp, limits, mem)  # type: ignore[arg-type]


def test_v0_block_arithmetic() -> None:
    # Llama-3.1-8B: 32 layers x 16 x 8 x 128 x 2 x 2 B = 2 MiB; 4 GiB of swap = 2048 CPU blocks
    assert history_bytes_per_token(LLAMA_8B, {}, "0.6.4", "v0", 1) * 16 * 32 == 2 * 2**20
    lay = _layout(LLAMA_8B, G3090, "0.6.4", kv_gib=1952.5 * 2 / 1024, max_len=20000)
    assert (lay.num_blocks, lay.kv_tokens) == (1952, 31_232)
    assert lay.concurrency == pytest.approx(1.56, abs=0.01)  # "Maximum concurrency ... 1.56x"
    fp8 = history_bytes_per_token(LLAMA_8B, {"kv_cache_dtype": "fp8"}, "0.5.5", "v0", 1)
    assert fp8 * 2 == history_bytes_per_token(LLAMA_8B, {}, "0.5.5", "v0", 1)
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        history_bytes_per_token(LLAMA_8B, {"kv_cache_dtype": "nvfp4"}, "0.6.4", "v0", 1)


def test_deepseek_kv_geometry_by_release() -> None:
    def per_token(version: str, engine: str = "v0") -> int:
        return history_bytes_per_token(DEEPSEEK, {}, version, engine, 8)  # type: ignore[arg-type]

    assert per_token("0.5.0") == 2 * 16 * (7168 // 128) * 2  # hidden / heads, no special case
    assert per_token("0.6.6") == 2 * 16 * 256 * 2  # 192 padded to 256, every query head
    assert 4 * GIB // (per_token("0.6.6") * 16 * 31) == 528  # the PP2 log's "# CPU blocks: 528"
    assert per_token("0.7.0") == 2 * 16 * 192 * 2
    assert per_token("0.7.1") == 576 * 2  # MLA: latent + rope key, V = 0, not split by TP
    assert per_token("0.7.2") == 640 * 2  # aligned to 256 bytes (0.7.2 .. 0.7.3)
    assert per_token("0.8.0") == per_token("0.8.0", "v1") == 576 * 2
    pp = plan_vllm(DEEPSEEK, H100, {"pipeline_parallel_size": 2, "max_model_len": 8192},
                   version="0.6.6", tp=8)  # fmt: skip
    assert pp.layers_per_group == 31 and pp.block_size == 16
    mla = plan_vllm(DEEPSEEK, H100, {"max_model_len": 8192}, version="0.8.5", tp=8)
    assert mla.block_size == 64  # FlashMLA on Hopper from 0.8.0
    assert (
        plan_vllm(DEEPSEEK, A100, {"max_model_len": 8192}, version="0.8.5", tp=8).block_size == 16
    )


def test_v0_scheduler_defaults_by_release() -> None:
    def limits(card, gpu, version, **cfg):  # type: ignore[no-untyped-def]
        p = plan_vllm(card, gpu, cfg, version=version)
        return p.max_num_seqs, p.max_num_batched_tokens, p.mixed_chunk

    assert limits(LLAMA_8B, H100, "0.4.1", max_model_len=8192) == (256, 8192, False)
    assert limits(LLAMA_8B, H100, "0.5.2", max_model_len=65536) == (256, 65536, False)
    on = {"max_model_len": 8192, "enable_chunked_prefill": True}
    assert [limits(LLAMA_8B, H100, v, **on)[1] for v in ("0.4.0", "0.4.1", "0.4.2")] == [
        8192,
        768,
        512,
    ]
    assert limits(LLAMA_8B, H100, "0.5.3", max_model_len=65536) == (256, 512, True)  # > 32K
    assert limits(LLAMA_8B, H100, "0.6.5", max_model_len=65536) == (256, 2048, True)
    assert limits(LLAMA_8B, MI300X, "0.6.4", max_model_len=65536) == (256, 512, True)
    assert limits(LLAMA_8B, MI300X, "0.6.5", max_model_len=65536) == (256, 65536, False)
    assert limits(LLAMA_8B, H100, "0.6.5", max_model_len=65536, num_scheduler_steps=8)[1] == 65536
    assert limits(LLAMA_8B, H100, "0.6.5", max_model_len=32768)[1] == 32768  # not above 32K
    assert limits(VISION_11B, H100, "0.6.0", max_model_len=2048)[1] == 4096
    assert limits(VISION_11B, H100, "0.6.3", max_model_len=2048)[1] == 5120
    assert limits(LLAMA_8B, T4, "0.9.0", max_model_len=1024, max_num_seqs=1)[1] == 1024
    short = plan_vllm(LLAMA_8B, H100, {"max_model_len": 65536, "max_num_batched_tokens": 4096,
                                       "enable_chunked_prefill": False}, version="0.6.2")  # fmt: skip
    assert any("smaller than max_model_len" in r for r in short.reasons)


def test_v1_defaults_by_release() -> None:
    assert v1_defaults(H100, "0.8.0") == (1024, 8192)
    assert v1_defaults(A100, "0.8.0") == (1024, 2048)  # only H100 / H200 batch 8192
    assert v1_defaults(A100, "0.8.4") == (256, 2048)
    assert v1_defaults(A100, "0.8.5") == (1024, 8192)  # 70 GiB+
    assert v1_defaults(A100, "0.9.0") == (256, 2048)  # 70 GiB+ but not A100
    assert v1_defaults(get_gpu("h200-141g"), "0.9.0") == (1024, 8192)
    assert v1_defaults(A10, "0.8.5") == (256, 2048)
    plan = plan_vllm(LLAMA_8B, A10, {"max_model_len": 8192}, version="0.8.5")
    assert (plan.max_num_seqs, plan.max_num_batched_tokens, plan.prefix_caching) == (
        256,
        2048,
        True,
    )


def test_capture_sizes_by_engine() -> None:
    assert len(history_capture_sizes("v0", "0.5.0", 256, 8192)) == 35
    assert history_capture_sizes("v0", "0.6.4", 300, 8192)[-1] == 304
    assert history_capture_sizes("v0", "0.6.4", 3, 8192) == [1, 2, 4]
    assert len(history_capture_sizes("v1", "0.7.3", 1024, 2048)) == 67
    assert history_capture_sizes("v1", "0.8.0", 1024, 256)[-1] == 256


def test_budget_by_range() -> None:
    cfg = {"max_model_len": 8192}

    def nt(version: str, gpu=H100, tp: int = 1) -> float:  # type: ignore[no-untyped-def]
        plan = plan_vllm(LLAMA_8B, gpu, cfg, version=version, tp=tp)
        left = plan.requested_gib - plan.weights_gib - plan.activation_gib - plan.non_torch_gib
        assert plan.kv_cache_gib == pytest.approx(left, abs=0.002)
        assert not plan.graph_in_budget
        return plan.non_torch_gib

    assert nt("0.6.3") == nt("0.6.5") == round(NON_TORCH_MIB / 1024, 3)  # context excluded
    assert nt("0.6.4") == round(WHOLE_DEVICE_NON_TORCH_MIB / 1024, 3)  # whole device
    assert nt("0.8.5") == round(WHOLE_DEVICE_NON_TORCH_MIB / 1024, 3)  # early V1
    assert nt("0.6.5", A100, tp=2) == round((NON_TORCH_MIB + NON_TORCH_TP_MIB) / 1024, 3)
    # Hopper's NCCL takes more at TP > 1 (vLLM PR #10511's H100 figures).
    assert nt("0.6.5", tp=2) == round((NON_TORCH_MIB + HOPPER_TP_NON_TORCH_MIB) / 1024, 3)
    assert nt("0.6.5", MI300X, tp=2) == round((NON_TORCH_MIB + ROCM_TP_NON_TORCH_MIB) / 1024, 3)
    # no startup check before 0.9.1: less free memory than requested fails later, if at all
    eager = {**cfg, "enforce_eager": True}
    # H100: 0.9 x CUDA's 79.19 GiB = 71.27 GiB requested
    assert plan_vllm(LLAMA_8B, H100, eager, version="0.8.5", gpu_free_gib=71.0).fits
    assert not plan_vllm(LLAMA_8B, H100, eager, version="0.9.1", gpu_free_gib=71.0).fits
    short = plan_vllm(LLAMA_8B, H100, eager, version="0.8.5", gpu_free_gib=40)
    assert any("without checking" in r for r in short.reasons)


def test_v0_profile_run_activation() -> None:
    # forward-bound: gate_up + SiluAndMul (3 I) and hidden, residual, down_proj out (3 h)
    assert v0_activation_bytes(LLAMA_8B, 1, 20000, 256) == 20000 * (3 * 14336 + 3 * 4096) * 2
    # sampler-bound: top-k/top-p over 256 rows of the vocabulary, plus the final hidden states
    for version, per_logit in (("0.4.1", 28), ("0.5.5", 40), ("0.7.1", 32)):
        assert v0_activation_bytes(LLAMA_8B, 1, 2048, 256, version) == (
            per_logit * 256 * 128256 + 2048 * 4096 * 2
        )
    # bf16 logits through top-k/top-p: caller's, sorted, indices, masks, probs, cumsum,
    # inverse index, gathered; from 0.5.5 a float32 copy and fp32 intermediates; from 0.6.2
    # the scatter replaces the inverse index and the gather
    assert sampler_bytes_per_logit("0.4.1", 2) == 2 + 2 + 8 + 1 + 2 + 2 + 1 + 8 + 2
    assert sampler_bytes_per_logit("0.5.5", 2) == 2 + 4 + 4 + 8 + 1 + 4 + 4 + 1 + 8 + 4
    assert sampler_bytes_per_logit("0.6.2", 2) == 2 + 4 + 4 + 8 + 1 + 4 + 4 + 1 + 4
    assert sampler_bytes_per_logit("0.6.2", 4) == 30  # float32 logits: no copy
    # MoE: fused_moe's caches topk x (2 I + I + h) per token, beside 3 h (+ h shared output)
    moe = 8192 * (3 * 7168 + 7168) * 2 + 8192 * 8 * (3 * 2048 // 8 + 7168) * 2
    assert v0_activation_bytes(DEEPSEEK, 8, 8192, 256) == max(
        moe, 8192 * (3 * 18432 // 8 + 3 * 7168) * 2
    )


def test_kv_too_small_and_architecture_reasons() -> None:
    h = _with_total("rtx-3090-24g", 23.58)
    plan = plan_vllm(LLAMA_8B, h, {"max_model_len": 29000}, version="0.6.4.post1")
    assert isinstance(plan, VLLMPlan) and not plan.fits
    assert any(
        "maximum number of tokens that can be stored in KV cache" in r for r in plan.reasons
    )
    v1 = plan_vllm(LLAMA_8B, A10, {"max_model_len": 131072}, version="0.8.5")
    assert any("To serve at least one request" in r for r in v1.reasons)
    qwen3 = LLAMA_8B.model_copy(update={"architecture": "Qwen3ForCausalLM"})
    assert any("model registry" in r for r in plan_vllm(qwen3, H100, {}, version="0.8.3").reasons)
    assert plan_vllm(qwen3, H100, {"max_model_len": 8192}, version="0.8.4").fits


def test_replay_budgets_from_the_logged_total() -> None:
    from pathlib import Path

    from autotune.calibration.records import load_records
    from autotune.calibration.replay import replay

    folder = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"
    record = next(
        r for r in load_records(folder) if r.name == "v-llama-3.1-8b-instruct-rtx3090-tp1"
    )
    seen, blind = replay(record), replay(record, blind=True)
    assert seen.plan is not None and blind.plan is not None
    assert seen.plan.total_gib == 23.58  # "Memory profiling results: total_gpu_memory=23.58GiB"
    # blind: the catalog's CUDA total (nvidia-smi's 24576 MiB less the driver's share)
    assert blind.plan.total_gib == round(get_gpu("rtx-3090-24g").runtime_memory_mib / 1024, 3)
    assert blind.plan.total_gib < 24.0
    # a logged total the catalog does not hold is the one budgeted
    other = record.model_copy(update={"log": record.log.replace("=23.58GiB", "=23.40GiB")})
    assert "23.40GiB" in other.log
    moved = replay(other).plan
    assert moved is not None and moved.total_gib == 23.4
    assert seen.plan.engine_version == "0.6.4"


def test_v0_is_gone_from_0_11_0() -> None:
    """vllm_history.V0_REMOVED_SINCE from the wheels: 0.10.2 still ships V0's LLMEngine,
    0.11.0's vllm/engine/llm_engine.py only names V1's."""
    from autotune.planner.vllm_history import V0_REMOVED_SINCE
    from tests.wheels import wheel_text

    assert V0_REMOVED_SINCE == "0.11.0"
    old = wheel_text("vllm", "0.10.2", "vllm/engine/llm_engine.py")
    assert "class LLMEngine" in old
    new = wheel_text("vllm", "0.11.0", "vllm/engine/llm_engine.py")
    assert "class LLMEngine" not in new
    assert "from vllm.v1.engine.llm_engine import LLMEngine as V1LLMEngine" in new
