"""The vLLM planner's release rules against vLLM's own code: MXFP4 padding (the 0.19 wheel's
mxfp4_round_up_hidden_size_and_intermediate_size run for each backend, 0.10.1.1's create_weights
padding branch, and the public gpt-oss-120b launch the rule explains) and decode context
parallelism (0.11.0 and 0.21.0)."""

from __future__ import annotations

import ast
import enum
import zipfile
from types import SimpleNamespace

import pytest

from autotune.hardware import get_gpu
from autotune.models.config_cards import config_card
from autotune.planner.vllm_mxfp4 import mxfp4_multiples, mxfp4_padding_bytes
from tests.wheels import engine_wheel_or_skip

ORACLE = "vllm/model_executor/layers/fused_moe/oracle/mxfp4.py"


def _function(version: str, path: str, name: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        tree = ast.parse(z.read(path).decode())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.unparse(node)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def test_0_19_rounding_per_backend_is_the_releases() -> None:
    src = _function("0.19.0", ORACLE, "mxfp4_round_up_hidden_size_and_intermediate_size")
    backend = enum.Enum(  # type: ignore[misc]
        "Mxfp4MoeBackend",
        "MARLIN BATCHED_MARLIN FLASHINFER_TRTLLM_MXFP4_BF16 FLASHINFER_TRTLLM_MXFP4_MXFP8 "
        "FLASHINFER_CUTLASS_MXFP4_BF16 FLASHINFER_CUTLASS_MXFP4_MXFP8 TRITON",
    )

    def run(b: enum.Enum, rocm: bool = False) -> tuple[int, int]:
        ns: dict[str, object] = {
            "Mxfp4MoeBackend": backend,
            "TRTLLM_BACKENDS": (
                backend.FLASHINFER_TRTLLM_MXFP4_BF16,  # type: ignore[attr-defined]
                backend.FLASHINFER_TRTLLM_MXFP4_MXFP8,
            ),  # type: ignore[attr-defined]  # fmt: skip
            "round_up": _round_up,
            "current_platform": SimpleNamespace(is_xpu=lambda: False, is_rocm=lambda: rocm),
        }
        exec(src, ns)
        out: tuple[int, int] = ns["mxfp4_round_up_hidden_size_and_intermediate_size"](b, 2880, 720)  # type: ignore[operator]
        return out

    def ours(gpu: str) -> tuple[int, int]:
        mult = mxfp4_multiples(get_gpu(gpu), "0.19.0")
        assert mult is not None
        return _round_up(2880, mult[0]), _round_up(720, mult[1])

    assert ours("a100-80g") == run(backend.MARLIN)  # type: ignore[attr-defined]  # sm_80
    assert ours("h100-80g") == run(backend.TRITON)  # type: ignore[attr-defined]  # sm_90
    assert ours("b200-180g") == run(backend.FLASHINFER_TRTLLM_MXFP4_BF16)  # type: ignore[attr-defined]
    assert ours("mi300x-192g") == run(backend.TRITON, rocm=True)  # type: ignore[attr-defined]
    assert mxfp4_multiples(get_gpu("rtx-5090-32g"), "0.19.0") is None  # sm_120: not settled


def test_0_10_marlin_branch_is_the_releases() -> None:
    src = _function("0.10.1.1", "vllm/model_executor/layers/quantization/mxfp4.py",
                    "create_weights")  # fmt: skip
    marlin = next(
        n for n in ast.walk(ast.parse(src))
        if isinstance(n, ast.If) and "use_marlin" in ast.unparse(n.test)
    )  # fmt: skip
    body = ast.unparse(marlin.body)
    assert "round_up(intermediate_size_per_partition, 128)" in body
    assert "round_up(hidden_size, 256)" in body
    assert mxfp4_multiples(get_gpu("a100-80g"), "0.10.1.1") == (256, 128)


def test_the_padding_explains_gpt_oss_120b_on_four_a100s() -> None:
    """tests/data/real_launches/vllm/repo-gpt-oss-120b-a100-80gb-tp4: "Model loading took
    17.22 GiB" per rank; the checkpoint's share is ~15.19 GiB, Marlin's padding (2880 -> 3072
    hidden, 720 -> 768 intermediate per rank) the rest."""
    card = config_card("openai/gpt-oss-120b")
    assert card is not None
    pad = mxfp4_padding_bytes(card, get_gpu("a100-80g"), "0.10.1.1", 4)
    assert pad / 2**30 == pytest.approx(17.22 - 15.19, abs=0.1)
    assert mxfp4_padding_bytes(card, get_gpu("rtx-5090-32g"), "0.19.0", 4) == 0


def _text(version: str, path: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        return z.read(path).decode()


def test_decode_context_parallel_rules_are_the_releases() -> None:
    """planner.vllm_kv's context_parallel: 0.11 multiplies the logged capacity by the DCP size;
    from 0.20 a rank holds cdiv(max_model_len, dcp * pcp) tokens of a request (0.34.0: dcp
    alone, the planner's context_parallel, which is decode_context_parallel_size), and the
    capacity is max_concurrency x max_model_len, not multiplied."""
    old = _text("0.11.0", "vllm/v1/core/kv_cache_utils.py")
    assert "num_tokens *= vllm_config.parallel_config.decode_context_parallel_size" in old
    new = _text("0.21.0", "vllm/v1/kv_cache_interface.py")
    assert "max_model_len = cdiv(max_model_len, dcp_world_size * pcp_world_size)" in new
    capacity = _text("0.21.0", "vllm/v1/core/kv_cache_utils.py")
    assert "num_tokens = int(max_concurrency * max_model_len)" in capacity
    spec = next(
        n
        for n in ast.walk(ast.parse(_text("0.34.0", "vllm/v1/kv_cache_interface.py")))
        if isinstance(n, ast.ClassDef) and n.name == "FullAttentionSpec"
    )
    newest = ast.unparse(
        next(
            f
            for f in spec.body
            if isinstance(f, ast.FunctionDef) and f.name == "max_memory_usage_bytes"
        )
    )
    assert "if self.dcp_sharded and dcp_world_size > 1:" in newest
    assert "max_model_len = cdiv(max_model_len, dcp_world_size)" in newest
    capacity = _function("0.34.0", "vllm/v1/core/kv_cache_utils.py", "get_kv_cache_capacity")
    assert "return (int(max_concurrency * max_model_len), max_concurrency)" in capacity
    assert "decode_context_parallel_size" not in capacity


@pytest.mark.parametrize(
    ("version", "uma_check"),
    [
        ("0.19.0", "shared_sysmem_device_mem_sms = ((8, 7), (11, 0), (12, 1))"),
        ("0.19.1", "shared_sysmem_device_mem_sms = ((8, 7), (11, 0), (12, 1))"),
        ("0.25.1", "if current_platform.is_integrated_gpu(device.index):"),
        (
            "0.34.0",
            "if current_platform.is_integrated_gpu(index) and not (\n"
            "        current_platform.is_cuda() and in_wsl()\n    ):",
        ),
    ],
)
def test_unified_memory_free_is_the_hosts(version: str, uma_check: str) -> None:
    """The GB10 records' unmodelled entry: on an integrated GPU (Spark, sm 12.1) the snapshot's
    free memory is psutil's available host memory, and the non-torch increase taken from the KV
    budget is total - free - torch's reserved, from the worker's snapshot to the profile's end
    (0.34.0: the same in mem_utils.device_memory_info, except under WSL)."""
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        src = z.read("vllm/utils/mem_utils.py").decode()
    measure = ast.unparse(
        next(
            n
            for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.FunctionDef) and n.name == "measure"
        )
    )
    assert uma_check in src
    if "device_memory_info(device)" in measure:  # 0.34.0: the same check, in its own function
        measure += ast.unparse(
            next(
                n
                for n in ast.walk(ast.parse(src))
                if isinstance(n, ast.FunctionDef) and n.name == "device_memory_info"
            )
        )
        assert "self.free_memory, self.total_memory = device_memory_info(device)" in measure
        assert "free_memory = psutil.virtual_memory().available" in measure
    else:
        assert "self.free_memory = psutil.virtual_memory().available" in measure
    assert "self.cuda_memory = self.total_memory - self.free_memory" in measure
    assert "self.non_torch_memory = self.cuda_memory - self.torch_memory" in measure
    assert "result.non_torch_increase = diff_from_create.non_torch_memory" in src


def test_0_10_1_1_snapshot_precedes_nccl() -> None:
    """The cross-node record's unmodelled entry: 0.10.1.1's worker snapshots memory before it
    starts the distributed environment, so NCCL's memory is in the non-torch increase."""
    src = _function("0.10.1.1", "vllm/v1/worker/gpu_worker.py", "init_device")
    assert src.index("self.init_snapshot = MemorySnapshot()") < src.index(
        "init_worker_distributed_environment("
    )
