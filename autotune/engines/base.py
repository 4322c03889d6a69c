"""What every engine adapter provides, and the typed results they produce.

Invariants for implementers:
- Pure: no I/O, no subprocesses, no global state. Same input, same output.
- A configuration is a mapping of the engine's own field names (``page_size``,
  ``mem_fraction_static``) to values; ``None`` means "let the engine decide" and emits no flag.
- A field the engine version lacks raises UnsupportedFlagError naming the field, the version and
  the versions that have it; it is never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class FailureClass(StrEnum):
    """Why a trial's engine did not serve; stored with every failed trial."""

    KV_CACHE_OOM = "kv_cache_oom"  # "Not enough memory. Please try to increase --mem-fraction..."
    MAMBA_CACHE_OOM = "mamba_cache_oom"  # hybrid state cache too small / cannot alloc
    CUDA_OOM = "cuda_oom"  # torch.OutOfMemoryError (load, warmup or under load)
    GRAPH_CAPTURE = "graph_capture_failed"  # "Capture cuda graph failed"
    HOST_MEMORY = "host_memory"  # HiCache host pool does not fit in host RAM
    BAD_ARGUMENTS = "bad_arguments"  # argparse rejected the command line
    CRASH = "crash"  # exited before ready for another reason
    NEVER_READY = "never_ready"  # still not ready at the deadline
    CRASH_AFTER_READY = "crash_after_ready"  # died (or was killed) while serving
    PORT_IN_USE = "port_in_use"
    SPAWN_FAILED = "spawn_failed"  # the program could not be started (launcher missing, not +x)
    AUTH_REJECTED = "auth_rejected"  # the server refused the benchmark (HTTP 401/403: API key)
    BENCHMARK_ERROR = "benchmark_error"  # served garbage, malformed stream, HTTP errors
    WORKER_LOST = "worker_lost"  # the Ray actor running the trial died
    # the worker's installed engine, or the ready engine by its own report, follows another
    # release than the spec (sweep/installed.py)
    ENGINE_MISMATCH = "engine_mismatch"
    PLANNER_REJECTED = "planner_rejected"  # pruned before launch (never started)


class Failure(BaseModel):
    model_config = ConfigDict(frozen=True)

    cls: FailureClass
    reason: str = Field(description="one line a person can act on")
    evidence: str | None = Field(default=None, description="the log line that decided it")


class LaunchCommand(BaseModel):
    """argv (never a shell string) plus the environment variables the config needs."""

    model_config = ConfigDict(frozen=True)

    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)


class LaunchReport(BaseModel):
    """What a launch actually got, parsed from its startup log (every field optional)."""

    weights_gib: float | None = None
    free_before_weights_gib: float | None = Field(
        default=None, description="free GiB on rank 0 before weights (SGLang `Load weight begin`)"
    )
    kv_dtype: str | None = None
    kv_pool_tokens: int | None = None
    kv_k_gib: float | None = None
    kv_v_gib: float | None = None
    mamba_slots: int | None = None
    mamba_conv_gib: float | None = None
    mamba_ssm_gib: float | None = None
    mamba_spec_gib: float | None = None
    graph_gib: float | None = None
    max_total_num_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    max_running_requests: int | None = None
    context_len: int | None = None
    available_gpu_mem_gib: float | None = None
    host_pool_tokens: int | None = None
    host_pool_gb: float | None = None
    engine_version: str | None = Field(
        default=None, description="the release the engine's own log states (vLLM)"
    )
    ready: bool = False
    simulated: bool = False
    warnings: list[str] = Field(default_factory=list)


class EngineAdapter(Protocol):
    """One serving engine: how to launch it, read its log, and explain its failures."""

    name: str

    def build_command(
        self,
        config: Mapping[str, Any],
        *,
        model: str,
        version: str,
        host: str = "127.0.0.1",
        port: int = 30000,  # each engine has its own default (vLLM 8000, llama-server 8080)
        launcher: Sequence[str] | None = None,
    ) -> LaunchCommand:
        """argv + env for one launch of ``config``.

        ``launcher`` is the argv prefix replacing the engine's own (``python3 -m
        sglang.launch_server``, ``vllm serve``, the llama-server binary): the simulator's module,
        a venv's interpreter. ``None`` means the engine's default.
        """
        ...

    def health_path(self) -> str: ...

    def version_path(self) -> str | None:
        """GET path whose JSON answer's "version" is the running engine's release (None: the
        engine serves none)."""
        ...

    def is_ready_line(self, line: str) -> bool: ...

    def parse_startup(self, log_text: str) -> LaunchReport: ...

    def classify_failure(
        self,
        log_text: str,
        returncode: int | None,
        *,
        was_ready: bool,
        timed_out: bool = False,
    ) -> Failure: ...
