"""The roofline's batch scaling and hardware shares: the per-request overhead C2 was fitted on
belongs to linear-attention layers, MoE decode reads the experts its tokens reach, and an HBM
part without a measurement runs at F3's H200 shares."""

from __future__ import annotations

import pytest

from autotune.hardware import get_gpu
from autotune.hardware.gpu_spec import HBM_SHARES
from autotune.models import BUILTIN_CARDS
from autotune.models.config_cards import config_card
from autotune.planner import perf
from autotune.planner.dispatch import plan_for
from autotune.planner.perf import DecodeSeq, PerfModel
from autotune.planner.sglang_kt import routed_expert_bytes


def _model(model: str, gpu: str, engine: str = "sglang", version: str = "0.5.9") -> PerfModel:
    card = BUILTIN_CARDS.get(model) or config_card(model)
    g = get_gpu(gpu)
    return PerfModel(card, g, plan_for(engine, card, g, {}, version=version), config={})


def test_dense_decode_has_no_per_request_kernel_cost() -> None:
    m = _model("meta-llama/Llama-3.1-8B-Instruct", "h100-80g")
    assert m.overlap  # SGLang's overlap schedule hides the scheduler's per-request share
    assert m.req_step_s == pytest.approx(perf.SCHED_CPU_REQ_S)
    one = m.decode_step_s([DecodeSeq(1024)])
    sixteen = m.decode_step_s([DecodeSeq(1024)] * 16)
    # the extra 15 requests cost their KV reads and FLOPs, not 15 x C2's 0.68 ms
    kv = 15 * 1024 * m.kv_cell / (m.bandwidth * m.decode_kernel.decode)
    assert sixteen - one < kv + 2e-3
    assert sixteen - one < 15 * perf.REQ_STEP_OVERHEAD_S / 3


def test_hybrid_keeps_c2s_per_request_cost() -> None:
    card = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]
    assert len(card.linear_layers) == perf.C2_LINEAR_LAYERS  # the model C2 measured
    m = _model("qwen3.8-27b-awq-int4", "rtx-4080-super-32g", version="0.5.17")
    assert m.req_step_s == pytest.approx(perf.REQ_STEP_OVERHEAD_S)


def test_moe_decode_reads_the_routed_experts_tokens_reach() -> None:
    m = _model("Qwen/Qwen3-30B-A3B", "h100-80g")
    e = m.card.experts
    assert e is not None and m.routed_read_bytes == pytest.approx(routed_expert_bytes(m.card))
    t1 = m.decode_step_s([DecodeSeq(256)])
    t64 = m.decode_step_s([DecodeSeq(256)] * 64)
    # one token reads k of E experts: far less than every expert
    unread = m.routed_read_bytes * (1 - e.experts_per_token / e.num_experts)
    assert m.weight_read_bytes / m.bandwidth - t1 > 0.5 * unread / m.bandwidth
    assert t64 > 2 * t1  # at 64 tokens nearly every expert is read
    dense = _model("meta-llama/Llama-3.1-8B-Instruct", "h100-80g")
    assert dense.routed_read_bytes == 0.0


def test_hbm_parts_run_at_f3_shares_unless_measured() -> None:
    h100, h200, g4080 = get_gpu("h100-80g"), get_gpu("h200-141g"), get_gpu("rtx-4080-super-32g")
    assert h100.hbm and h200.hbm and not g4080.hbm
    assert h100.effective_bandwidth_gbs == pytest.approx(3350 * 4200 / 4800)
    assert h100.effective_fp16_tflops == pytest.approx(989 * HBM_SHARES["fp16"])
    assert h100.effective_fp8_tflops == pytest.approx(1979 * HBM_SHARES["fp8"])
    # a measured figure wins (the H200's own are where the shares come from)
    assert h200.effective_bandwidth_gbs == 4200 and h200.effective_fp16_tflops == 790
    assert g4080.effective_bandwidth_gbs == g4080.bandwidth_gbs
    assert get_gpu("mi300x-192g").hbm and get_gpu("a100-80g").hbm


def test_moe_layers_pay_a_fixed_cost_per_forward() -> None:
    """MOE_LAYER_S (fitted on one public MoE run) is paid per MoE layer by every forward,
    whatever its batch; a dense or hybrid model pays none, so C1-C5 do not move."""
    m = _model("Qwen/Qwen3-30B-A3B", "h100-80g")
    e = m.card.experts
    assert e is not None and m.moe_fixed_s == pytest.approx(e.moe_layers * perf.MOE_LAYER_S)
    base = m.decode_step_s([DecodeSeq(256)])
    m.moe_fixed_s = 0.0
    assert base - m.decode_step_s([DecodeSeq(256)]) == pytest.approx(e.moe_layers * 85e-6)
    for name in ("meta-llama/Llama-3.1-8B-Instruct", "qwen3.8-27b-awq-int4"):
        assert _model(name, "h100-80g").moe_fixed_s == 0.0
    # vLLM's V1 engine has its own (perf.MOE_LAYER_BY_ENGINE, fitted on a vLLM record)
    v1 = _model("Qwen/Qwen3-30B-A3B", "h100-80g", engine="vllm", version="0.24.0")
    assert v1.moe_fixed_s == e.moe_layers * perf.MOE_LAYER_BY_ENGINE["vllm-v1"]


