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
from autotune.engines.vllm.printer import API, DEFAULT_TIMESTAMP, Printer, format_gib
from autotune.engines.vllm.releases import EXTENSIBLE_KV_CACHE_SINCE, at_least, parse_version
from autotune.errors import ConfigError

FAILURE_KINDS = (
    "kv_cache_too_small",
    "no_cache_memory",
    "startup_free_memory",
    "profile_oom",
    "graph_capture_oom",
    "engine_dead",
)

_Frame = tuple[str, str, str]  # (path under vllm/v1, function, code line)
_Frames = Callable[[str, Mapping[str, object]], tuple[_Frame, ...]]  # (version, values)
_Text = Callable[[str, Mapping[str, object], str], str]  # (version, values, kind) -> exception
_SITE = "/usr/local/lib/python3.12/dist-packages/vllm/v1"
_FRAMES = {
    # where each failure is raised, innermost last (vllm/v1/...); "kv" and "init" by release
    # in _kv_frames and _init_frames
    "profile": (
        ("engine/core.py", "_initialize_kv_caches", "available_gpu_memory = self.model_executor"
         ".determine_available_memory()"),
        ("worker/gpu_worker.py", "determine_available_memory", "self.model_runner.profile_run()"),
        ("worker/gpu_model_runner.py", "profile_run", "hidden_states, last_hidden_states = "
         "self._dummy_run(self.max_num_tokens, is_profile=True)"),
    ),
    "graph": (
        ("engine/core.py", "_initialize_kv_caches", "self.model_executor.initialize_from_config("
         "kv_cache_configs)"),
        ("worker/gpu_worker.py", "compile_or_warm_up_model", "self.model_runner.capture_model()"),
        ("worker/gpu_model_runner.py", "capture_model", "self._capture_cudagraphs("),
    ),
}  # fmt: skip

# The KV cache memory check's two ValueErrors, as each release words them (checked against the
# wheels by tests/engines/test_vllm_failures_wheels.py). Where it lives: v1/core/kv_cache_utils.py
# check_enough_kv_cache_memory (0.10.0 .. 0.13.x), its `_check_enough_kv_cache_memory` helper
# (0.14.0 .. 0.32.x), v1/core/kv_cache_planning.py `_check_enough_kv_cache_memory` (0.33.0 on).
# Releases are the first of each wording:
KV_DOCS_LINK = "0.13.0"  # both errors end with " See <conserving_memory docs> for more details."
# the `_check_enough_kv_cache_memory` helper: format_gib figures (round(x, 2), was `:.2f`), the
# estimate sentence ends with its own space (before: "{estimated_msg} Try", two spaces without
# an estimate)
KV_CHECK_HELPER = "0.14.0"
# "model's" (was "models's") and the CPU backend in the gpu_memory_utilization advice
KV_CPU_BACKEND = "0.22.0"
KV_PLANNING_MODULE = "0.33.0"  # the check moves to v1/core/kv_cache_planning.py, same words
# kv_cache_planning.py `_more_kv_cache_memory_hint(vllm_config, after_warmup)` words the advice
# of both errors from the extensible KV cache, resolved_gpu_memory_utilization and whether the
# check failed on the profiled capacity (get_kv_cache_configs) or on the size measured after
# warmup (shrink_kv_cache_configs); the too-small error adds "Decreasing `max_model_len` ...".
KV_HINT = "0.34.0"
# The startup free-memory ValueError: v1/worker/gpu_worker.py Worker.init_device ("Free memory
# on device (...)", GiB = round(b / GiB_bytes, 2)) before 0.14.0; v1/worker/utils.py
# request_memory ("on device cuda:0", format_gib) from 0.14.0; 0.34.0 prints
# resolved_gpu_memory_utilization and skips the check with the extensible KV cache.
STARTUP_REQUEST_MEMORY = "0.14.0"
_DOCS = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def _extensible(version: str, values: Mapping[str, object]) -> bool:
    """The extensible KV cache (0.34.0 on, by default on CUDA and ROCm: `extensible_kv_cache`
    False for --no-enable-extensible-kv-cache)."""
    return at_least(version, KV_HINT) and bool(values.get("extensible_kv_cache", True))


