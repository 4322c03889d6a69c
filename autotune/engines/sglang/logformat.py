"""Render SGLang's startup and failure log lines for a given version.

The simulated engine prints these so that `parse_startup` and `classify_failure` read it exactly
as they read real SGLang. Every format string below is copied from the wheels (0.5.9 .. 0.5.23)
with the version where it changed; device-side "GB" are GiB, host pools are decimal GB.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autotune.engines._logformat import failure_text, oom_from_values, required, traceback_lines

# format_size and torch_oom_message stay importable from here (the package's public names).
from autotune.engines._logformat import format_size as format_size
from autotune.engines._logformat import torch_oom_message as torch_oom_message
from autotune.engines.base import LaunchReport
from autotune.engines.sglang.flags import parse_version
from autotune.engines.sglang.logs import READY_TEXT, SIMULATED_MARKER
from autotune.errors import ConfigError

DEFAULT_TIMESTAMP = "2026-03-01 12:00:00"

# Version cut-offs (0.5.N minors) of the line formats, read from the wheels.
_LOAD_WEIGHT_DTYPE_UNTIL = 9  # `dtype=` in "Load weight end" (quant string from 0.5.10)
_KV_DTYPE_FROM = 13  # "KV Cache is allocated. dtype: ..."
_GRAPH_ROLE_FROM = 14  # "Capture target decode CUDA graph end. elapsed=..."
_GRAPH_BS_FROM = 22  # "... CUDA graph end. bs=[...], elapsed=..."
_HOST_POOL_TOKENS_FROM = 17  # "Allocating kv hierarchical KV host pool: N tokens, X GB ..."
_HOST_MAMBA_FROM = 10  # "Allocating X GB host memory for hierarchical Mamba cache (...)"
_HOST_MAMBA_SLOTS_FROM = 23  # "(... N state slots, layout=...)"
_MAMBA_ERRORS_FROM = 13  # "Not enough GPU memory for hybrid ..." / "... is too small ..."
_WEIGHTS_LEAVE_NO_MEMORY_FROM = 14
_SCHEDULER_DIED_FROM = 10  # RuntimeError "Rank 0 scheduler died during initialization ..."

_CAPTURE_FAILED_MSG_OLD = (  # <= 0.5.13
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
_CAPTURE_FAILED_MSG = (  # 0.5.14+
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
    "(Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."


def _line(ts: str, msg: str, rank: int | None = None) -> str:
    return f"[{ts}] {msg}" if rank is None else f"[{ts} TP{rank}] {msg}"


def decode_capture_bs(max_bs: int, *, speculative: bool = False) -> list[int]:
    """SGLang's default decode CUDA-graph batch sizes up to `max_bs` (reference §1.1)."""
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]
        sizes += list(range(272, max_bs + 1, 16))
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16)]
        sizes += list(range(512, max_bs + 1, 32))
    return [b for b in sizes if b <= max(1, max_bs)]


@dataclass(frozen=True)
class _Memory:
    """The device memory figures the startup lines print, derived from a report: free memory
    before the weights, after them, and before and after the CUDA graphs."""

    before_weights: float
    after_weights: float
    before_graph: float
    after_graph: float

    @classmethod
    def of(cls, report: LaunchReport, free_before_gib: float | None) -> _Memory:
        kv_total = (report.kv_k_gib or 0.0) + (report.kv_v_gib or 0.0)
        mamba_total = sum(
            x or 0.0 for x in (report.mamba_conv_gib, report.mamba_ssm_gib, report.mamba_spec_gib)
        )
        graph = report.graph_gib or 0.0
        avail_end = report.available_gpu_mem_gib or 0.0
        pre = free_before_gib if free_before_gib is not None else report.free_before_weights_gib
        if pre is None:
            pre = avail_end + graph + kv_total + mamba_total + (report.weights_gib or 0.0)
        return cls(pre, pre - (report.weights_gib or 0.0), avail_end + graph, avail_end)


