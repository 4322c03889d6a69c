"""classify_failure on vLLM's own error texts (V1 engine core, TP workers, argparse, uvicorn),
including the wrappers vLLM prints after the root cause."""

from __future__ import annotations

from autotune.engines.base import FailureClass
from autotune.engines.vllm import classify_failure

WRAPPER = (
    "(APIServer pid=1) ERROR 05-01 10:00:00 [core_client.py:600] Traceback (most recent call "
    "last):\nRuntimeError: Engine core initialization failed. See root cause above. Failed core "
    "proc(s): {'EngineCore_DP0': 1}\n"
)


def test_v0_kv_too_small_message() -> None:
    # The V0 worker's wording (vllm/worker/worker.py, still shipped in 0.10.x).
    log = (
        "ValueError: The model's max seq len (29000) is larger than the maximum number of tokens "
        "that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine.\n"
    )
    f = classify_failure(log, 1, was_ready=False)
    assert f.cls is FailureClass.KV_CACHE_OOM
    assert "max_model_len 29000, room for 23648 tokens" in f.reason


def test_v1_kv_too_small_wins_over_wrapper() -> None:
    log = (
        "(EngineCore_DP0 pid=5) ERROR 05-01 10:00:00 [core.py:708] EngineCore failed to start.\n"
        "(EngineCore_DP0 pid=5) ValueError: To serve at least one request with the model's max "
        "seq len (262144), (12.57 GiB KV cache is needed, which is larger than the available KV "
        "cache memory (3.1 GiB). Based on the available memory, the estimated maximum model "
        "length is 64496. Try increasing `gpu_memory_utilization` (which also controls CPU "
        "memory on the CPU backend) or decreasing `max_model_len` when initializing the engine.\n"
        + WRAPPER
    )
    f = classify_failure(log, 1, was_ready=False)
    assert f.cls is FailureClass.KV_CACHE_OOM
    assert "needs 12.57 GiB, 3.1 GiB available; it fits about 64496 tokens" in f.reason
    assert f.evidence is not None and f.evidence.startswith("ValueError: To serve")


def test_no_cache_memory_and_startup_free_memory() -> None:
    f = classify_failure(
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.\n" + WRAPPER,
        1,
        was_ready=False,
    )
    assert f.cls is FailureClass.KV_CACHE_OOM and "max_num_batched_tokens" in f.reason
    f = classify_failure(
        "(Worker_TP0 pid=7) ValueError: Free memory on device cuda:0 (21.59/21.66 GiB) on "
        "startup is less than desired GPU memory utilization (0.999, 21.64 GiB). Decrease GPU "
        "memory utilization or reduce GPU memory used by other processes.\n",
        1,
        was_ready=False,
    )
    assert f.cls is FailureClass.CUDA_OOM
    assert "21.59 of 21.66 GiB free, 0.999 asks for 21.64 GiB" in f.reason


def _oom_tb(frames: list[str]) -> str:
    body = ["(Worker_TP0 pid=9) Traceback (most recent call last):"]
    for fn in frames:
        body.append(
            f'(Worker_TP0 pid=9)   File "/x/vllm/v1/worker/gpu_worker.py", line 1, in {fn}'
        )
    body.append(
        "(Worker_TP0 pid=9) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 "
        "GiB. GPU 0 has a total capacity of 23.57 GiB of which 1.08 GiB is free."
    )
    return "\n".join(body) + "\n" + WRAPPER


def test_oom_at_profiling_vs_graph_capture_vs_serving() -> None:
    f = classify_failure(
        _oom_tb(["determine_available_memory", "profile_run", "_dummy_run"]), 1, was_ready=False
    )
    assert f.cls is FailureClass.CUDA_OOM and "profiling run" in f.reason
    f = classify_failure(
        _oom_tb(["compile_or_warm_up_model", "capture_model", "_capture_cudagraphs"]),
        1,
        was_ready=False,
    )
    assert f.cls is FailureClass.GRAPH_CAPTURE
    f = classify_failure(_oom_tb(["execute_model", "forward"]), -9, was_ready=True)
    assert f.cls is FailureClass.CUDA_OOM and "after it was serving" in f.reason


def test_bad_arguments_port_and_generic() -> None:
    f = classify_failure(
        "usage: vllm serve [model_tag] [options]\n"
        "vllm serve: error: unrecognized arguments: --page-size 64\n",
        2,
        was_ready=False,
    )
    assert f.cls is FailureClass.BAD_ARGUMENTS and "--page-size 64" in f.reason
    f = classify_failure(
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): "
        "address already in use\n",
        1,
        was_ready=False,
    )
    assert f.cls is FailureClass.PORT_IN_USE
    # the root cause is the error before vLLM's wrappers
    f = classify_failure(
        "(EngineCore_DP0 pid=5) KeyError: 'model.layers.0.mlp.gate_up_proj.qweight'\n" + WRAPPER,
        1,
        was_ready=False,
    )
    assert f.cls is FailureClass.CRASH and f.evidence is not None
    assert f.evidence.startswith("KeyError")
    f = classify_failure(WRAPPER, 1, was_ready=False)
    assert f.evidence is not None and "Engine core initialization failed" in f.evidence


def test_timeouts_and_deaths() -> None:
    f = classify_failure("INFO loading weights\n", None, was_ready=False, timed_out=True)
    assert f.cls is FailureClass.NEVER_READY
    f = classify_failure("", -9, was_ready=True)
    assert f.cls is FailureClass.CRASH_AFTER_READY and "SIGKILL" in f.reason
    f = classify_failure("", 1, was_ready=False)
    assert f.cls is FailureClass.CRASH and f.evidence == "Exit code: 1"
