"""A Gated DeltaNet layer's chunked recurrence in a prefill forward: measured on an H200
(benchmarks/gdn_prefill_probe.py, fitted by benchmarks/fit_gdn_prefill.py), priced per GDN
layer by tokens and value heads of the rank, the heads' share scaled to another GPU by its SM
count; C2's prefill efficiency refitted with it (benchmarks/fit_c2_prefill.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autotune.hardware import get_gpu
from autotune.models import BUILTIN_CARDS
from autotune.models.config_cards import config_card
from autotune.planner import perf
from autotune.planner.dispatch import plan_for
from autotune.planner.perf import PerfModel, PrefillChunk

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _model(card_name: str, gpu: str, engine: str = "sglang", tp: int = 1) -> PerfModel:
    card = BUILTIN_CARDS[card_name]
    g = get_gpu(gpu)
    version = "0.5.17" if engine == "sglang" else "0.10.1"
    return PerfModel(card, g, plan_for(engine, card, g, {}, version=version, tp=tp), config={})


def _without_gdn(m: PerfModel) -> PerfModel:
    import copy

    bare = copy.copy(m)
    bare.gdn_layers = 0
    return bare


@pytest.mark.parametrize("gpu", ["h200-141g", "rtx-4080-super-32g"])
def test_a_gdn_layer_costs_its_measured_recurrence(gpu: str) -> None:
    m = _model("qwen3.8-27b-fp8", gpu)
    lin = m.card.linear_attention
    assert lin is not None and lin.kind == "gated_delta_net"
    assert m.gdn_layers == len(m.card.linear_layers) == 48
    assert m.gdn_heads == lin.num_value_heads
    chunk = [PrefillChunk(8192, 0)]
    extra = m.prefill_step_s(chunk) - _without_gdn(m).prefill_step_s(chunk)
    scale = perf.GDN_REFERENCE_SMS / m.gpu.sm_count
    shared = 8192 * m.gdn_heads * perf.GDN_TOKEN_HEAD_S * scale
    per_layer = perf.GDN_LAYER_S + 8192 * perf.GDN_TOKEN_S + shared
    expected = 48 * per_layer / (m.prefill_eff * m.vendor_prefill)
    assert extra == pytest.approx(expected, rel=1e-9)
    # linear in the tokens beyond the per-layer floor
    longer = [PrefillChunk(16384, 0)]
    extra2 = m.prefill_step_s(longer) - _without_gdn(m).prefill_step_s(longer)
    assert extra2 > 1.8 * extra


def test_fewer_sms_run_it_slower_and_tp_splits_the_heads() -> None:
    h200 = _model("qwen3.8-27b-fp8", "h200-141g")
    ada = _model("qwen3.8-27b-fp8", "rtx-4080-super-32g")
    assert ada.gdn_scale == pytest.approx(132 / ada.gpu.sm_count) and ada.gdn_scale > 1.5
    assert h200.gdn_scale == pytest.approx(1.0)
    tp2 = _model("qwen3.8-27b-fp8", "h200-141g", tp=2)
    assert tp2.gdn_heads == h200.gdn_heads // 2


def test_only_gated_deltanet_layers_of_sglang_and_vllm_pay_it() -> None:
    g = get_gpu("h200-141g")
    llama = config_card("meta-llama/Llama-3.1-8B-Instruct")
    dense = PerfModel(llama, g, plan_for("sglang", llama, g, {}, version="0.5.17"), config={})
    assert dense.gdn_layers == 0
    assert _model("qwen3.8-27b-fp8", "h200-141g", engine="vllm").gdn_layers == 48
    # a Mamba-2 state (Nemotron-H's SSD scan) is not the measured kernel: not priced
    card = BUILTIN_CARDS["qwen3.8-27b-fp8"]
    assert card.linear_attention is not None
    mamba = card.model_copy(
        update={"linear_attention": card.linear_attention.model_copy(update={"kind": "mamba2"})}
    )
    m = PerfModel(mamba, g, plan_for("sglang", mamba, g, {}, version="0.5.17"), config={})
    assert m.gdn_layers == 0


def _run(script: str) -> str:
    out = subprocess.run(
        [sys.executable, str(BENCH / script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=BENCH,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_code_holds_the_gdn_fit() -> None:
    out = _run("fit_gdn_prefill.py")
    assert f"GDN_LAYER_S = {perf.GDN_LAYER_S * 1e6:.0f}e-6" in out
    assert f"GDN_TOKEN_S = {perf.GDN_TOKEN_S * 1e9:.1f}e-9" in out
    assert f"GDN_TOKEN_HEAD_S = {perf.GDN_TOKEN_HEAD_S * 1e9:.2f}e-9" in out


def test_the_code_holds_the_c2_prefill_refit() -> None:
    assert f"EFF_PREFILL_MAX = {perf.EFF_PREFILL_MAX:.3f}" in _run("fit_c2_prefill.py")


def test_the_per_request_linear_attention_cost_stops_at_the_cap() -> None:
    """C2's per-request share is charged to the first GDN_REQ_CAP requests of a step; past
    them a request adds its state bytes (the H200 decode probe) and its KV and FLOPs."""
    from autotune.planner.perf import DecodeSeq

    m = _model("qwen3.8-27b-fp8", "h200-141g")
    assert m.req_linear_s == pytest.approx(perf.REQ_STEP_OVERHEAD_S - perf.SCHED_CPU_REQ_S)

    def step(n: int) -> float:
        return m.decode_step_s([DecodeSeq(1024)] * n)

    few, many = step(perf.GDN_REQ_CAP), step(64)
    per_request_rest = (step(65) - step(64)) - m.req_linear_s / 2
    assert step(2) - step(1) > m.req_linear_s  # within the cap each request pays it
    assert per_request_rest < m.req_linear_s  # past it, no request does
    assert many - few < (64 - perf.GDN_REQ_CAP) * m.req_linear_s / 2
