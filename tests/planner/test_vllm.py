"""The vLLM planner: its KV arithmetic calibrated on public startup logs (figures, not text),
the memory accounting (total x utilisation, profiling peak, CUDA graphs by release), the
failure texts, and FIELD-NOTES K6 (2 x 2080 Ti 22G, W4A16, TP2, 8 sequences, 262144 context).

Public logs used (figures):
- A: vllm issue 40691, vLLM 0.19.0, Qwen3.5-27B (the Qwen3.8 architecture, F1), TP1, bf16 KV,
  max_model_len 32768: "GPU KV cache size: 290,864 tokens", "33.04x".
- B: club-3090 issue 612, vLLM 0.24.0, Qwen3.6-35B-A3B, fp8 KV, prefix caching, 131072:
  "Available KV cache memory: 5.98 GiB", "567,978 tokens", "4.33x".
- C: club-3090 issue 104, 0.2x, 2 x 3090 TP2 Qwen3.6-27B, fp8_e5m2 KV, prefix caching, 262144:
  9.84 GiB, 619,202 tokens, 2.36x (parsed from tests/engines/test_vllm_logs.LOG_0_2X).
- D: club-3090 issue 1047, Qwen3.8-27B fp8 KV TP1: "Setting attention block size to 1568
  tokens", "Padding mamba page size by 0.13%".
- E: LMCache issue 3430, Qwen3-8B (dense), 0.2x: "PIECEWISE=51 (largest=512), FULL=35
  (largest=256)", "Estimated CUDA graph memory: 0.52 GiB", 6.37 GiB -> 46,368 tokens, 2.83x.
- F: club-3090 issue 434, Qwen3.6-27B TP2 with MTP 3 and max_num_seqs 2: "Add 3 padding
  layers", "PIECEWISE=3 (largest=16), FULL=2 (largest=8)", "0.09 GiB total".
"""

from __future__ import annotations

import pytest

from autotune.engines.vllm import parse_startup
from autotune.errors import ConfigError
from autotune.hardware import get_gpu
from autotune.models import BUILTIN_CARDS
from autotune.models.card import LinearAttention, ModelCard, WeightBytes
from autotune.planner.sglang import Plan
from autotune.planner.vllm import (
    VLLMPlan,
    attention_bytes_per_token,
    capture_sizes,
    graph_bytes,
    hybrid_block_size,
    kv_layout,
    mamba_page_bytes,
    plan_vllm,
)

from ..engines.test_vllm_logs import LOG_0_2X

GIB = 2**30
AWQ = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]
# A Qwen3.5-architecture checkpoint as vLLM's registry names it before 0.27 (F1, F2).
QWEN = AWQ.model_copy(update={"architecture": "Qwen3_5ForConditionalGeneration"})
# K6's pack: W4A16 with the MTP layer kept in bf16 (F2 "AutoRound GPTQ (MTP kept bf16)").
K6_CARD = QWEN.model_copy(
    update={
        "name": "qwen3.8-27b-w4a16-mtp",
        "mtp_layers": 1,
        "weights": AWQ.weights.model_copy(
            update={"mtp": BUILTIN_CARDS["qwen3.8-27b-nvfp4"].weights.mtp}
        ),
    }
)
MOE = ModelCard(
    name="qwen3.6-35b-a3b",
    architecture="Qwen3_5MoeForConditionalGeneration",
    num_layers=40,
    hidden_size=2048,
    intermediate_size=512,
    vocab_size=248320,
    num_attention_heads=16,
    num_kv_heads=2,
    head_dim=256,
    full_attention_layers=tuple(range(3, 40, 4)),
    linear_attention=LinearAttention(
        num_key_heads=16, num_value_heads=32, key_head_dim=128, value_head_dim=128, conv_kernel=4
    ),
    max_position_embeddings=262144,
    weights=WeightBytes(embed_tokens=0, lm_head=0, decoder=0),
)
DENSE_8B = ModelCard(
    name="qwen3-8b",
    architecture="Qwen3ForCausalLM",
    num_layers=36,
    hidden_size=4096,
    intermediate_size=12288,
    vocab_size=151936,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    full_attention_layers=tuple(range(36)),
    max_position_embeddings=40960,
    weights=WeightBytes(embed_tokens=0, lm_head=0, decoder=int(15.26 * GIB)),
)
G2080 = get_gpu("rtx-2080ti-22g")
K6 = {
    "max_model_len": 262144,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 2048,
    "speculative_method": "mtp",
    "num_speculative_tokens": 2,
    "enable_chunked_prefill": True,
    "enable_prefix_caching": True,
}