def test_vllm_engine_step_cost_by_release_and_not_scaled_by_the_gpu_stack() -> None:
    """ENGINE_STEP_S (fitted on one public run each) by the engine vLLM's release runs: V0
    before 0.8.0, V1 after (vllm_history.engine_of); SGLang's step is C2's. It is the host's
    cost, so a GPU family's fitted efficiency (CDNA) does not scale it."""
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    v0 = _model(llama, "a100-80g", engine="vllm", version="0.6.3")
    v1 = _model(llama, "a100-80g", engine="vllm", version="0.10.1")
    sg = _model(llama, "a100-80g")
    assert v0.engine_step_s == perf.ENGINE_STEP_S["vllm-v0"]
    assert v1.engine_step_s == perf.ENGINE_STEP_S["vllm-v1"]
    assert sg.engine_step_s == 0.0
    amd = _model(llama, "mi300x-192g", engine="vllm", version="0.10.1")
    assert amd.vendor_decode == perf.VENDOR_EFF["cdna"][0]
    own = amd.engine_step_s
    assert own in (perf.ENGINE_STEP_S["vllm-v0"], perf.ENGINE_STEP_S["vllm-v1"])
    step = amd.decode_step_s([DecodeSeq(512)])
    amd.engine_step_s = 0.0
    assert step - amd.decode_step_s([DecodeSeq(512)]) == pytest.approx(own)


def test_an_eager_sglang_prefill_forward_pays_per_layer() -> None:
    """PREFILL_LAYER_S (fitted on one public TTFT record): an SGLang prefill forward outside a
    prefill CUDA graph pays it per decoder layer, whatever the GPU stack; a forward the graph
    captures does not, nor does vLLM (no public figure shows it there)."""
    from autotune.planner.perf import PrefillChunk

    llama = "meta-llama/Llama-3.1-8B-Instruct"
    eager = _model(llama, "h100-80g", version="0.5.9")  # before the prefill graph
    graphed = _model(llama, "h100-80g", version="0.5.19")
    assert eager.plan.prefill_graph_tokens == 0
    assert graphed.plan.prefill_graph_tokens == graphed.plan.chunked_prefill_size
    chunk = [PrefillChunk(512, 0)]
    eager_s = eager.prefill_step_s(chunk)
    eager.eager_prefill_s = 0.0
    layers = eager.card.num_layers
    assert eager_s - eager.prefill_step_s(chunk) == pytest.approx(layers * perf.PREFILL_LAYER_S)
    graphed_s = graphed.prefill_step_s(chunk)
    graphed.eager_prefill_s = 0.0
    assert graphed.prefill_step_s(chunk) == graphed_s
    # a forward above the largest captured size runs eagerly again
    above = [PrefillChunk(graphed.plan.prefill_graph_tokens + 1, 0)]
    assert (
        _model(llama, "h100-80g", version="0.5.19").prefill_step_s(above)
        > graphed.prefill_step_s(above) + 0.9 * layers * perf.PREFILL_LAYER_S
    )
    vllm = _model(llama, "h100-80g", engine="vllm", version="0.10.1")
    assert vllm.eager_prefill_s == 0.0 and vllm.plan.prefill_graph_tokens == 0


def test_the_code_holds_the_prefill_layer_fit() -> None:
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    out = subprocess.run(
        [sys.executable, str(bench / "fit_prefill_layer.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=bench,
    )
    assert out.returncode == 0, out.stderr
    assert f"PREFILL_LAYER_S = {perf.PREFILL_LAYER_S * 1e3:.2f}e-3" in out.stdout


@pytest.mark.parametrize(
    ("gpu", "scheme", "rate"),
    [
        ("rtx-5090-32g", "nvfp4", "fp4_tflops"),  # W4A4 on Blackwell's FP4 MMA
        ("rtx-5090-32g", "awq", "fp16_tflops"),  # W4A16 dequantizes to fp16
        ("rtx-5090-32g", "fp8_block", "fp8_tflops"),
        ("rtx-3090-24g", "nvfp4", "fp16_tflops"),  # no FP4 or FP8 MMA: the W4A16 fallback
        ("rtx-4090-24g", "nvfp4", "fp16_tflops"),  # Ada: no FP4 MMA, Marlin's W4A16
    ],
)
def test_linear_layers_run_at_their_schemes_tensor_rate(gpu: str, scheme: str, rate: str) -> None:
    from types import SimpleNamespace

    g = get_gpu(gpu)
    model = SimpleNamespace(
        card=SimpleNamespace(quantization=SimpleNamespace(scheme=scheme)), gpu=g
    )
    assert PerfModel._linear_peak(model) == getattr(g, rate)  # type: ignore[arg-type]


def test_an_hbm_parts_fp4_rate_takes_its_fp8_share() -> None:
    b200 = get_gpu("b200-180g")
    assert b200.effective_fp4_tflops == pytest.approx(
        b200.fp4_tflops * HBM_SHARES["fp8"]  # type: ignore[operator]
    )


@pytest.mark.parametrize("version", ["0.5.15", "0.5.19", "0.5.23"])
def test_nvfp4_linear_layers_are_w4a4_on_fp4_mma_or_marlin(version: str) -> None:
    """SGLang's ModelOptFp4LinearMethod, read from the release: in its W4A4 mode apply()
    quantizes the activations to FP4 (fp4_quantize) and runs fp4_gemm, whose native backends
    need SM100+; before that the layer goes through Marlin (W4A16, dequantized to fp16). Hence
    _linear_peak: FP4 where the GPU has it, else the fp16 rate."""
    import ast

    from tests.wheels import wheel_text

    source = wheel_text("sglang", version, "sglang/srt/layers/quantization/modelopt_quant.py")
    cls = next(
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.ClassDef) and n.name == "ModelOptFp4LinearMethod"
    )
    methods = {f.name: ast.unparse(f) for f in cls.body if isinstance(f, ast.FunctionDef)}
    apply = methods["apply"]
    assert "fp4_quantize(" in apply or "scaled_fp4_quant(" in apply
    assert "fp4_gemm(" in apply
    loading = methods["process_weights_after_loading"]
    assert "marlin" in (apply + loading).lower()