def format_startup_lines(
    version: str,
    report: LaunchReport,
    *,
    tp_size: int = 1,
    kv_dtype_torch: str = "torch.float8_e4m3fn",
    model_class: str = "Qwen3_5ForConditionalGeneration",
    weights_dtype: str = "torch.bfloat16",
    quant_str: str | None = None,
    free_before_gib: float | None = None,
    prefill_graph_gib: float | None = None,
    speculative: bool = False,
    capture_bs: list[int] | None = None,
    host_pool_label: str = "kv",
    host_mamba_gb: float | None = None,
    host_mamba_slots: int | None = None,
    host_layout: str = "page_first",
    mamba_conv_window_gib: float = 0.0,
    timestamp: str = DEFAULT_TIMESTAMP,
    elapsed_s: float = 1.0,
) -> list[str]:
    """The startup lines SGLang `version` prints for the figures in `report`, prefixes included.

    Only figures that are set produce lines. Per-rank lines repeat for each TP rank (prefix
    ` TPr` when tp_size > 1); the summary line comes from rank 0, the ready line from the HTTP
    server (no rank). `report.kv_dtype` (a torch dtype string) overrides `kv_dtype_torch`;
    `report.graph_gib` is split into decode (graph - prefill) and `prefill_graph_gib`;
    `report.host_pool_gb` into the KV pool and `host_mamba_gb`; `report.mamba_spec_gib` into
    the intermediate SSM cache and `mamba_conv_window_gib`.

    Raises:
        ConfigError: a bad version, or figures the version's format cannot express.
    """
    minor = parse_version(version)[2]
    ts = timestamp
    ranks: list[int | None] = [None] if tp_size <= 1 else list(range(tp_size))
    mem = _Memory.of(report, free_before_gib)
    per_rank = [
        *_weights_msgs(minor, report, mem, model_class, weights_dtype, quant_str, elapsed_s),
        *_pool_msgs(minor, report, kv_dtype_torch, mamba_conv_window_gib),
        *_graph_lines(minor, report, prefill_graph_gib, mem, speculative, capture_bs, elapsed_s),
    ]
    lines = [_line(ts, SIMULATED_MARKER)] if report.simulated else []
    lines += [_line(ts, m, rank) for rank in ranks for m in per_rank]
    if report.host_pool_gb is not None:
        host = _host_lines(
            minor, report, host_pool_label, host_mamba_gb, host_mamba_slots, host_layout
        )
        lines += [_line(ts, m, ranks[0]) for m in host]
    lines += [_line(ts, w) for w in report.warnings]
    if report.max_total_num_tokens is not None:
        lines.append(_line(ts, _summary_msg(report, mem), ranks[0]))
    if report.ready:
        lines.append(_line(ts, READY_TEXT))
    return lines


def _weights_msgs(
    minor: int,
    report: LaunchReport,
    mem: _Memory,
    model_class: str,
    weights_dtype: str,
    quant_str: str | None,
    elapsed_s: float,
) -> list[str]:
    if report.weights_gib is None:
        return []
    if minor <= _LOAD_WEIGHT_DTYPE_UNTIL:
        middle = f"dtype={weights_dtype}, "
    else:
        middle = f"{quant_str}, " if quant_str else ""
    return [
        f"Load weight begin. avail mem={mem.before_weights:.2f} GB",
        f"Load weight end. elapsed={elapsed_s:.2f} s, type={model_class}, {middle}"
        f"avail mem={mem.after_weights:.2f} GB, mem usage={report.weights_gib:.2f} GB.",
    ]


def _pool_msgs(
    minor: int, report: LaunchReport, kv_dtype_torch: str, conv_window: float
) -> list[str]:
    """The KV and Mamba pools' allocation lines."""
    out: list[str] = []
    if report.kv_pool_tokens is not None:
        dtype = report.kv_dtype or kv_dtype_torch
        head = "KV Cache is allocated. "
        if minor >= _KV_DTYPE_FROM:
            head += f"dtype: {dtype}, "
        if report.kv_v_gib is None:
            sizes = f"KV size: {report.kv_k_gib or 0.0:.2f} GB"
        else:
            sizes = f"K size: {report.kv_k_gib or 0.0:.2f} GB, V size: {report.kv_v_gib:.2f} GB"
        out.append(f"{head}#tokens: {report.kv_pool_tokens}, {sizes}")
    if report.mamba_slots is not None:
        msg = (
            f"Mamba Cache is allocated. max_mamba_cache_size: {report.mamba_slots}, "
            f"conv_state size: {report.mamba_conv_gib or 0.0:.2f}GB, "
            f"ssm_state size: {report.mamba_ssm_gib or 0.0:.2f}GB "
        )
        if report.mamba_spec_gib is not None:
            # The log splits the spec buffers in two; mamba_spec_gib is their sum.
            msg += (
                f"intermediate_ssm_state_cache size: "
                f"{report.mamba_spec_gib - conv_window:.2f}GB "
                f"intermediate_conv_window_cache size: {conv_window:.2f}GB "
            )
        out.append(msg)
    return out


