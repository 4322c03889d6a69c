"""fused_moe's workspace in vLLM's profiling run (vllm_moe.py), read from the release wheels
(full `vllm` wheels: fused_moe.py's Triton path and the CUDA layer), and the launch it moves."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import replay
from autotune.models.config_cards import config_card
from autotune.planner.vllm_history import at_least
from autotune.planner.vllm_moe import (
    HELD_INPUT_COPY_SINCE,
    SHARED_CACHE13_SINCE,
    expert_parallel,
    fused_moe_workspace_bytes,
    moe_chunk,
)
from tests.wheels import full_vllm_text, function_def

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"
FUSED_MOE = "vllm/model_executor/layers/fused_moe/fused_moe.py"


def _chunk_default(version: str) -> int | None:
    """envs.py's VLLM_FUSED_MOE_CHUNK_SIZE default, or None where fused_moe does not chunk."""
    if "CHUNK_SIZE" not in full_vllm_text(version, FUSED_MOE):
        return None
    envs = full_vllm_text(version, "vllm/envs.py")
    found = re.search(r'"VLLM_FUSED_MOE_CHUNK_SIZE", "(\d+)"', envs)
    assert found, "the release names no default chunk"
    return int(found.group(1))


@pytest.mark.parametrize(
    "version", ["0.5.0", "0.5.1", "0.5.3.post1", "0.5.4", "0.5.5", "0.6.0", "0.7.3", "0.8.4"]
)
def test_the_caches_cover_the_releases_chunk(version: str) -> None:
    chunk = _chunk_default(version)
    tokens = 1 << 20
    assert moe_chunk(tokens, version) == (tokens if chunk is None else chunk)


@pytest.mark.parametrize("version", ["0.6.6.post1", "0.7.3", "0.8.0", "0.8.4"])
def test_cache1_and_cache3_share_a_buffer_from_0_8_0(version: str) -> None:
    src = full_vllm_text(version, FUSED_MOE)
    shared = re.search(r"cache13 = torch\.empty\(M \* top_k_num \* max\(N,", src) is not None
    assert shared == at_least(version, SHARED_CACHE13_SINCE)
    assert "intermediate_cache2 = torch.empty((M * top" in src  # cache2 stays apart


@pytest.mark.parametrize("version", ["0.8.0", "0.8.4"])
def test_the_fp8_input_copies_are_held_in_the_chunk_loop_from_0_8_4(version: str) -> None:
    """0.8.4's fused_experts_impl binds both GEMMs' quantized inputs (moe_kernel_prepare_input)
    to locals; 0.8.0 quantizes inside invoke_fused_moe_kernel."""
    impl = function_def(full_vllm_text(version, FUSED_MOE), "fused_experts_impl")
    held = "moe_kernel_prepare_input" in ast.unparse(impl)
    assert held == at_least(version, HELD_INPUT_COPY_SINCE)


def test_expert_parallelism_keeps_each_expert_whole_in_0_8_4() -> None:
    """layer.py FusedMoE.__init__: use_ep needs the flag and TP x DP > 1, then the layer's
    tp_size is 1, so intermediate_size_per_partition is the whole expert width."""
    src = full_vllm_text("0.8.4", "vllm/model_executor/layers/fused_moe/layer.py")
    assert "enable_expert_parallel\n                  and self.tp_size * self.dp_size > 1" in src
    ep_branch = src.split("if use_ep:", 1)[1].split("else:", 1)[0]
    assert "self.tp_size = 1" in ep_branch
    assert "self.intermediate_size_per_partition = intermediate_size // self.tp_size" in src
    assert expert_parallel({"enable_expert_parallel": True}, 16)
    assert not expert_parallel({"enable_expert_parallel": True}, 1)


def test_deepseek_r1_workspace_under_expert_parallelism_on_0_8_4() -> None:
    """32,768 dummy tokens, 8 experts each, N = 2 x 2048 whole: cache13 max(4096, 7168) and
    cache2 2048 in bf16, the fp8 copies of cache2 and of the hidden states."""
    card = config_card("deepseek-ai/DeepSeek-R1")
    assert card is not None
    got = fused_moe_workspace_bytes(card, 16, 32768, "0.8.4", ep=True)
    assert got == 32768 * (8 * (7168 + 2048) * 2 + 8 * 2048 + 7168)
    # Sharded over TP instead, N is 2 x 2048 / 16 = 256 and cache3's 7168 still dominates.
    assert fused_moe_workspace_bytes(card, 16, 32768, "0.8.4") == 32768 * (
        8 * (7168 + 128) * 2 + 8 * 128 + 7168
    )


def test_the_ep_launch_counts_the_expert_workspace() -> None:
    """The 2 x 8 H800 DeepSeek-R1 launch (vLLM 0.8.4 V1, --enable-expert-parallel): with the
    workspace the planner's KV pool comes down from 1.34x the logged to within 15%; the rest is
    the record's planner_gap."""
    rec = load_record(RECORDS / "s18e-deepseek-r1-h800-tp16-ep.yaml")
    ratio = replay(rec).kv_ratio
    assert ratio is not None and 1.0 < ratio < 1.15
    assert rec.planner_gap
