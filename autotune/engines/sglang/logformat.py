"""Render SGLang's startup and failure log lines for a given version.

The simulated engine prints these so that `parse_startup` and `classify_failure` read it exactly
as they read real SGLang. Every format string below is copied from the wheels (0.5.9 .. 0.5.23)
with the version where it changed; device-side "GB" are GiB, host pools are decimal GB.
"""

from __future__ import annotations

from typing import Any

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
    lines: list[str] = []
    if report.simulated:
        lines.append(_line(ts, SIMULATED_MARKER))

    kv_total = (report.kv_k_gib or 0.0) + (report.kv_v_gib or 0.0)
    mamba_total = sum(
        x or 0.0 for x in (report.mamba_conv_gib, report.mamba_ssm_gib, report.mamba_spec_gib)
    )
    graph = report.graph_gib or 0.0
    avail_end = report.available_gpu_mem_gib or 0.0
    pre = free_before_gib
    if pre is None:
        pre = avail_end + graph + kv_total + mamba_total + (report.weights_gib or 0.0)
    after_weights = pre - (report.weights_gib or 0.0)
    before_graph = avail_end + graph

    for rank in ranks:
        if report.weights_gib is not None:
            lines.append(_line(ts, f"Load weight begin. avail mem={pre:.2f} GB", rank))
            if minor <= _LOAD_WEIGHT_DTYPE_UNTIL:
                middle = f"dtype={weights_dtype}, "
            else:
                middle = f"{quant_str}, " if quant_str else ""
            lines.append(
                _line(
                    ts,
                    f"Load weight end. elapsed={elapsed_s:.2f} s, type={model_class}, {middle}"
                    f"avail mem={after_weights:.2f} GB, mem usage={report.weights_gib:.2f} GB.",
                    rank,
                )
            )
        if report.kv_pool_tokens is not None:
            dtype = report.kv_dtype or kv_dtype_torch
            head = "KV Cache is allocated. "
            if minor >= _KV_DTYPE_FROM:
                head += f"dtype: {dtype}, "
            if report.kv_v_gib is None:
                sizes = f"KV size: {report.kv_k_gib or 0.0:.2f} GB"
            else:
                sizes = (
                    f"K size: {report.kv_k_gib or 0.0:.2f} GB, V size: {report.kv_v_gib:.2f} GB"
                )
            lines.append(_line(ts, f"{head}#tokens: {report.kv_pool_tokens}, {sizes}", rank))
        if report.mamba_slots is not None:
            msg = (
                f"Mamba Cache is allocated. max_mamba_cache_size: {report.mamba_slots}, "
                f"conv_state size: {report.mamba_conv_gib or 0.0:.2f}GB, "
                f"ssm_state size: {report.mamba_ssm_gib or 0.0:.2f}GB "
            )
            if report.mamba_spec_gib is not None:
                # The log splits the spec buffers in two; mamba_spec_gib is their sum.
                conv_window = mamba_conv_window_gib
                msg += (
                    f"intermediate_ssm_state_cache size: "
                    f"{report.mamba_spec_gib - conv_window:.2f}GB "
                    f"intermediate_conv_window_cache size: {conv_window:.2f}GB "
                )
            lines.append(_line(ts, msg, rank))
        if report.graph_gib is not None:
            lines += [
                _line(ts, m, rank)
                for m in _graph_lines(
                    minor,
                    graph,
                    prefill_graph_gib,
                    before_graph,
                    avail_end,
                    speculative,
                    capture_bs
                    or decode_capture_bs(
                        report.max_running_requests or 1, speculative=speculative
                    ),
                    elapsed_s,
                )
            ]

    if report.host_pool_gb is not None:
        lines += [
            _line(ts, m, ranks[0])
            for m in _host_lines(
                minor, report, host_pool_label, host_mamba_gb, host_mamba_slots, host_layout
            )
        ]
    lines += [_line(ts, w) for w in report.warnings]
    if report.max_total_num_tokens is not None:
        lines.append(
            _line(
                ts,
                f"max_total_num_tokens={report.max_total_num_tokens}, "
                f"chunked_prefill_size={report.chunked_prefill_size}, "
                f"max_prefill_tokens={report.max_prefill_tokens}, "
                f"max_running_requests={report.max_running_requests}, "
                f"context_len={report.context_len}, "
                f"available_gpu_mem={avail_end:.2f} GB",
                ranks[0],
            )
        )
    if report.ready:
        lines.append(_line(ts, READY_TEXT))
    return lines


def _graph_lines(
    minor: int,
    graph: float,
    prefill: float | None,
    before: float,
    after: float,
    speculative: bool,
    capture_bs: list[int],
    elapsed: float,
) -> list[str]:
    decode = graph - (prefill or 0.0)
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


def format_size(num_bytes: float) -> str:
    """PyTorch's c10 format_size (CUDACachingAllocator): bytes, KiB, MiB or GiB."""
    if num_bytes <= 1024:
        return f"{int(num_bytes)} bytes"
    if num_bytes <= 1048576:
        return f"{num_bytes / 1024:.2f} KiB"
    if num_bytes <= 1073741824:
        return f"{num_bytes / 1048576:.2f} MiB"
    return f"{num_bytes / 1073741824:.2f} GiB"


