"""Why a vLLM launch did not serve: its log text and exit status -> a Failure.

The patterns are vLLM's (and PyTorch's, argparse's) own messages, checked against the wheels
0.10.0 .. 0.34.0 (vllm/v1/core/kv_cache_utils.py or kv_cache_planning.py,
vllm/v1/worker/gpu_worker.py or worker/utils.py). Order matters: a CUDA OOM whose traceback
runs through graph capture is a graph-capture failure; one through the profiling run is an OOM
at profiling; the KV-cache messages say exactly what to change, so they win over the generic
"Engine core initialization failed" wrapper and over timeouts.
"""

from __future__ import annotations

import re

from autotune.engines._failures import (
    AFTER_READY,
    PYTHON_ERROR_LINE,
    FailureClassifier,
    FailureRule,
    clip,
    usage_detail,
)
from autotune.engines.base import Failure, FailureClass
from autotune.engines.vllm.logs import strip_prefix

# "To serve at least one request with the models's max seq len (N), (X GiB KV cache is needed,
# which is larger than the available KV cache memory (Y GiB). [Based on the available memory,
# the estimated maximum model length is M.]" (`models's` up to 0.21, `model's` from 0.22).
KV_TOO_SMALL_RE = re.compile(
    r"To serve at least one request with the models?'s max seq len \((?P<len>\d+)\), "
    r"\((?P<need>[\d.]+) GiB KV cache is needed, which is larger than the available KV cache "
    r"memory \((?P<have>-?[\d.]+) GiB\)\.(?: Based on the available memory, the estimated "
    r"maximum model length is (?P<est>\d+)\.)?"
)
# V0 worker (0.10.x only): "The model's max seq len (N) is larger than the maximum number of
# tokens that can be stored in KV cache (M)."
KV_TOO_SMALL_V0_RE = re.compile(
    r"The model's max seq len \((?P<len>\d+)\) is larger than the maximum number of tokens that "
    r"can be stored in KV cache \((?P<have>\d+)\)"
)
# "Free memory on device[ cuda:0] (F/T GiB) on startup is less than desired GPU memory
# utilization (U, W GiB)." (the device from 0.14.0, v1/worker/utils.py request_memory); from
# 0.32.0, with weights held by an external loader, "... less than the engine's budget after
# excluding external process's weights (U, W GiB)."
STARTUP_FREE_RE = re.compile(
    r"Free memory on device(?: \S+)? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is "
    r"less than (?:desired GPU memory utilization|the engine's budget after excluding external "
    r"process's weights) \((?P<util>[\d.]+), (?P<want>[\d.]+) GiB\)"
)
_GRAPH_FRAMES = re.compile(
    r"capture_model|_capture_cudagraphs|profile_cudagraph_memory|cudagraph_capture|"
    r"Capturing CUDA graphs?|operation not permitted when stream is capturing|"
    r"CUDA graph capture",
    re.IGNORECASE,
)
_PROFILE_FRAMES = re.compile(r"profile_run|determine_available_memory|_dummy_sampler_run")
_OOM_RE = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")

_RULES: tuple[FailureRule, ...] = (
    FailureRule(
        FailureClass.BAD_ARGUMENTS,
        re.compile(
            r"error: (?:unrecognized arguments|argument --?\S+|ambiguous option"
            r"|the following arguments are required)"
        ),
        "vLLM rejected the command line ({detail}): check the flags against this engine version",
    ),
    FailureRule(
        FailureClass.PORT_IN_USE,
        re.compile(r"Address already in use|\[Errno 98\]"),
        "the server port is already in use: stop the other process or pick a free port",
    ),
    FailureRule(
        FailureClass.CUDA_OOM,
        STARTUP_FREE_RE,
        "the GPU had less free memory at startup than gpu_memory_utilization asks for "
        "({detail}): lower gpu_memory_utilization or free the GPU (a desktop session takes "
        "about 80 MB on GeForce cards)",
    ),
    FailureRule(
        FailureClass.KV_CACHE_OOM,
        re.compile(r"No available memory for the cache blocks"),
        "weights and the profiling peak leave no memory for the KV cache: raise "
        "gpu_memory_utilization or lower max_num_batched_tokens",
    ),
    FailureRule(
        FailureClass.KV_CACHE_OOM,
        KV_TOO_SMALL_RE,
        "the KV cache cannot hold one request of max_model_len ({detail}): raise "
        "gpu_memory_utilization, lower max_model_len, or use kv_cache_dtype fp8",
    ),
    FailureRule(
        FailureClass.KV_CACHE_OOM,
        KV_TOO_SMALL_V0_RE,
        "the KV cache cannot hold one request of max_model_len ({detail}): raise "
        "gpu_memory_utilization or lower max_model_len",
    ),
)


