"""Failure classes from SGLang's, PyTorch's and argparse's own message texts (reference §3)."""

from __future__ import annotations

from autotune.engines.base import FailureClass
from autotune.engines.sglang import classify_failure

TS = "[2026-03-01 12:00:09]"
TORCH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 19.68 GiB. GPU 0 has a total "
    "capacity of 23.68 GiB of which 11.88 GiB is free. Including non-PyTorch memory, this process "
    "has 11.79 GiB memory in use. Of the allocated memory 11.44 GiB is allocated by PyTorch, and "
    "43.59 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
    "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
    "See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
USAGE = "usage: launch_server.py [-h] --model-path MODEL_PATH [--host HOST] [--port PORT]"


def crash(*body: str) -> str:
    return "\n".join(
        [
            f"{TS} Load weight end. elapsed=8.12 s, type=Qwen3_5ForCausalLM, avail mem=14.38 GB, "
            "mem usage=16.53 GB.",
            f"{TS} Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 3130, '
            "in run_scheduler_process",
            "    scheduler = Scheduler(server_args, port_args)",
            *body,
            "",
            f"{TS} Received sigquit from a child process. It usually means the child failed.",
        ]
    )


def test_kv_cache_oom_0_5_9_tail() -> None:
    log = crash(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: self.server_args.mem_fraction_static=0.85"
    )
    f = classify_failure(log, -9, was_ready=False)
    assert f.cls is FailureClass.KV_CACHE_OOM
    assert "mem_fraction_static" in f.reason
    assert f.evidence is not None and f.evidence.startswith("RuntimeError: Not enough memory.")


