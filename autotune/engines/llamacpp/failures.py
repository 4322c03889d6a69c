"""Why a llama-server launch did not serve: its log text and exit status -> a Failure.

The patterns are llama.cpp's own messages (common/arg.cpp, src/llama-kv-cache.cpp,
src/llama-context.cpp, ggml-backend, tools/server). Order matters: the KV cache and compute
buffer messages say what to change, so they win over the generic allocation failure and over
"timed out" / "died after ready".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.engines._failures import fallback_failure
from autotune.engines.base import Failure, FailureClass
from autotune.engines.llamacpp.logs import strip_prefix

_MAX_EVIDENCE = 600


@dataclass(frozen=True)
class _Rule:
    cls: FailureClass
    pattern: re.Pattern[str]
    reason: str


_RULES: tuple[_Rule, ...] = (
    _Rule(
        FailureClass.BAD_ARGUMENTS,
        # common_params_parse: unknown flag, a handler that threw, a removed flag, a missing value
        re.compile(
            r"error: invalid argument: \S+|error while handling argument|the argument has been "
            r"removed|error: (?:expected value for|unknown value for) "
        ),
        "llama-server rejected the command line ({detail}): check the flags against this "
        "llama.cpp version",
    ),
    _Rule(
        FailureClass.BAD_ARGUMENTS,
        # llama_init_from_model refuses combinations it cannot run
        re.compile(
            r"quantized V cache (?:requires flash_attn|was requested, but this requires)"
            r"|cache type \w+ with block size \d+ does not divide n_embd_head"
            r"|model does not support different K \(\w+\) and V"
        ),
        "llama.cpp rejected this combination of options ({detail})",
    ),
    _Rule(
        FailureClass.PORT_IN_USE,
        re.compile(r"couldn't bind HTTP server socket|(?i:address already in use)"),
        "the server port is already in use: stop the other process or pick a free port",
    ),
    _Rule(
        FailureClass.MAMBA_CACHE_OOM,
        re.compile(r"failed to allocate buffer for rs cache"),
        "the recurrent-state cache (one slot per sequence) does not fit: lower parallel",
    ),
    _Rule(
        FailureClass.KV_CACHE_OOM,
        re.compile(r"failed to allocate buffer for kv cache|KV cache (?:does not fit|too large)"),
        "the KV cache does not fit in memory: lower ctx_size or parallel, or use a smaller "
        "cache_type_k/cache_type_v (q8_0 halves it)",
    ),
    _Rule(
        FailureClass.CUDA_OOM,
        re.compile(
            r"failed to allocate compute (?:pp |tg )?buffers|cudaMalloc failed: out of memory"
            r"|CUDA error: out of memory|failed to allocate \w+ buffer of size"
            r"|failed to allocate buffer of size"
        ),
        "out of memory for weights or compute buffers: lower n_gpu_layers, ubatch_size or "
        "ctx_size",
    ),
    _Rule(
        FailureClass.CRASH,
        re.compile(r"error loading model|failed to load model|failed to load draft model"),
        "the model (or draft model) could not be loaded: check the GGUF path and architecture "
        "({detail})",
    ),
)

_ERROR_LINE = re.compile(r"\berror\b|\bfailed\b|GGML_ASSERT|terminate called|Segmentation", re.I)


def _evidence(line: str) -> str:
    text = strip_prefix(line).strip()
    return text if len(text) <= _MAX_EVIDENCE else text[: _MAX_EVIDENCE - 3] + "..."


def _detail(line: str) -> str:
    text = strip_prefix(line).strip()
    for marker in ("error: ", "error loading model: ", "failed to load "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.strip().rstrip(":")[:200]


def classify_failure(
    log_text: str,
    returncode: int | None,
    *,
    was_ready: bool,
    timed_out: bool = False,
) -> Failure:
    """Classify a launch that did not serve, or a server that died.

    Args:
        log_text: llama-server's combined stdout/stderr.
        returncode: exit status (None while still running; negative = killed by a signal).
        was_ready: the server had answered /health with 200 before it failed.
        timed_out: it never became ready before the deadline.
    """
    lines = log_text.splitlines()
    for rule in _RULES:
        hit = next((ln for ln in lines if rule.pattern.search(ln)), None)
        if hit is None:
            continue
        reason = rule.reason.format(detail=_detail(hit))
        if was_ready:
            reason += " (after it was serving)"
        return Failure(cls=rule.cls, reason=reason, evidence=_evidence(hit))

    return fallback_failure(
        _last_error(lines, returncode),
        returncode,
        was_ready=was_ready,
        timed_out=timed_out,
        engine="llama-server",
        hang_hints="a large model loading, a slow disk",
    )


def _last_error(lines: list[str], returncode: int | None) -> str | None:
    """The last line that reports an error, else the exit status."""
    for line in reversed(lines):
        if _ERROR_LINE.search(line):
            return _evidence(line)
    return f"exit code {returncode}" if returncode is not None else None
