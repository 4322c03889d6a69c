"""Phi's two-matrix MLP against vLLM 0.19.0's phi.py, and the public launch it explains
(llm-d-planner's microsoft/phi-2 on one H100, 5.19 GiB of weights logged)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autotune.calibration.records import load_records
from autotune.calibration.replay import replay
from autotune.models.config_cards import config_card
from autotune.models.hf.fields import UNGATED_MLP, mlp_matrices
from tests.wheels import wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches"


def _class(source: str, name: str) -> ast.ClassDef:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"no {name}: the release changed its code")


def test_phi_mlp_is_fc1_and_fc2_without_a_gate() -> None:
    src = wheel_text("vllm", "0.19.0", "vllm/model_executor/models/phi.py")
    mlp = ast.unparse(_class(src, "PhiMLP"))
    assert "self.fc1 = ColumnParallelLinear(" in mlp
    assert "self.fc2 = RowParallelLinear(" in mlp
    assert "gate" not in mlp and "MergedColumnParallelLinear" not in mlp
    assert "PhiForCausalLM" in src and "PhiForCausalLM" in UNGATED_MLP
    assert (mlp_matrices("PhiForCausalLM"), mlp_matrices("Phi3ForCausalLM")) == (2, 3)


def test_xlm_roberta_mlp_is_up_and_down_without_a_gate() -> None:
    """SGLang's XLMRobertaModel runs bert.py's BertEncoder, whose layer MLP is BertIntermediate
    (one ColumnParallelLinear up) and BertOutput (one RowParallelLinear down)."""
    roberta = wheel_text("sglang", "0.4.7.post1", "sglang/srt/models/roberta.py")
    bert = wheel_text("sglang", "0.4.7.post1", "sglang/srt/models/bert.py")
    assert "BertEncoder(" in ast.unparse(_class(roberta, "XLMRobertaBaseModel"))
    up = ast.unparse(_class(bert, "BertIntermediate"))
    down = ast.unparse(_class(bert, "BertOutput"))
    assert up.count("ParallelLinear(") == 1 and "self.dense = ColumnParallelLinear(" in up
    assert down.count("ParallelLinear(") == 1 and "self.dense = RowParallelLinear(" in down
    assert "gate" not in up + down and "MergedColumnParallelLinear" not in up + down
    assert mlp_matrices("XLMRobertaModel") == 2


def test_phi2_card_counts_two_mlp_matrices() -> None:
    card = config_card("microsoft/phi-2")
    assert card is not None
    h, inter, layers = card.hidden_size, card.intermediate_size, card.num_layers
    mlp = layers * 2 * h * inter * 2  # two matrices, float16
    attention = layers * 4 * h * h * 2
    assert card.weights.decoder == pytest.approx(mlp + attention, rel=0.01)


def test_public_launch() -> None:
    rec = next(r for r in load_records(RECORDS) if r.name == "llmd-phi-2-h100-tp1-ctx2048")
    r = replay(rec)
    assert r.plan is not None and r.observed.weights_gib == 5.19
    assert r.plan.weights_gib == pytest.approx(5.19, abs=0.02)
    assert r.kv_ratio == pytest.approx(1.0, abs=0.01)