def _more_memory_hint(version: str, values: Mapping[str, object]) -> str:
    """The advice after "No available memory for the cache blocks." (0.34.0's
    _more_kv_cache_memory_hint: values `extensible_kv_cache` (default True),
    `gpu_memory_utilization` (resolved: default 1.0 with the extensible cache), `after_warmup`
    (default False))."""
    if _extensible(version, values):
        used_by, graphs_hint = "the model and its activations", ""
        if values.get("after_warmup"):
            used_by = "the model, its activations, CUDA graphs and warmup"
            graphs_hint = (
                " CUDA graphs take less with fewer or smaller capture sizes in the compilation "
                "config."
            )
        util = values.get("gpu_memory_utilization")  # resolved: 1.0 unless given
        utilization = float(util) if isinstance(util, (int, float)) and util else 1.0
        if utilization < 1.0:
            return (
                f"The KV cache gets what is left after {used_by} within "
                f"`gpu_memory_utilization`={utilization}; increase it (with the extensible KV "
                "cache it defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`."
                + graphs_hint
            )
        return (
            f"The extensible KV cache already takes all device memory left after {used_by}; "
            "decrease `max_model_len` or `max_num_seqs`, or the model needs a device with "
            "more memory." + graphs_hint
        )
    if at_least(version, KV_CPU_BACKEND):
        return (
            "Try increasing `gpu_memory_utilization` when initializing the engine (this flag "
            "also controls CPU memory reservation on the CPU backend, despite its name)."
        )
    return "Try increasing `gpu_memory_utilization` when initializing the engine."


def _docs(version: str) -> str:
    return _DOCS if at_least(version, KV_DOCS_LINK) else ""


def _kv_too_small_text(version: str, values: Mapping[str, object], kind: str) -> str:
    est = values.get("estimated_max_len")
    model = "model's" if at_least(version, KV_CPU_BACKEND) else "models's"
    helper = at_least(version, KV_CHECK_HELPER)
    gib = format_gib if helper else (lambda x: f"{x:.2f}")
    # estimated_msg (only where estimated_max_len > 0) and the space before the advice: the
    # sentence carries it from 0.14.0, "{estimated_msg} Try" before (two spaces without one)
    estimated = (
        f"Based on the available memory, the estimated maximum model length is {est}. "
        if est
        else ""
    )
    if not helper:
        estimated = estimated.rstrip(" ") + " "
    if at_least(version, KV_HINT):
        advice = (
            _more_memory_hint(version, values)
            + " Decreasing `max_model_len` also reduces what is needed."
        )
    elif at_least(version, KV_CPU_BACKEND):
        advice = (
            "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU "
            "backend) or decreasing `max_model_len` when initializing the engine."
        )
    else:
        advice = (
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine."
        )
    return (
        f"ValueError: To serve at least one request with the {model} max seq len "
        f"({required(values, 'max_model_len', kind)}), "
        f"({gib(required(values, 'needed_gib', kind))} GiB KV cache is needed, which is larger "
        "than the available KV cache memory "
        f"({gib(required(values, 'available_gib', kind))} GiB). {estimated}{advice}"
        + _docs(version)
    )


def _no_cache_memory_text(version: str, values: Mapping[str, object], kind: str) -> str:
    return (
        "ValueError: No available memory for the cache blocks. "
        + _more_memory_hint(version, values)
        + _docs(version)
    )