def test_f1_bytes() -> None:
    # F1: KV per token 64 KiB bf16 / 32 KiB fp8 at TP1 over the 16 full-attention layers
    assert attention_bytes_per_token(AWQ, "auto", 1) * 16 == 64 * 1024
    assert attention_bytes_per_token(AWQ, "fp8_e4m3", 1) * 16 == 32 * 1024
    assert attention_bytes_per_token(AWQ, "auto", 2) * 16 == 32 * 1024
    conv, ssm = mamba_page_bytes(AWQ, 1)
    assert (conv * 48, ssm * 48) == (2_949_120, 150_994_944)  # 2.81 MiB + 144 MiB
    assert mamba_page_bytes(AWQ, 1, num_spec=2)[0] == conv * 5 // 3  # window grows by spec
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        attention_bytes_per_token(AWQ, "fp3", 1)


def test_a_qwen35_0_19_block_groups_and_tokens() -> None:
    a1 = attention_bytes_per_token(QWEN, "auto", 1)
    assert hybrid_block_size(a1, sum(mamba_page_bytes(QWEN, 1)), 16) == 784
    per_block = 784 * a1 * 16  # 16 layers per KV cache group
    lay = kv_layout(QWEN, version="0.19.0", tp=1, kv_dtype="auto", max_model_len=32768,
                    kv_memory_bytes=1487.5 * per_block, prefix_caching=False)  # fmt: skip
    assert (lay.full_groups, lay.mamba_groups, lay.blocks_per_request) == (1, 3, 42 + 3)
    assert lay.num_blocks == 1487
    assert lay.kv_tokens == 290_864  # num_blocks // 4 groups * 784 (<= 0.19.1)
    assert round(lay.concurrency, 2) == 33.04
    # from 0.20.0 the same pool is logged as concurrency x max_model_len
    new = kv_layout(QWEN, version="0.20.0", tp=1, kv_dtype="auto", max_model_len=32768,
                    kv_memory_bytes=1487.5 * per_block, prefix_caching=False)  # fmt: skip
    assert new.kv_tokens == int(1487 / 45 * 32768)


def test_b_moe_fp8_prefix_caching_0_24() -> None:
    lay = kv_layout(MOE, version="0.24.0", tp=1, kv_dtype="fp8", max_model_len=131072,
                    kv_memory_bytes=5.98 * GIB, prefix_caching=True)  # fmt: skip
    assert lay.block_size == 2096 and lay.layers_per_group == 10
    assert lay.mamba_mode == "align" and lay.mamba_blocks == 2
    assert lay.num_blocks == 299 and lay.blocks_per_request == 63 + 3 * 2
    assert lay.kv_tokens == 567_978 and round(lay.concurrency, 2) == 4.33


def test_c_calibrated_against_what_the_adapter_parses() -> None:
    r = parse_startup(LOG_0_2X)
    assert r.kv_cache_gib is not None and r.context_len is not None
    lay = kv_layout(
        QWEN,
        version=r.engine_version or "0.20.2",
        tp=r.tensor_parallel_size or 1,
        kv_dtype=r.kv_dtype or "auto",
        max_model_len=r.context_len,
        kv_memory_bytes=r.kv_cache_gib * GIB,
        prefix_caching=bool(r.enable_prefix_caching),
    )
    assert lay.block_size == r.block_size == 1568
    assert lay.kv_tokens == r.kv_pool_tokens == 619_202
    assert round(lay.concurrency, 2) == r.max_concurrency == 2.36


def test_d_qwen38_fp8_block_and_padding() -> None:
    lay = kv_layout(QWEN, version="0.33.0", tp=1, kv_dtype="fp8_e4m3", max_model_len=131072,
                    kv_memory_bytes=GIB, prefix_caching=True)  # fmt: skip
    assert lay.block_size == 1568
    padding = (lay.page_bytes - lay.mamba_state_bytes) / lay.mamba_state_bytes * 100
    assert f"{padding:.2f}" == "0.13"


def test_e_dense_capacity_and_graph_counts() -> None:
    # the log rounds to 6.37 GiB; 2898 blocks of 2.25 MiB x 36 layers put it in [6.3677, 6.3699) GiB
    lay = kv_layout(DENSE_8B, version="0.20.2", tp=1, kv_dtype="auto", max_model_len=16384,
                    kv_memory_bytes=6.368 * GIB, prefix_caching=True)  # fmt: skip
    assert (lay.block_size, lay.layers_per_group, lay.groups) == (16, 36, 1)
    assert lay.kv_tokens == 46_368 and round(lay.concurrency, 2) == 2.83
    sizes = capture_sizes(256, 2048)
    assert len(sizes) == 51 and sizes[-1] == 512
    assert len([s for s in sizes if s <= 256]) == 35
    assert graph_bytes(sizes, 256, 0) / GIB == pytest.approx(0.52, abs=0.01)


