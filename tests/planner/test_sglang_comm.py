"""Where NCCL's memory at TP > 1 falls against SGLang's pre-load free-memory reading
(planner.sglang_comm), read off the 0.3.0 .. 0.5.18 wheels; the split's arithmetic; the Hopper
TP > 1 launches whose logs read the free memory after the communicators."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autotune.calibration.records import load_records
from autotune.calibration.replay import replay
from autotune.hardware import get_gpu
from autotune.planner import sglang_history
from autotune.planner.sglang_comm import CPU_GROUP_READING_SINCE, CommSplit, comm_split
from autotune.planner.vllm_memory import HOPPER_TP_NON_TORCH_MIB
from tests.wheels import function_def, wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches"
SIZE = HOPPER_TP_NON_TORCH_MIB / 1024


def _utils_path(version: str) -> str:
    rel = sglang_history.release(version)
    assert rel is not None
    return "sglang/srt/utils.py" if rel < (5, 3, 0) else "sglang/srt/utils/common.py"


@pytest.mark.parametrize(
    "version", ["0.3.0", "0.4.3", "0.4.6.post3", "0.4.6.post4", "0.5.5", "0.5.9", "0.5.18"]
)
def test_the_reading_is_reduced_over_the_cpu_group_from_0_4_6_post4(version: str) -> None:
    fn = function_def(
        wheel_text("sglang", version, _utils_path(version)), "get_available_gpu_memory"
    )
    reduces = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "torch.distributed.all_reduce"
    ]
    assert len(reduces) == 1
    on_cpu = any(
        k.arg == "group" and ast.unparse(k.value) == "cpu_group" for k in reduces[0].keywords
    )
    rel = sglang_history.release(version)
    assert rel is not None
    assert on_cpu == (rel >= CPU_GROUP_READING_SINCE)
    # before, the value went to the GPU for the reduce (the default group's NCCL communicator)
    branch = next(
        n for n in ast.walk(fn) if isinstance(n, ast.If) and ast.unparse(n.test) == "distributed"
    )
    assert ("torch.device(" in ast.unparse(branch.body[0])) == (not on_cpu)


@pytest.mark.parametrize(
    ("version", "path", "groups"),
    [
        ("0.3.0", "sglang/srt/model_executor/model_runner.py", "initialize_model_parallel"),
        ("0.4.3", "sglang/srt/model_executor/model_runner.py", "initialize_model_parallel"),
        ("0.5.5", "sglang/srt/model_executor/model_runner.py", "initialize_model_parallel"),
        ("0.5.18", "sglang/srt/distributed/bootstrap.py", "_init_parallel_groups"),
    ],
)
def test_the_reading_follows_the_communicators(version: str, path: str, groups: str) -> None:
    """The pre-load total is read after the parallel groups (PyNccl with its warmup all_reduce,
    the custom all-reduce) are set up, with the distributed (MIN over ranks) reading."""
    fn = function_def(wheel_text("sglang", version, path), "init_torch_distributed")
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
    reading = next(
        n
        for n in calls
        if ast.unparse(n.func) == "get_available_gpu_memory"
        and any(k.arg == "distributed" for k in n.keywords)
    )
    group_call = next(n for n in calls if ast.unparse(n.func) == groups)
    assert group_call.lineno < reading.lineno


def test_pynccl_warms_up_at_set_up() -> None:
    src = wheel_text("sglang", "0.5.5", "sglang/srt/distributed/device_communicators/pynccl.py")
    assert "A small all_reduce for warmup" in src


def test_split() -> None:
    h100 = get_gpu("h100-80g")
    pcie = h100.model_copy(update={"arch": "sm_89"})
    assert comm_split(h100, 1, "0.5.5", pre_logged=False, mem_fraction_static=0.8) == CommSplit()
    assert comm_split(pcie, 8, "0.5.5", pre_logged=False, mem_fraction_static=0.8) == CommSplit()
    # from 0.4.6.post4: inside the reading
    assert comm_split(h100, 2, "0.4.6.post4", pre_logged=False, mem_fraction_static=0.8) == (
        CommSplit(before_reading_gib=SIZE)
    )
    assert comm_split(h100, 2, "0.5.18", pre_logged=True, mem_fraction_static=0.8) == CommSplit()
    # before: the world communicator after the reading
    assert comm_split(h100, 8, "0.4.6.post3", pre_logged=False, mem_fraction_static=0.8) == (
        CommSplit(after_reading_gib=SIZE)
    )
    logged = comm_split(h100, 8, "0.3.0", pre_logged=True, mem_fraction_static=0.83)
    assert logged.before_reading_gib == 0
    assert logged.after_reading_gib == pytest.approx(SIZE * 0.17)


@pytest.mark.parametrize(
    ("name", "ratio"),
    [
        ("s17a-qwen2-72b-instruct-h100-tp8", 0.998),
        ("s17b-qwen3-30b-a3b-fp8-96gb-tp2", 1.000),
        ("s16f-deepseek-r1-0528-kt-amxint4-h100-tp8", 1.001),
    ],
)
def test_hopper_launches_read_after_the_communicators(name: str, ratio: float) -> None:
    """Their logs give the free memory after NCCL's set-up (0.966 / 0.973 / 0.971 while the
    planner took the buffers off the budget once more)."""
    r = replay(next(rec for rec in load_records(RECORDS) if rec.name == name))
    assert r.kv_ratio == pytest.approx(ratio, abs=0.002)
