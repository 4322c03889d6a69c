"""Render vLLM's failure log lines for a given release: the exception text vLLM raises for each
failure kind (worded per release), the engine core's traceback down to it, and the API server's
"Engine core initialization failed" that follows.

The simulated engine prints these so that `classify_failure` reads them exactly as it reads real
vLLM (autotune.engines.vllm.failures).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from autotune.engines._logformat import failure_text, oom_from_values, required, traceback_lines
from autotune.engines.vllm.printer import API, DEFAULT_TIMESTAMP, Printer, gib_text
from autotune.engines.vllm.releases import at_least, parse_version

FAILURE_KINDS = (
    "kv_cache_too_small",
    "no_cache_memory",
    "startup_free_memory",
    "profile_oom",
    "graph_capture_oom",
    "engine_dead",
)

_SITE = "/usr/local/lib/python3.12/dist-packages/vllm/v1"
_FRAMES = {
    # where each failure is raised, innermost last (vllm/v1/...)
    "profile": (
        ("engine/core.py", "_initialize_kv_caches", "available_gpu_memory = self.model_executor"
         ".determine_available_memory()"),
        ("worker/gpu_worker.py", "determine_available_memory", "self.model_runner.profile_run()"),
        ("worker/gpu_model_runner.py", "profile_run", "hidden_states, last_hidden_states = "
         "self._dummy_run(self.max_num_tokens, is_profile=True)"),
    ),
    "kv": (
        ("engine/core.py", "_initialize_kv_caches", "kv_cache_configs = get_kv_cache_configs("
         "vllm_config, kv_cache_specs, available_gpu_memory)"),
        ("core/kv_cache_utils.py", "check_enough_kv_cache_memory", "raise ValueError("),
    ),
    "graph": (
        ("engine/core.py", "_initialize_kv_caches", "self.model_executor.initialize_from_config("
         "kv_cache_configs)"),
        ("worker/gpu_worker.py", "compile_or_warm_up_model", "self.model_runner.capture_model()"),
        ("worker/gpu_model_runner.py", "capture_model", "self._capture_cudagraphs("),
    ),
    "init": (
        ("worker/gpu_worker.py", "init_device", "raise ValueError("),
    ),
}  # fmt: skip


def _kv_too_small_text(version: str, values: Mapping[str, object], kind: str) -> str:
    est = values.get("estimated_max_len")
    model = "model's" if at_least(version, "0.22.0") else "models's"
    gib = gib_text
    msg = (
        f"To serve at least one request with the {model} max seq len "
        f"({required(values, 'max_model_len', kind)}), "
        f"({gib(version, required(values, 'needed_gib', kind))} GiB KV cache is needed, which "
        "is larger than the available KV cache memory "
        f"({gib(version, required(values, 'available_gib', kind))} GiB)."
    )
    if est:
        msg += f" Based on the available memory, the estimated maximum model length is {est}."
    tail = (
        " Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU "
        "backend) or decreasing `max_model_len` when initializing the engine."
        if at_least(version, "0.22.0")
        else " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine."
    )
    return "ValueError: " + msg + tail


def _no_cache_memory_text(version: str, values: Mapping[str, object], kind: str) -> str:
    return (
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine."
    )


def _startup_free_memory_text(version: str, values: Mapping[str, object], kind: str) -> str:
    free, total = required(values, "free_gib", kind), required(values, "total_gib", kind)
    util = required(values, "gpu_memory_utilization", kind)
    device = " cuda:0" if at_least(version, "0.14.0") else ""
    gib = gib_text
    return (
        f"ValueError: Free memory on device{device} ({gib(version, free)}/{gib(version, total)} "
        f"GiB) on startup is less than desired GPU memory utilization ({util}, "
        f"{gib(version, total * util)} GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes."
    )


def _oom_text(version: str, values: Mapping[str, object], kind: str) -> str:
    return "torch.OutOfMemoryError: " + oom_from_values(values, kind)


# kind -> (its exception text, where it is raised, raised in the worker (else the engine core))
_FAILURE_TEXTS: dict[str, tuple[Callable[[str, Mapping[str, object], str], str], str, bool]] = {
    "kv_cache_too_small": (_kv_too_small_text, "kv", False),
    "no_cache_memory": (_no_cache_memory_text, "kv", False),
    "startup_free_memory": (_startup_free_memory_text, "init", True),
    "profile_oom": (_oom_text, "profile", True),
    "graph_capture_oom": (_oom_text, "graph", True),
}


def format_failure(
    kind: str,
    version: str,
    *,
    timestamp: str = DEFAULT_TIMESTAMP,
    tp_size: int = 1,
    pid: int = 4242,
    **values: Any,
) -> list[str]:
    """vLLM `version`'s own error text for a failure `kind`, with the engine core's traceback and
    the API server's "Engine core initialization failed" that follow it.

    Kinds and their values: kv_cache_too_small (max_model_len, needed_gib, available_gib,
    optional estimated_max_len); no_cache_memory (none); startup_free_memory (free_gib,
    total_gib, gpu_memory_utilization); profile_oom and graph_capture_oom (tried_gib, total_gib,
    free_gib, in_use_gib, allocated_gib, optional reserved_unallocated_gib); engine_dead
    (exit_code: the core died without a Python error, e.g. SIGKILL -9).

    Raises:
        ConfigError: unknown kind or missing values.
    """
    version = parse_version(version)
    p = Printer(version, timestamp, pid)
    if kind == "engine_dead":
        return _core_init_failed(p, required(values, "exit_code", kind))
    text, frames, in_worker = failure_text(_FAILURE_TEXTS, kind, FAILURE_KINDS)
    exc = text(version, values, kind)
    who = p.worker_name(0, tp_size) if in_worker else p.core_name()
    return [*_engine_traceback(p, who, _FRAMES[frames], exc), *_core_init_failed(p, 1)]


def _engine_traceback(
    p: Printer, who: str, frames: tuple[tuple[str, str, str], ...], exc: str
) -> list[str]:
    """ "EngineCore failed to start." and the traceback down to `exc`, in process `who`."""
    head = f"({who} pid={p.pid})"
    where = [(f"{_SITE}/{path}", 1, func, code_line) for path, func, code_line in frames]
    return [
        p.line(who, "core.py:632", "EngineCore failed to start.", "ERROR"),
        *(f"{head} {line}" for line in traceback_lines(where, exc)),
    ]


def _core_init_failed(p: Printer, exit_code: object) -> list[str]:
    """The API server's traceback head and "Engine core initialization failed"."""
    return [
        p.line(API, "api_server.py:1", "Traceback (most recent call last):", "ERROR"),
        "RuntimeError: Engine core initialization failed. See root cause above. "
        f"Failed core proc(s): {{{p.core_name()!r}: {exit_code}}}",
    ]