def test_f_mtp_layer_joins_the_attention_group() -> None:
    sizes = capture_sizes(2, 8192, num_spec=3)
    assert sizes == [4, 8, 16]  # PIECEWISE=3 (largest=16); FULL up to 2 x 4 = 8: two graphs
    assert graph_bytes(sizes, 2, 3) / GIB == pytest.approx(0.09, abs=0.01)
    lay = kv_layout(K6_CARD, version="0.33.0", tp=2, kv_dtype="fp8_e5m2", max_model_len=262144,
                    kv_memory_bytes=5.0 * GIB, prefix_caching=True, num_spec=3,
                    draft_layers=1)  # fmt: skip
    # 17 attention layers (16 + MTP) set the group size: 48 GDN layers + 3 padding = 3 groups
    assert lay.layers_per_group == 17 and lay.mamba_groups == 3
    assert lay.mamba_blocks == 2 + 3  # align + one block per speculative token


def test_k6_two_2080ti_fit() -> None:
    plan = plan_vllm(K6_CARD, G2080, K6, version="0.33.0", tp=2)
    assert isinstance(plan, VLLMPlan) and isinstance(plan, Plan)
    assert plan.fits, plan.reasons
    assert plan.engine == "vllm" and plan.max_running_requests == 8
    assert plan.block_size == 800  # fp16 KV, conv window 3 + 2 MTP tokens
    assert plan.layers_per_group == 17 and plan.kv_groups == 4
    assert plan.capture_sizes == [3, 6, 9, 18, 24, 33, 42, 48]
    assert plan.graph_in_budget
    # one 262144-token request fits, eight do not: the eight K6 streams share the pool
    assert 1.0 < plan.max_concurrency < 8
    assert plan.kv_pool_tokens > 262144
    assert any("preempts" in a for a in plan.assumptions)
    assert plan.mamba_slots == 8 and plan.mamba_strategy == "align"
    # the same launch before graph profiling (0.19) puts more in the KV cache (at one
    # utilisation: the default moved from 0.9 to 0.92 at 0.20.0)
    same = {**K6, "gpu_memory_utilization": 0.9}
    new = plan_vllm(K6_CARD, G2080, same, version="0.33.0", tp=2)
    old = plan_vllm(K6_CARD, G2080, same, version="0.19.1", tp=2)
    assert old.fits and not old.graph_in_budget and old.kv_cache_gib > new.kv_cache_gib
    assert plan.gpu_memory_utilization == 0.92 and old.gpu_memory_utilization == 0.9


def test_k6_needs_a_release_that_knows_the_architecture() -> None:
    plan = plan_vllm(AWQ, G2080, {**K6, "speculative_method": None, "num_speculative_tokens":
                                  None}, version="0.26.0", tp=2)  # fmt: skip
    assert not plan.fits
    assert any(
        "Qwen3_5ForCausalLM is not in vLLM 0.26.0's model registry" in r for r in plan.reasons
    )
    assert plan_vllm(AWQ, G2080, {"max_model_len": 65536}, version="0.27.0", tp=2).fits
    # MTP on a pack without MTP weights (P6)
    no_mtp = plan_vllm(AWQ, G2080, K6, version="0.33.0", tp=2)
    assert any("needs MTP weights" in r for r in no_mtp.reasons)


def test_gpu_memory_utilization_is_a_share_of_total_memory() -> None:
    # a desktop GeForce card keeps context + desktop memory: 0.99 of the total is not free
    plan = plan_vllm(QWEN, G2080, {"gpu_memory_utilization": 0.99, "max_model_len": 8192},
                     version="0.33.0", tp=2)  # fmt: skip
    assert any("less than desired GPU memory utilization (0.99" in r for r in plan.reasons)
    plan = plan_vllm(QWEN, G2080, {"gpu_memory_utilization": 0.99, "max_model_len": 8192},
                     version="0.33.0", tp=2, gpu_free_gib=22.0)  # fmt: skip
    assert plan.fits, plan.reasons


def test_no_memory_and_kv_too_small() -> None:
    fp8 = BUILTIN_CARDS["qwen3.8-27b-fp8"]  # ~29 GiB of weights on one 22 GiB card
    plan = plan_vllm(fp8, G2080, {"max_model_len": 8192}, version="0.33.0", tp=1)
    assert any(r.startswith("No available memory for the cache blocks") for r in plan.reasons)
    plan = plan_vllm(QWEN, G2080, {"gpu_memory_utilization": 0.62}, version="0.33.0", tp=2)
    assert not plan.fits
    reason = next(r for r in plan.reasons if "To serve at least one request" in r)
    assert "max seq len (262144)" in reason and "estimated maximum model length is" in reason
    assert 0 < plan.estimated_max_model_len < 262144


