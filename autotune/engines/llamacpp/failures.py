"""Why a llama-server launch did not serve: its log text and exit status -> a Failure.

The patterns are llama.cpp's own messages (common/arg.cpp, src/llama-kv-cache.cpp,
src/llama-context.cpp, ggml-backend, tools/server). Order matters: the KV cache and compute
buffer messages say what to change, so they win over the generic allocation failure and over
"timed out" / "died after ready".
"""

from __future__ import annotations

import re

from autotune.engines._failures import FailureClassifier, FailureRule, clip
from autotune.engines.base import FailureClass
from autotune.engines.llamacpp.logs import strip_prefix

_RULES: tuple[FailureRule, ...] = (
    FailureRule(
        FailureClass.BAD_ARGUMENTS,
        # common_params_parse: unknown flag, a handler that threw, a removed flag, a missing value
        re.compile(
            r"error: invalid argument: \S+|error while handling argument|the argument has been "
            r"removed|error: (?:expected value for|unknown value for) "
        ),
        "llama-server rejected the command line ({detail}): check the flags against this "
        "llama.cpp version",
    ),
    FailureRule(
        FailureClass.BAD_ARGUMENTS,
        # llama_init_from_model refuses combinations it cannot run
        re.compile(
            r"quantized V cache (?:requires flash_attn|was requested, but this requires)"
            r"|cache type \w+ with block size \d+ does not divide n_embd_head"
            r"|model does not support different K \(\w+\) and V"
        ),
        "llama.cpp rejected this combination of options ({detail})",
    ),
    FailureRule(
        FailureClass.PORT_IN_USE,
        re.compile(r"couldn't bind HTTP server socket|(?i:address already in use)"),
        "the server port is already in use: stop the other process or pick a free port",
    ),
    FailureRule(
        FailureClass.MAMBA_CACHE_OOM,
        re.compile(r"failed to allocate buffer for rs cache"),
        "the recurrent-state cache (one slot per sequence) does not fit: lower parallel",
    ),
    FailureRule(
        FailureClass.KV_CACHE_OOM,
        re.compile(r"failed to allocate buffer for kv cache|KV cache (?:does not fit|too large)"),
        "the KV cache does not fit in memory: lower ctx_size or parallel, or use a smaller "
        "cache_type_k/cache_type_v (q8_0 halves it)",
    ),
    FailureRule(
        FailureClass.CUDA_OOM,
        re.compile(
            r"failed to allocate compute (?:pp |tg )?buffers|cudaMalloc failed: out of memory"
            r"|CUDA error: out of memory|failed to allocate \w+ buffer of size"
            r"|failed to allocate buffer of size"
        ),
        "out of memory for weights or compute buffers: lower n_gpu_layers, ubatch_size or "
        "ctx_size",
    ),
    FailureRule(
        FailureClass.CRASH,
        re.compile(r"error loading model|failed to load model|failed to load draft model"),
        "the model (or draft model) could not be loaded: check the GGUF path and architecture "
        "({detail})",
    ),
)

_ERROR_LINE = re.compile(r"\berror\b|\bfailed\b|GGML_ASSERT|terminate called|Segmentation", re.I)


def _evidence(line: str) -> str:
    return clip(strip_prefix(line).strip())


def _detail(rule: FailureRule, line: str) -> str:
    text = strip_prefix(line).strip()
    for marker in ("error: ", "error loading model: ", "failed to load "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return text.strip().rstrip(":")[:200]


def _last_error(lines: list[str], returncode: int | None) -> str | None:
    """The last line that reports an error, else the exit status."""
    for line in reversed(lines):
        if _ERROR_LINE.search(line):
            return _evidence(line)
    return f"exit code {returncode}" if returncode is not None else None


_CLASSIFIER = FailureClassifier(
    rules=_RULES,
    detail=_detail,
    evidence=_evidence,
    last_error=_last_error,
    hang_hints="a large model loading, a slow disk",
    engine="llama-server",
)

# classify_failure(log_text, returncode, *, was_ready, timed_out=False) -> Failure: why
# a llama-server launch did not serve, or why its server died.
classify_failure = _CLASSIFIER.classify