def _evidence(line: str) -> str:
    return clip(strip_prefix(line.strip()))


def _detail(rule: FailureRule, line: str) -> str:
    if rule.cls is FailureClass.BAD_ARGUMENTS:
        return usage_detail(line)
    m = rule.pattern.search(line)
    if m is None:
        return ""
    groups = m.groupdict()
    if "need" in groups:
        est = f"; it fits about {groups['est']} tokens" if groups.get("est") else ""
        return (
            f"max_model_len {groups['len']} needs {groups['need']} GiB, "
            f"{groups['have']} GiB available{est}"
        )
    if "util" in groups:
        return (
            f"{groups['free']} of {groups['total']} GiB free, {groups['util']} asks for "
            f"{groups['want']} GiB"
        )
    if "have" in groups:
        return f"max_model_len {groups['len']}, room for {groups['have']} tokens"
    return ""


def _oom_failure(lines: list[str], was_ready: bool) -> Failure | None:
    """A CUDA OOM, placed by its traceback (the frames before the error line, or the stack
    around it): in graph capture, in the profiling run, or elsewhere."""
    oom = next((i for i, ln in enumerate(lines) if _OOM_RE.search(ln)), None)
    if oom is None:
        return None
    suffix = AFTER_READY if was_ready else ""
    window = "\n".join(lines[max(0, oom - 60) : oom + 5])
    if _GRAPH_FRAMES.search(window):
        return Failure(
            cls=FailureClass.GRAPH_CAPTURE,
            reason="CUDA graph capture ran out of memory: lower gpu_memory_utilization "
            "(graphs live outside it before 0.20), cap max_cudagraph_capture_size, or set "
            "enforce_eager" + suffix,
            evidence=_evidence(lines[oom]),
        )
    if not was_ready and _PROFILE_FRAMES.search(window):
        return Failure(
            cls=FailureClass.CUDA_OOM,
            reason="CUDA out of memory in the profiling run (activation peak at "
            "max_num_batched_tokens): lower max_num_batched_tokens or max_num_seqs, or "
            "gpu_memory_utilization",
            evidence=_evidence(lines[oom]),
        )
    return Failure(
        cls=FailureClass.CUDA_OOM,
        reason="CUDA out of memory outside the KV cache: lower gpu_memory_utilization (more "
        "activation headroom) or max_num_batched_tokens" + suffix,
        evidence=_evidence(lines[oom]),
    )


def _capture_failure(lines: list[str], was_ready: bool) -> Failure | None:
    """CUDA graph capture failing without an OOM."""
    graph = next(
        (ln for ln in lines if "operation not permitted when stream is capturing" in ln), None
    )
    if graph is None:
        return None
    return Failure(
        cls=FailureClass.GRAPH_CAPTURE,
        reason="CUDA graph capture failed: set enforce_eager or change the graph sizes"
        + (AFTER_READY if was_ready else ""),
        evidence=_evidence(graph),
    )


# vLLM's wrappers around the real error: skip them when a root cause precedes.
_WRAPPERS = (
    "Engine core initialization failed",
    "EngineCore failed to start",
    "WorkerProc failed to start",
    "WorkerProc hit an exception",
    "Traceback",
)


def _root_cause(lines: list[str], returncode: int | None) -> str | None:
    """The last error line that is not one of vLLM's wrappers, else the last wrapper, else the
    exit status."""
    fallback: str | None = None
    for line in reversed(lines):
        text = strip_prefix(line.strip())
        if not PYTHON_ERROR_LINE.search(text):
            continue
        if any(w in text for w in _WRAPPERS):
            fallback = fallback or text
            continue
        return _evidence(text)
    if fallback is not None:
        return _evidence(fallback)
    return f"Exit code: {returncode}" if returncode is not None else None


_CLASSIFIER = FailureClassifier(
    rules=_RULES,
    detail=_detail,
    evidence=_evidence,
    last_error=_root_cause,
    hang_hints="weights download, torch.compile, NCCL",
    usage_engine="vLLM",
    steps=(_oom_failure, _capture_failure),
)

# classify_failure(log_text, returncode, *, was_ready, timed_out=False) -> Failure: why
# a vLLM launch did not serve, or why its server died (log_text: every process's lines, API
# server, engine core and TP workers).
classify_failure = _CLASSIFIER.classify