def torch_oom_message(
    *,
    tried_gib: float,
    total_gib: float,
    free_gib: float,
    in_use_gib: float,
    allocated_gib: float,
    reserved_unallocated_gib: float = 0.0,
    gpu: int = 0,
) -> str:
    """torch.OutOfMemoryError's text (one line), as the CUDA caching allocator words it."""
    g = 1 << 30
    return (
        f"CUDA out of memory. Tried to allocate {format_size(tried_gib * g)}. GPU {gpu} has a "
        f"total capacity of {format_size(total_gib * g)} of which {format_size(free_gib * g)} "
        f"is free. Including non-PyTorch memory, this process has {format_size(in_use_gib * g)} "
        f"memory in use. Of the allocated memory {format_size(allocated_gib * g)} is allocated "
        f"by PyTorch, and {format_size(reserved_unallocated_gib * g)} is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def _traceback(frame: str, exception: str) -> list[str]:
    return [
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.11/dist-packages/sglang/srt/managers/scheduler.py",'
        " line 3130, in run_scheduler_process",
        f"    {frame}",
        *exception.rstrip("\n").split("\n"),
    ]


def _get(values: dict[str, Any], key: str, kind: str) -> Any:
    if key not in values:
        raise ConfigError(f"format_failure({kind!r}) needs {key}=...", field=key)
    return values[key]


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
    rank: int | None = 0 if tp_size > 1 else None
    ts = timestamp

    def scheduler_exception(frame: str, exception: str) -> list[str]:
        tb = _traceback(frame, exception)
        return [_line(ts, f"Scheduler hit an exception: {tb[0]}", rank), *tb[1:]]

    init_frame = "scheduler = Scheduler(server_args, port_args)"
    if kind == "weights_leave_no_memory" and minor < _WEIGHTS_LEAVE_NO_MEMORY_FROM:
        kind = "kv_cache_oom"
    if kind in ("mamba_cache_oom", "mamba_too_small") and minor < _MAMBA_ERRORS_FROM:
        raise ConfigError(
            f"SGLang 0.5.{minor} prints no message of its own for {kind} (it has no such check "
            f"before 0.5.{_MAMBA_ERRORS_FROM})",
            field="kind",
        )
    if kind == "kv_cache_oom":
        mfs = _get(values, "mem_fraction_static", kind)
        tail = (
            f"Current value: self.server_args.mem_fraction_static={mfs}"
            if minor <= 9
            else f"Current value: mem_fraction_static={mfs}"
        )
        exc = (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            + tail
        )
        body = scheduler_exception(init_frame, exc)
    elif kind == "weights_leave_no_memory":
        mfs = _get(values, "mem_fraction_static", kind)
        avail, pre = _get(values, "available_gib", kind), _get(values, "pre_gib", kind)
        minimum = 1 - avail / pre
        suggested = -(-minimum * 1000 // 1) / 1000  # math.ceil to 3 decimals
        exc = (
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={mfs}. Raise --mem-fraction-static above {suggested:.3f} "
            f"(minimum viable = 1 - available/pre = {minimum:.4f}). If using speculative "
            "decoding, draft weights are now counted."
        )
        body = scheduler_exception(init_frame, exc)
    elif kind == "mamba_cache_oom":
        exc = (
            "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
            f"Computed max_mamba_cache_size={_get(values, 'max_mamba_cache_size', kind)} "
            f"(total_rest_memory={_get(values, 'total_rest_gib', kind):.2f} GB, "
            f"mamba_cache_per_req={_get(values, 'per_req_mb', kind):.2f} MB). "
            "Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, "
            "(3) reduce --speculative-num-draft-tokens, or (4) use GPUs with more memory."
        )
        body = scheduler_exception(init_frame, exc)
    elif kind == "mamba_too_small":
        exc = (
            "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve "
            f"any requests. max_mamba_cache_size={_get(values, 'max_mamba_cache_size', kind)}, "
            f"mamba_ratio={_get(values, 'ratio', kind)}, "
            f"resulting max_num_reqs={_get(values, 'max_num_reqs', kind)}. "
            "Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or "
            "(3) use GPUs with more memory."
        )
        body = scheduler_exception(init_frame, exc)
    elif kind == "mamba_alloc":
        # Runtime (after ready): the scheduler's event loop dies on the assertion (P7).
        body = scheduler_exception(
            "scheduler.event_loop_overlap()", "AssertionError: Can not alloc mamba cache"
        )
    elif kind in ("cuda_oom", "graph_capture"):
        oom = torch_oom_message(
            tried_gib=_get(values, "tried_gib", kind),
            total_gib=_get(values, "total_gib", kind),
            free_gib=_get(values, "free_gib", kind),
            in_use_gib=_get(values, "in_use_gib", kind),
            allocated_gib=_get(values, "allocated_gib", kind),
            reserved_unallocated_gib=values.get("reserved_unallocated_gib", 0.0),
        )
        if kind == "cuda_oom":
            body = scheduler_exception(init_frame, f"torch.OutOfMemoryError: {oom}")
        else:
            msg = _CAPTURE_FAILED_MSG if minor >= _GRAPH_ROLE_FROM else _CAPTURE_FAILED_MSG_OLD
            exc = f"Exception: Capture cuda graph failed: {oom}\n{msg}"
            body = scheduler_exception(init_frame, exc)
    elif kind == "host_memory":
        exc = (
            "ValueError: Not enough host memory available. Requesting "
            f"{_get(values, 'requested_gb', kind):.2f} GB but only have "
            f"{_get(values, 'available_gb', kind):.2f} GB free. Please reduce the size of the "
            "hierarchical cache."
        )
        body = scheduler_exception(init_frame, exc)
    elif kind == "scheduler_dead":
        code = _get(values, "exit_code", kind)
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
    else:
        raise ConfigError(f"unknown failure kind {kind!r}; valid: {', '.join(FAILURE_KINDS)}")
    return [*body, "", _line(ts, SIGQUIT_LINE)]