def test_weights_leave_no_memory_0_5_23_names_the_threshold() -> None:
    log = crash(
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.5. Raise --mem-fraction-static above 0.678 (minimum viable = "
        "1 - available/pre = 0.6774). If using speculative decoding, draft weights are now counted."
    )
    f = classify_failure(log, -9, was_ready=False)
    assert f.cls is FailureClass.KV_CACHE_OOM
    assert "above 0.678" in f.reason


def test_cuda_oom_from_torch() -> None:
    f = classify_failure(crash(TORCH_OOM), -9, was_ready=False)
    assert f.cls is FailureClass.CUDA_OOM
    assert f.evidence is not None and f.evidence.startswith("torch.OutOfMemoryError: CUDA out of")


def test_graph_capture_wins_over_the_oom_text_it_wraps() -> None:
    log = crash(
        "Exception: Capture cuda graph failed: " + TORCH_OOM.split(": ", 1)[1],
        "Possible solutions:",
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
        "3. disable torch compile by not using --enable-torch-compile",
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
    )
    f = classify_failure(log, -9, was_ready=False)
    assert f.cls is FailureClass.GRAPH_CAPTURE
    assert f.evidence is not None and "Capture cuda graph failed" in f.evidence
    assert "cuda_graph_max_bs_decode" in f.reason


def test_mamba_messages() -> None:
    for text in (
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
        "Computed max_mamba_cache_size=0 (total_rest_memory=0.10 GB, mamba_cache_per_req=146.81 "
        "MB). Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, "
        "(3) reduce --speculative-num-draft-tokens, or (4) use GPUs with more memory.",
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any "
        "requests. max_mamba_cache_size=4, mamba_ratio=5, resulting max_num_reqs=0. Try: (1) "
        "reduce --max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs with "
        "more memory.",
    ):
        f = classify_failure(crash(text), -9, was_ready=False)
        assert f.cls is FailureClass.MAMBA_CACHE_OOM
        assert "max_mamba_cache_size" in f.reason


def test_mamba_alloc_under_load_p7() -> None:
    log = (
        f"{TS} The server is fired up and ready to roll!\n"
        f"{TS} Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, full token usage: "
        "0.95, mamba usage: 1.00, #running-req: 1, #queue-req: 0, input throughput (token/s): "
        "2000.00, cuda graph: False\n"
        f"{TS} Scheduler hit an exception: Traceback (most recent call last):\n"
        "AssertionError: Can not alloc mamba cache\n"
    )
    f = classify_failure(log, -9, was_ready=True)
    assert f.cls is FailureClass.MAMBA_CACHE_OOM
    assert "sglang#36770" in f.reason and "after it was serving" in f.reason
    assert f.evidence == "AssertionError: Can not alloc mamba cache"


def test_host_memory() -> None:
    log = crash(
        "ValueError: Not enough host memory available. Requesting 48.00 GB but only have 20.50 GB "
        "free. Please reduce the size of the hierarchical cache."
    )
    f = classify_failure(log, -9, was_ready=False)
    assert f.cls is FailureClass.HOST_MEMORY
    assert "hicache_size" in f.reason


def test_argparse_errors() -> None:
    for message in (
        "launch_server.py: error: unrecognized arguments: --mamba-radix-cache-strategy auto",
        "launch_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp8' (choose from "
        "'auto', 'fp8_e5m2', 'fp8_e4m3', 'bf16', 'bfloat16', 'fp4_e2m1')",
        "launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill",
        "launch_server.py: error: the following arguments are required: --model-path",
    ):
        f = classify_failure(f"{USAGE}\n{message}\n", 2, was_ready=False)
        assert f.cls is FailureClass.BAD_ARGUMENTS, message
        assert f.evidence == message
        assert message.split("error: ", 1)[1] in f.reason


def test_exit_code_2_with_other_argparse_error() -> None:
    log = f"{USAGE}\nlaunch_server.py: error: --page-size must be positive\n"
    f = classify_failure(log, 2, was_ready=False)
    assert f.cls is FailureClass.BAD_ARGUMENTS
    # the same text with another exit status is a plain crash
    assert classify_failure(log, 1, was_ready=False).cls is FailureClass.CRASH


def test_port_in_use() -> None:
    log = (
        f"{TS} INFO:     Started server process [4242]\n"
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
        "address already in use\n"
    )
    f = classify_failure(log, 1, was_ready=False)
    assert f.cls is FailureClass.PORT_IN_USE
    assert f.evidence is not None and "Errno 98" in f.evidence


def test_timeout_crash_after_ready_and_plain_crash() -> None:
    f = classify_failure(
        f"{TS} Load weight begin. avail mem=30.91 GB\n", None, was_ready=False, timed_out=True
    )
    assert f.cls is FailureClass.NEVER_READY
    log = f"{TS} The server is fired up and ready to roll!\n"
    f = classify_failure(log, -9, was_ready=True)
    assert f.cls is FailureClass.CRASH_AFTER_READY
    assert "SIGKILL" in f.reason and f.evidence == "Exit code: -9"
    log = (
        f"{TS} Load weight begin. avail mem=30.91 GB\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "KeyError: 'model.layers.0.self_attn.qkv_proj.weight'\n"
        f"{TS} Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
        f"{TS} Exit code: 1\n"
    )
    f = classify_failure(log, 1, was_ready=False)
    assert f.cls is FailureClass.CRASH
    assert "exit code 1" in f.reason
    assert f.evidence == "KeyError: 'model.layers.0.self_attn.qkv_proj.weight'"
    f = classify_failure(
        f"{TS} Rank 0 scheduler is dead. Please check if there are relevant "
        f"logs.\n{TS} Exit code: -9\n",
        0,
        was_ready=False,
    )
    assert f.cls is FailureClass.CRASH and f.evidence == "Exit code: -9"
    assert classify_failure("", None, was_ready=False).evidence is None


def test_evidence_is_bounded() -> None:
    log = crash(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        + "x" * 5000
    )
    f = classify_failure(log, 1, was_ready=False)
    assert f.evidence is not None and len(f.evidence) <= 600 and f.evidence.endswith("...")