def test_graphs_outside_the_budget_before_0_20() -> None:
    cfg = {"gpu_memory_utilization": 0.975, "max_model_len": 16384, "max_num_seqs": 256}
    old = plan_vllm(QWEN, G2080, cfg, version="0.17.1", tp=2)
    assert any("captured outside gpu_memory_utilization" in r for r in old.reasons)
    new = plan_vllm(QWEN, G2080, cfg, version="0.20.2", tp=2)
    assert not any("captured outside" in r for r in new.reasons)
    # opting in on 0.18 moves the graphs into the budget; enforce_eager captures none
    opt = plan_vllm(QWEN, G2080, {**cfg, "memory_profiler_estimate_cudagraphs": True},
                    version="0.18.0", tp=2)  # fmt: skip
    assert opt.graph_in_budget
    eager = plan_vllm(QWEN, G2080, {**cfg, "enforce_eager": True}, version="0.17.1", tp=2)
    assert eager.graph_gib == 0 and eager.capture_sizes == []


def test_prefix_caching_default_for_hybrids_by_release() -> None:
    before = plan_vllm(QWEN, G2080, {"max_model_len": 65536}, version="0.25.1", tp=2)
    after = plan_vllm(QWEN, G2080, {"max_model_len": 65536}, version="0.26.0", tp=2)
    assert (before.prefix_caching, before.mamba_strategy, before.slots_per_request) == (
        False,
        "none",
        1,
    )
    assert (after.prefix_caching, after.mamba_strategy, after.slots_per_request) == (
        True,
        "align",
        2,
    )


def test_defaults_and_inputs() -> None:
    h200 = get_gpu("h200-141g")
    plan = plan_vllm(DENSE_8B, h200, {"max_model_len": 32768}, version="0.33.0")
    assert (plan.max_num_seqs, plan.max_num_batched_tokens) == (1024, 8192)
    small = plan_vllm(DENSE_8B, G2080, {"max_model_len": 32768}, version="0.33.0")
    assert (small.max_num_seqs, small.max_num_batched_tokens) == (256, 2048)
    assert small.mamba_slots == 0 and small.mamba_strategy == "n/a"
    with pytest.raises(ConfigError, match="tensor_parallel_size=2"):
        plan_vllm(QWEN, G2080, {"tensor_parallel_size": 2}, version="0.33.0", tp=4)
    assert plan_vllm(QWEN, G2080, {"tp_size": 2, "max_model_len": 8192},
                     version="0.33.0").tp == 2  # fmt: skip
    with pytest.raises(ConfigError, match="--engine-version"):
        plan_vllm(QWEN, G2080, {}, version="0.9.0")


def test_hopper_tp_takes_more_non_torch_memory() -> None:
    # NCCL over NVLink 4 at TP > 1 (vLLM PR #10511: 1.79 GiB more at TP2 on H100); from 0.18
    # the graph-memory profiling pass is measured too (test_vllm_graph_profiling_wheels.py).
    from autotune.planner.vllm_memory import HOPPER_TP_NON_TORCH_MIB_0_18, NON_TORCH_TP_MIB

    h100, a100 = get_gpu("h100-80g"), get_gpu("a100-80g")
    cfg = {"max_model_len": 32768}
    h1 = plan_vllm(DENSE_8B, h100, cfg, version="0.33.0", tp=2)
    a1 = plan_vllm(DENSE_8B, a100, cfg, version="0.33.0", tp=2)
    h_tp1 = plan_vllm(DENSE_8B, h100, cfg, version="0.33.0")
    assert h1.non_torch_gib - a1.non_torch_gib == pytest.approx(
        (HOPPER_TP_NON_TORCH_MIB_0_18 - NON_TORCH_TP_MIB) / 1024, abs=0.002
    )
    assert h_tp1.non_torch_gib < a1.non_torch_gib  # TP 1 adds nothing


def test_decode_context_parallel_multiplies_the_logged_capacity() -> None:
    """Each DCP rank keeps 1/dcp of a request's tokens: 0.11 logs "Multiplying the GPU KV
    cache size by the dcp_world_size 8" (tests/data/real_launches/vllm/
    repo-kimi-k2-thinking-h200-tp8-dcp8: 5,721,088 tokens vs 715,072 at TP8 alone); from 0.20
    the capacity is concurrency x max_model_len with cdiv(max_model_len, dcp) per request
    (dense attention: vLLM refuses DCP with hybrid KV cache groups)."""
    card = BUILTIN_CARDS["tiny-dense"]
    kw = dict(tp=2, kv_dtype="auto", max_model_len=32768, kv_memory_bytes=8 * 2**30,
              prefix_caching=False)  # fmt: skip
    for version in ("0.11.0", "0.24.0"):
        one = kv_layout(card, version=version, **kw)  # type: ignore[arg-type]
        dcp = kv_layout(card, version=version, context_parallel=2, **kw)  # type: ignore[arg-type]
        assert dcp.num_blocks == one.num_blocks
        assert abs(dcp.kv_tokens / one.kv_tokens - 2) < 0.01, version
