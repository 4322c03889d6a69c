"""The model as a vLLM launch loads it under --dtype and online --quantization fp8: the rules
against the 0.19.0 wheel's source, and the two public launches they explain (llm-d-planner's
Llama-3.1-8B on one H100 with --dtype float32 and with --quantization fp8)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autotune.calibration.records import load_records
from autotune.calibration.replay import replay
from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.planner.vllm_dtype import DTYPE_NAMES, launch_card
from tests.wheels import function_def, wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches"


def _llama() -> ModelCard:
    card = config_card("meta-llama/Llama-3.1-8B-Instruct")
    assert card is not None and card.dtype == "bfloat16"
    return card


def test_float32_doubles_every_weight_and_the_kv_dtype() -> None:
    card, notes = _llama(), list[str]()
    loaded = launch_card(card, {"dtype": "float32"}, notes)
    assert loaded.dtype == "float32"
    assert loaded.weights.total == pytest.approx(2 * card.weights.total, abs=8)
    assert any("float32" in n for n in notes)


def test_auto_and_the_checkpoint_dtype_change_nothing() -> None:
    card = _llama()
    for cfg in ({}, {"dtype": "auto"}, {"dtype": "bfloat16"}, {"quantization": "awq"}):
        assert launch_card(card, cfg, []) == card
    assert launch_card(card, {"dtype": "half"}, []).weights == card.weights  # 2 bytes either way


def test_online_fp8_halves_linear_weights_not_embedding_or_head() -> None:
    card = _llama()
    loaded = launch_card(card, {"quantization": "fp8"}, [])
    w, w0 = loaded.weights, card.weights
    assert (w.embed_tokens, w.lm_head) == (w0.embed_tokens, w0.lm_head)
    assert w.decoder == w0.decoder // 2
    # an FP8 checkpoint is not quantized again
    fp8 = config_card("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic")
    assert fp8 is not None and launch_card(fp8, {"quantization": "fp8"}, []) == fp8


def test_dtype_names_are_the_releases() -> None:
    src = wheel_text("vllm", "0.19.0", "vllm/config/model.py")
    table = next(
        n
        for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "_STR_DTYPE_TO_TORCH_DTYPE" for t in n.targets)
    )
    assert isinstance(table.value, ast.Dict)
    names = {
        ast.literal_eval(k): ast.unparse(v).removeprefix("torch.")
        for k, v in zip(table.value.keys, table.value.values, strict=True)
        if k is not None
    }
    assert names == DTYPE_NAMES


def test_online_fp8_quantizes_linear_and_moe_layers_only() -> None:
    """Fp8Config.get_quant_method: LinearBase -> Fp8OnlineLinearMethod and FusedMoE ->
    Fp8OnlineMoEMethod when the checkpoint is not FP8; the embedding and LM head are neither."""
    src = wheel_text("vllm", "0.19.0", "vllm/model_executor/layers/quantization/fp8.py")
    body = ast.unparse(function_def(src, "get_quant_method"))
    assert "isinstance(layer, LinearBase)" in body
    assert "Fp8OnlineLinearMethod(self)" in body
    assert "Fp8OnlineMoEMethod(self, layer)" in body
    assert "VocabParallelEmbedding" not in body and "ParallelLMHead" not in body


@pytest.mark.parametrize(
    ("name", "weights_gib"),
    [
        ("llmd-llama-3.1-8b-instruct-h100-tp1-dtf32", 29.98),
        ("llmd-llama-3.1-8b-instruct-h100-tp1-qfp8", 8.49),
    ],
)
def test_public_launches(name: str, weights_gib: float) -> None:
    r = replay(next(rec for rec in load_records(RECORDS) if rec.name == name))
    assert r.plan is not None and r.observed.weights_gib == weights_gib
    assert r.plan.weights_gib == pytest.approx(weights_gib, abs=0.01)
    assert r.kv_ratio == pytest.approx(1.0, abs=0.01)