def _summary_msg(report: LaunchReport, mem: _Memory) -> str:
    return (
        f"max_total_num_tokens={report.max_total_num_tokens}, "
        f"chunked_prefill_size={report.chunked_prefill_size}, "
        f"max_prefill_tokens={report.max_prefill_tokens}, "
        f"max_running_requests={report.max_running_requests}, "
        f"context_len={report.context_len}, "
        f"available_gpu_mem={mem.after_graph:.2f} GB"
    )


def _graph_lines(
    minor: int,
    report: LaunchReport,
    prefill: float | None,
    mem: _Memory,
    speculative: bool,
    capture_bs: list[int] | None,
    elapsed: float,
) -> list[str]:
    """The CUDA graph captures' lines: decode (or verify) then prefill, by `minor`'s format."""
    if report.graph_gib is None:
        return []
    if not capture_bs:
        capture_bs = decode_capture_bs(report.max_running_requests or 1, speculative=speculative)
    before, after = mem.before_graph, mem.after_graph
    decode = report.graph_gib - (prefill or 0.0)
    after_decode = before - decode
    out: list[str] = []
    if minor < _GRAPH_ROLE_FROM:
        out.append(
            f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. "
            f"mem usage={decode:.2f} GB. avail mem={after_decode:.2f} GB."
        )
        if prefill is not None:
            out.append(
                f"Capture piecewise CUDA graph end. Time elapsed: {elapsed:.2f} s. "
                f"mem usage={prefill:.2f} GB. avail mem={after:.2f} GB."
            )
        return out
    name = "target verify" if speculative else "target decode"
    bs = f"bs={capture_bs}, " if minor >= _GRAPH_BS_FROM else ""
    out.append(
        f"Capture {name} CUDA graph end. {bs}elapsed={elapsed:.2f} s, "
        f"mem usage={decode:.2f} GB, avail mem={after_decode:.2f} GB."
    )
    if prefill is not None:
        out.append(
            f"Capture target prefill CUDA graph end. elapsed={elapsed:.2f} s, "
            f"mem usage={prefill:.2f} GB, avail mem={after:.2f} GB."
        )
    return out


def _host_lines(
    minor: int,
    report: LaunchReport,
    label: str,
    mamba_gb: float | None,
    mamba_slots: int | None,
    layout: str,
) -> list[str]:
    total = report.host_pool_gb or 0.0
    kv_gb = total - (mamba_gb or 0.0)
    if minor >= _HOST_POOL_TOKENS_FROM:
        if report.host_pool_tokens is None:
            raise ConfigError(
                f"SGLang 0.5.{minor} logs the host pool's token count: set host_pool_tokens",
                field="host_pool_tokens",
            )
        out = [
            f"Allocating {label} hierarchical KV host pool: {report.host_pool_tokens} tokens, "
            f"{kv_gb:.2f} GB host memory."
        ]
    else:
        out = [f"Allocating {kv_gb:.2f} GB host memory for hierarchical KV cache."]
    if mamba_gb is not None:
        if minor < _HOST_MAMBA_FROM:
            raise ConfigError(
                "SGLang 0.5.9 has no Mamba host pool (HiCache on hybrid models is unsupported)",
                field="host_mamba_gb",
            )
        if minor >= _HOST_MAMBA_SLOTS_FROM:
            detail = f"{mamba_slots or 0} state slots, layout={layout}"
        else:
            detail = f"layout={layout}"
        out.append(
            f"Allocating {mamba_gb:.2f} GB host memory for hierarchical Mamba cache ({detail})."
        )
    return out


