"""Why an SGLang launch did not serve: its log text and exit status -> a Failure.

The patterns are SGLang's (and PyTorch's, argparse's) own messages, reference §3. Order matters:
"Capture cuda graph failed" wraps a CUDA OOM text, so it is checked before CUDA_OOM; the
specific memory messages win over the generic "timed out" / "died after ready" classes because
they say what to change.
"""

from __future__ import annotations

import re

from autotune.engines._failures import (
    PYTHON_ERROR_LINE,
    FailureClassifier,
    FailureRule,
    clip,
    usage_detail,
)
from autotune.engines.base import FailureClass
from autotune.engines.sglang.logs import strip_prefix

_RULES: tuple[FailureRule, ...] = (
    FailureRule(
        FailureClass.BAD_ARGUMENTS,
        re.compile(
            r"error: (?:unrecognized arguments|argument --?\S+|ambiguous option"
            r"|the following arguments are required)"
        ),
        "SGLang rejected the command line ({detail}): check the flags against this engine version",
    ),
    FailureRule(
        FailureClass.PORT_IN_USE,
        # uvicorn: "[Errno 98] error while attempting to bind on address ...: address already in
        # use"; SGLang's own port checks: "Port is already in use." / "... is not available in".
        re.compile(
            r"(?i:address already in use)|\[Errno 98\]|Port is already in use"
            r"|port at \d+ is not available in \d+ seconds"
        ),
        "the server port is already in use: stop the other process or pick a free port",
    ),
    FailureRule(
        FailureClass.HOST_MEMORY,
        re.compile(r"Not enough host memory available"),
        "HiCache host pool does not fit in free host RAM (SGLang keeps 10 GiB free): lower "
        "hicache_size or hicache_ratio",
    ),
    FailureRule(
        FailureClass.GRAPH_CAPTURE,
        re.compile(r"Capture cuda graph failed"),
        "CUDA graph capture ran out of memory: lower mem_fraction_static or "
        "cuda_graph_max_bs_decode, or disable CUDA graphs",
    ),
    FailureRule(
        FailureClass.MAMBA_CACHE_OOM,
        re.compile(r"Not enough GPU memory for hybrid|state cache is too small to serve"),
        "Mamba (GDN) state cache does not fit: lower max_mamba_cache_size or "
        "max_running_requests, set mamba_ssm_dtype=bfloat16, or raise mem_fraction_static",
    ),
    FailureRule(
        FailureClass.MAMBA_CACHE_OOM,
        re.compile(r"Can not alloc mamba cache"),
        "Mamba state slots ran out under load (sglang#36770): leave headroom below "
        "max_total_tokens, raise max_mamba_cache_size or lower max_running_requests",
    ),
    FailureRule(
        FailureClass.KV_CACHE_OOM,
        re.compile(r"Loaded weights leave no GPU memory for the KV cache"),
        "weights leave no room for the KV cache: raise mem_fraction_static ({detail}) or load "
        "smaller weights",
    ),
    FailureRule(
        FailureClass.KV_CACHE_OOM,
        re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static"),
        "KV cache does not fit: raise mem_fraction_static or lower max_mamba_cache_size / "
        "context_length",
    ),
    FailureRule(
        FailureClass.CUDA_OOM,
        re.compile(r"CUDA out of memory|OutOfMemoryError"),
        "CUDA out of memory outside the static pools: lower mem_fraction_static (more "
        "activation slack), chunked_prefill_size or cuda_graph_max_bs_decode",
    ),
)

_EXIT_CODE = re.compile(r"[Ee]xit code:? (-?\d+)")


def _evidence(line: str) -> str:
    return clip(strip_prefix(line.strip()))


def _detail(rule: FailureRule, line: str) -> str:
    if rule.cls is FailureClass.BAD_ARGUMENTS:
        return usage_detail(line)
    match = re.search(r"Raise --mem-fraction-static above (\d+(?:\.\d+)?)", line)
    return f"above {match.group(1)}" if match else "higher"


def _last_error(lines: list[str], returncode: int | None) -> str | None:
    """The last line naming an Error/Exception, else the logged exit code, else the status."""
    for line in reversed(lines):
        text = strip_prefix(line.strip())
        if PYTHON_ERROR_LINE.search(text) and not text.startswith("Traceback"):
            return _evidence(text)
    for line in reversed(lines):
        if _EXIT_CODE.search(line):
            return _evidence(line)
    return f"Exit code: {returncode}" if returncode is not None else None


_CLASSIFIER = FailureClassifier(
    rules=_RULES,
    detail=_detail,
    evidence=_evidence,
    last_error=_last_error,
    hang_hints="weights download, compile, NCCL",
    usage_engine="SGLang",
)

# classify_failure(log_text, returncode, *, was_ready, timed_out=False) -> Failure: why
# an SGLang launch did not serve, or why its server died.
classify_failure = _CLASSIFIER.classify