def _startup_free_memory_text(version: str, values: Mapping[str, object], kind: str) -> str:
    if values.get("extensible_kv_cache") and at_least(version, EXTENSIBLE_KV_CACHE_SINCE):
        raise ConfigError(
            f"vLLM {version} skips the startup free-memory check with the extensible KV cache",
            field="extensible_kv_cache",
        )
    free, total = required(values, "free_gib", kind), required(values, "total_gib", kind)
    util = required(values, "gpu_memory_utilization", kind)
    device = " cuda:0" if at_least(version, STARTUP_REQUEST_MEMORY) else ""
    # GiB = round(b / GiB_bytes, 2) in init_device before 0.14.0, format_gib (the same) after
    gib = format_gib
    return (
        f"ValueError: Free memory on device{device} ({gib(free)}/{gib(total)} GiB) on startup "
        f"is less than desired GPU memory utilization ({util}, {gib(total * util)} GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )


def _kv_frames(version: str, values: Mapping[str, object]) -> tuple[_Frame, ...]:
    """The engine core's frames down to the KV cache check's raise in `version`."""
    if _extensible(version, values) and values.get("after_warmup"):
        return (
            ("engine/core.py", "_initialize_kv_caches",
             "num_blocks = finalize_extensible_kv_cache("),
            ("core/kv_cache_planning.py", "finalize_extensible_kv_cache",
             "shrink_kv_cache_configs("),
            ("core/kv_cache_planning.py", "shrink_kv_cache_configs",
             "_check_enough_kv_cache_memory("),
            ("core/kv_cache_planning.py", "_check_enough_kv_cache_memory", "raise ValueError("),
        )  # fmt: skip
    if not at_least(version, "0.11.0"):  # one get_kv_cache_config per worker
        return (
            ("engine/core.py", "_initialize_kv_caches",
             "get_kv_cache_config(vllm_config, kv_cache_spec_one_worker,"),
            ("core/kv_cache_utils.py", "get_kv_cache_config",
             "check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)"),
            ("core/kv_cache_utils.py", "check_enough_kv_cache_memory", "raise ValueError("),
        )  # fmt: skip
    module = "kv_cache_planning" if at_least(version, KV_PLANNING_MODULE) else "kv_cache_utils"
    check = "check_enough_kv_cache_memory"
    if at_least(version, KV_CHECK_HELPER):
        check = "_" + check
    return (
        ("engine/core.py", "_initialize_kv_caches", "kv_cache_configs = get_kv_cache_configs("),
        (f"core/{module}.py", "get_kv_cache_configs", f"{check}("),
        (f"core/{module}.py", check, "raise ValueError("),
    )


def _init_frames(version: str, values: Mapping[str, object]) -> tuple[_Frame, ...]:
    """The worker's frames down to the startup free-memory raise in `version`."""
    if not at_least(version, STARTUP_REQUEST_MEMORY):
        return (("worker/gpu_worker.py", "init_device", "raise ValueError("),)
    call = (
        "self.requested_memory = request_memory("
        if at_least(version, "0.32.0")  # external_weight_memory, the call over three lines
        else "self.requested_memory = request_memory(init_snapshot, self.cache_config)"
    )
    return (
        ("worker/gpu_worker.py", "init_device", call),
        ("worker/utils.py", "request_memory", "raise ValueError("),
    )


def _frames(kind: str) -> _Frames:
    """The same frames in every release."""
    return lambda version, values: _FRAMES[kind]


def _oom_text(version: str, values: Mapping[str, object], kind: str) -> str:
    return "torch.OutOfMemoryError: " + oom_from_values(values, kind)


# kind -> (its exception text, where it is raised, raised in the worker (else the engine core))
_FAILURE_TEXTS: dict[str, tuple[_Text, _Frames, bool]] = {
    "kv_cache_too_small": (_kv_too_small_text, _kv_frames, False),
    "no_cache_memory": (_no_cache_memory_text, _kv_frames, False),
    "startup_free_memory": (_startup_free_memory_text, _init_frames, True),
    "profile_oom": (_oom_text, _frames("profile"), True),
    "graph_capture_oom": (_oom_text, _frames("graph"), True),
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
    optional estimated_max_len); no_cache_memory (none); both KV kinds on 0.34.0 also read
    extensible_kv_cache (default True), gpu_memory_utilization (resolved, default 1.0) and
    after_warmup (default False: the check failed on the profiled capacity, not on the size
    measured after warmup); startup_free_memory (free_gib, total_gib, gpu_memory_utilization;
    0.34.0 refuses extensible_kv_cache=True, a check it skips then); profile_oom and
    graph_capture_oom (tried_gib, total_gib, free_gib, in_use_gib, allocated_gib, optional
    reserved_unallocated_gib); engine_dead (exit_code: the core died without a Python error,
    e.g. SIGKILL -9).

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
    return [*_engine_traceback(p, who, frames(version, values), exc), *_core_init_failed(p, 1)]


def _engine_traceback(p: Printer, who: str, frames: tuple[_Frame, ...], exc: str) -> list[str]:
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