# ---------------------------------------------------------------------------------------------
# Failures

FAILURE_KINDS = (
    "kv_cache_oom",
    "weights_leave_no_memory",
    "mamba_cache_oom",
    "mamba_too_small",
    "mamba_alloc",
    "cuda_oom",
    "graph_capture",
    "host_memory",
    "scheduler_dead",
)


_SCHEDULER_PY = "/usr/local/lib/python3.11/dist-packages/sglang/srt/managers/scheduler.py"


def _traceback(frame: str, exception: str) -> list[str]:
    return traceback_lines([(_SCHEDULER_PY, 3130, "run_scheduler_process", frame)], exception)


_INIT_FRAME = "scheduler = Scheduler(server_args, port_args)"


def _kv_cache_oom(minor: int, values: Mapping[str, object], kind: str) -> tuple[str, str]:
    mfs = required(values, "mem_fraction_static", kind)
    tail = (
        f"Current value: self.server_args.mem_fraction_static={mfs}"
        if minor <= 9
        else f"Current value: mem_fraction_static={mfs}"
    )
    exc = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. " + tail
    return _INIT_FRAME, exc


def _weights_leave_no_memory(
    minor: int, values: Mapping[str, object], kind: str
) -> tuple[str, str]:
    mfs = required(values, "mem_fraction_static", kind)
    avail, pre = required(values, "available_gib", kind), required(values, "pre_gib", kind)
    minimum = 1 - avail / pre
    suggested = -(-minimum * 1000 // 1) / 1000  # math.ceil to 3 decimals
    exc = (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        f"--mem-fraction-static={mfs}. Raise --mem-fraction-static above {suggested:.3f} "
        f"(minimum viable = 1 - available/pre = {minimum:.4f}). If using speculative "
        "decoding, draft weights are now counted."
    )
    return _INIT_FRAME, exc


def _mamba_cache_oom(minor: int, values: Mapping[str, object], kind: str) -> tuple[str, str]:
    exc = (
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
        f"Computed max_mamba_cache_size={required(values, 'max_mamba_cache_size', kind)} "
        f"(total_rest_memory={required(values, 'total_rest_gib', kind):.2f} GB, "
        f"mamba_cache_per_req={required(values, 'per_req_mb', kind):.2f} MB). "
        "Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, "
        "(3) reduce --speculative-num-draft-tokens, or (4) use GPUs with more memory."
    )
    return _INIT_FRAME, exc


def _mamba_too_small(minor: int, values: Mapping[str, object], kind: str) -> tuple[str, str]:
    exc = (
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve "
        f"any requests. max_mamba_cache_size={required(values, 'max_mamba_cache_size', kind)}, "
        f"mamba_ratio={required(values, 'ratio', kind)}, "
        f"resulting max_num_reqs={required(values, 'max_num_reqs', kind)}. "
        "Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or "
        "(3) use GPUs with more memory."
    )
    return _INIT_FRAME, exc


def _mamba_alloc(minor: int, values: Mapping[str, object], kind: str) -> tuple[str, str]:
    # Runtime (after ready): the scheduler's event loop dies on the assertion (P7).
    return "scheduler.event_loop_overlap()", "AssertionError: Can not alloc mamba cache"


def _cuda_oom(minor: int, values: Mapping[str, object], kind: str) -> tuple[str, str]:
    return _INIT_FRAME, f"torch.OutOfMemoryError: {oom_from_values(values, kind)}"


def _graph_capture(minor: int, values: Mapping[str, object], kind: str) -> tuple[str, str]:
    oom = oom_from_values(values, kind)
    msg = _CAPTURE_FAILED_MSG if minor >= _GRAPH_ROLE_FROM else _CAPTURE_FAILED_MSG_OLD
    return _INIT_FRAME, f"Exception: Capture cuda graph failed: {oom}\n{msg}"


def _host_memory(minor: int, values: Mapping[str, object], kind: str) -> tuple[str, str]:
    exc = (
        "ValueError: Not enough host memory available. Requesting "
        f"{required(values, 'requested_gb', kind):.2f} GB but only have "
        f"{required(values, 'available_gb', kind):.2f} GB free. Please reduce the size of the "
        "hierarchical cache."
    )
    return _INIT_FRAME, exc


# kind -> (the scheduler frame that raised, the exception text) for the version's minor
_EXCEPTIONS: dict[str, Callable[[int, Mapping[str, object], str], tuple[str, str]]] = {
    "kv_cache_oom": _kv_cache_oom,
    "weights_leave_no_memory": _weights_leave_no_memory,
    "mamba_cache_oom": _mamba_cache_oom,
    "mamba_too_small": _mamba_too_small,
    "mamba_alloc": _mamba_alloc,
    "cuda_oom": _cuda_oom,
    "graph_capture": _graph_capture,
    "host_memory": _host_memory,
}


def format_failure(
    kind: str,
    version: str,
    *,
    timestamp: str = DEFAULT_TIMESTAMP,
    tp_size: int = 1,
    **values: Any,
) -> list[str]:
    """SGLang `version`'s own error text for a failure `kind`, with the launcher's propagation.

    Kinds and their values:
        kv_cache_oom (mem_fraction_static); weights_leave_no_memory (mem_fraction_static,
        available_gib, pre_gib); mamba_cache_oom (max_mamba_cache_size, total_rest_gib,
        per_req_mb); mamba_too_small (max_mamba_cache_size, ratio, max_num_reqs); mamba_alloc
        (no values; runtime "Can not alloc mamba cache", FIELD-NOTES P7); cuda_oom and
        graph_capture (tried_gib, total_gib, free_gib, in_use_gib, allocated_gib, optional
        reserved_unallocated_gib); host_memory (requested_gb, available_gb); scheduler_dead
        (exit_code).
    Versions that print no message of their own for a situation print what they do instead:
    before 0.5.14 weights that leave nothing give "Not enough memory"; before 0.5.13 a mamba
    pool that does not fit raises nothing of its own (ConfigError here).

    Raises:
        ConfigError: unknown kind, missing values, or a kind the version cannot produce.
    """
    minor = parse_version(version)[2]
    kind = _kind_in(kind, minor)
    if kind == "scheduler_dead":
        return _scheduler_dead(minor, timestamp, required(values, "exit_code", kind))
    frame, exc = failure_text(_EXCEPTIONS, kind, FAILURE_KINDS)(minor, values, kind)
    tb = _traceback(frame, exc)
    rank: int | None = 0 if tp_size > 1 else None
    return [
        _line(timestamp, f"Scheduler hit an exception: {tb[0]}", rank),
        *tb[1:],
        "",
        _line(timestamp, SIGQUIT_LINE),
    ]


def _kind_in(kind: str, minor: int) -> str:
    """The failure kind that `minor` prints for `kind` (an older version's own message).

    Raises:
        ConfigError: the version prints no message of its own for `kind`.
    """
    if kind == "weights_leave_no_memory" and minor < _WEIGHTS_LEAVE_NO_MEMORY_FROM:
        return "kv_cache_oom"
    if kind in ("mamba_cache_oom", "mamba_too_small") and minor < _MAMBA_ERRORS_FROM:
        raise ConfigError(
            f"SGLang 0.5.{minor} prints no message of its own for {kind} (it has no such check "
            f"before 0.5.{_MAMBA_ERRORS_FROM})",
            field="kind",
        )
    return kind


def _scheduler_dead(minor: int, ts: str, code: object) -> list[str]:
    if minor < _SCHEDULER_DIED_FROM:
        return [
            _line(ts, "Rank 0 scheduler is dead. Please check if there are relevant logs."),
            _line(ts, f"Exit code: {code}"),
        ]
    return [
        _line(ts, "Traceback (most recent call last):"),
        "RuntimeError: Rank 0 scheduler died during initialization "
        f"(exit code: {code}). If exit code is -9 (SIGKILL), a common cause is the OS OOM "
        "killer. Run `dmesg -T | grep -i oom` to check.",
    ]
