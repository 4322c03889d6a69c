"""Render vLLM's startup log lines for a given release (the failure lines: failure_lines.py).

The simulated engine prints these so that `parse_startup` reads it exactly as it reads real
vLLM. Every format string is vLLM's own (see logs.py for where each lives), with the release
where it changed:

- process prefixes (printer.py): `(EngineCore_0 pid=N)` up to 0.10.1.1, `(EngineCore_DP0 pid=N)`
  after; TP workers `(Worker_TPR ...)` from 0.10.2; the API server `(APIServer pid=N)` from
  0.10.1.
- `Model loading took %.4f GiB and` (<= 0.11.0), `%.4f GiB memory and` (0.11.1 .. 0.13.0),
  `%s GiB memory and` with format_gib (0.14.0+); `Available KV cache memory: %.2f` / `%s GiB`.
- KV capacity: two lines up to 0.27.1, one line 0.28 .. 0.29, `GPU KV cache size` with the device
  name from 0.30.
- CUDA graph memory profiling (0.18+): `Estimated CUDA graph memory: %.2f GiB total` and the
  `--gpu-memory-utilization` advice, worded per release (opt-in 0.18/0.19, default from 0.20).
- `Starting vLLM API server %d on %s` (<= 0.17.1) / `Starting vLLM server on %s`;
  `vLLM API server version %s` (<= 0.24.0) / `vLLM server version %s, serving model %s`.
- 0.34.0: no `Estimated CUDA graph memory` (the V1 model runner that printed it is gone) and the
  disabled-profiling warning without a utilisation. With the extensible KV cache
  (report.extensible_kv_cache) `Available KV cache memory` states kv_reserve_gib, with no graph
  estimate nor advice; after the graph capture come each worker's `Memory after warmup: ...`
  (and the `gpu_memory_utilization=%s caps this instance ...` warning before it), the core's KV
  capacity line, then each worker's `Remapping the KV cache ...` and `Extended KV cache to %d
  blocks (%.2f GiB).` (v1/worker/extensible_kv_cache.py, v1/core/kv_cache_planning.py
  finalize_extensible_kv_cache).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autotune.engines.vllm.logs import READY_TEXT, SIMULATED_MARKER, VLLMLaunchReport
from autotune.engines.vllm.printer import API, DEFAULT_TIMESTAMP, Printer, format_gib, gib_text
from autotune.engines.vllm.releases import EXTENSIBLE_KV_CACHE_SINCE, at_least, parse_version
from autotune.errors import ConfigError


@dataclass(frozen=True)
class _Launch:
    """One rendering of startup lines: the release, its printer, the figures and the launch."""

    p: Printer
    report: VLLMLaunchReport
    model: str
    host: str
    port: int
    tp_size: int
    elapsed_s: float

    @property
    def version(self) -> str:
        return self.p.version

    @property
    def core(self) -> str:
        return self.p.core_name()

    def workers(self) -> list[str]:
        return [self.p.worker_name(r, self.tp_size) for r in range(max(self.tp_size, 1))]


def _kv_lines(version: str, tokens: int, max_len: int, concurrency: float) -> list[str]:
    size = f"KV cache size: {tokens:,} tokens"
    conc = f"Maximum concurrency for {max_len:,} tokens per request: {concurrency:.2f}x"
    if not at_least(version, "0.28.0"):
        return [f"GPU {size}", conc]
    return [f"GPU {size}, {conc}"]


def _non_default_repr(values: Mapping[str, object]) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in values.items()) + "}"


def format_startup_lines(
    version: str,
    report: VLLMLaunchReport,
    *,
    model: str = "Qwen/Qwen3.8-27B",
    host: str = "127.0.0.1",
    port: int = 8000,
    tp_size: int = 1,
    total_gib: float | None = None,
    estimate_cudagraphs: bool | None = None,
    mamba_padding_pct: float | None = None,
    non_default: Mapping[str, object] | None = None,
    timestamp: str = DEFAULT_TIMESTAMP,
    pid: int = 4242,
    elapsed_s: float = 1.0,
) -> list[str]:
    """The startup lines vLLM `version` prints for the figures in `report`, prefixes included.

    Only figures that are set produce lines: weights_gib, kv_cache_gib, kv_pool_tokens with
    max_concurrency and context_len, graph_gib, graph_estimate_gib (0.18+),
    gpu_memory_utilization (the 0.18+ advice line needs total_gib), block_size (printed as the
    hybrid alignment line), num_gpu_blocks (<= 0.11.0), max_num_batched_tokens, engine
    settings in the config line. Per-rank worker lines repeat for each TP rank.
    With extensible_kv_cache (0.34.0+): kv_reserve_gib in `Available KV cache memory`, the
    `Memory after warmup` line from free_after_warmup_gib (with warmup_kv_gib, transient_peak_gib,
    torch_reserve_growth_gib, transient_reserve_gib or their maximum, requested_gib,
    torch_limit_gib, num_gpu_blocks and kv_cache_gib), the utilisation warning from
    kv_withheld_gib, `Remapping` from kv_remapped_from_blocks and `Extended KV cache to` from
    num_gpu_blocks and kv_cache_gib.
    `estimate_cudagraphs`: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (default: on from 0.20).

    Raises:
        ConfigError: a bad version, or figures the release's format cannot express.
    """
    p = Printer(parse_version(version), timestamp, pid)
    s = _Launch(p, report, model, host, port, tp_size, elapsed_s)
    if _extensible(s):
        # sized after warmup: the capacity line comes once the workers measured it
        sizing = [*_graph_capture_lines(s), *_after_warmup_lines(s), *_kv_capacity_lines(s)]
        sizing += _extend_lines(s)
    else:
        sizing = [*_kv_capacity_lines(s), *_graph_capture_lines(s)]
    return [
        *_api_header(s, non_default),
        *_api_settings(s, mamba_padding_pct),
        p.line(s.core, "core.py:98", _engine_config_msg(s)),
        *_worker_memory_lines(s, total_gib, estimate_cudagraphs),
        *sizing,
        *_serving_lines(s),
    ]


def _extensible(s: _Launch) -> bool:
    """Whether the launch has 0.34.0's extensible KV cache (report.extensible_kv_cache)."""
    if not s.report.extensible_kv_cache:
        return False
    if not at_least(s.version, EXTENSIBLE_KV_CACHE_SINCE):
        raise ConfigError(
            f"vLLM {s.version} has no extensible KV cache ({EXTENSIBLE_KV_CACHE_SINCE}+)",
            field="extensible_kv_cache",
        )
    if s.report.graph_estimate_gib:
        raise ConfigError(
            "the extensible KV cache measures CUDA graph memory after warmup: vLLM "
            f"{s.version} logs no graph estimate with it",
            field="graph_estimate_gib",
        )
    return True


def _needed(report: VLLMLaunchReport, line: str, *names: str) -> list[float]:
    """The report's figures a line prints (a ConfigError naming the first one unset)."""
    values = [getattr(report, name) for name in names]
    for name, value in zip(names, values, strict=True):
        if value is None:
            raise ConfigError(f"the {line} line needs {name}", field=name)
    return values


def _after_warmup_lines(s: _Launch) -> list[str]:
    """measure_kv_cache_blocks: the utilisation warning (warning_once) and the measurement, on
    each worker, when free_after_warmup_gib is set."""
    report = s.report
    out: list[str] = []
    if report.kv_withheld_gib is not None:
        util, requested = _needed(
            report, "gpu_memory_utilization warning", "gpu_memory_utilization", "requested_gib"
        )
        msg = (
            f"gpu_memory_utilization={util} caps this instance at {format_gib(requested)} GiB, "
            f"keeping {format_gib(report.kv_withheld_gib)} GiB of free device memory out of "
            "the KV cache. The extensible KV cache is sized from the memory measured after "
            "warmup and CUDA graph capture, so vLLM's own use needs no headroom below 1.0. "
            "Leave gpu_memory_utilization unset unless it leaves room for memory vLLM does not "
            "measure: other processes sharing the GPU (including ones that allocate on it "
            "later), the CPU on a unified-memory device, weight transfer buffers for weight "
            "updates, or a KV connector's own device buffers."
        )
        out += [
            s.p.line(w, "extensible_kv_cache.py:662", msg, level="WARNING") for w in s.workers()
        ]
    if report.free_after_warmup_gib is not None:
        free, committed, peak, growth, requested, limit, kv = _needed(
            report,
            "Memory after warmup",
            "free_after_warmup_gib",
            "warmup_kv_gib",
            "transient_peak_gib",
            "torch_reserve_growth_gib",
            "requested_gib",
            "torch_limit_gib",
            "kv_cache_gib",
        )
        (blocks,) = _needed(report, "Memory after warmup", "num_gpu_blocks")
        kept = report.transient_reserve_gib
        kept = max(peak, growth) if kept is None else kept
        msg = (
            f"Memory after warmup: {format_gib(free)} GiB free, {format_gib(committed)} GiB "
            f"committed to the KV cache, {format_gib(kept)} GiB kept for transient activations "
            f"({format_gib(peak)} GiB allocated at peak, {format_gib(growth)} GiB of torch "
            f"reservation growth); {int(blocks)} KV cache blocks ({format_gib(kv)} GiB) fit "
            f"within the requested {format_gib(requested)} GiB. Torch may reserve up to "
            f"{format_gib(limit)} GiB."
        )
        out += [s.p.line(w, "extensible_kv_cache.py:693", msg) for w in s.workers()]
    return out


def _extend_lines(s: _Launch) -> list[str]:
    """extend_kv_cache on each worker, when num_gpu_blocks and kv_cache_gib are set."""
    report = s.report
    if report.num_gpu_blocks is None or report.kv_cache_gib is None:
        return []
    msgs = []
    if report.kv_remapped_from_blocks is not None:
        msgs.append(
            f"Remapping the KV cache from {report.kv_remapped_from_blocks} to "
            f"{report.num_gpu_blocks} blocks to fit the measured budget."
        )
    msgs.append(
        f"Extended KV cache to {report.num_gpu_blocks} blocks ({report.kv_cache_gib:.2f} GiB)."
    )
    lines = [("extensible_kv_cache.py:525", m) for m in msgs[:-1]]
    lines.append(("extensible_kv_cache.py:536", msgs[-1]))
    return [s.p.line(w, src, m) for w in s.workers() for src, m in lines]


def _api_header(s: _Launch, non_default: Mapping[str, object] | None) -> list[str]:
    """The simulation marker, the version line and the non-default args."""
    p, version, report = s.p, s.version, s.report
    out: list[str] = []
    if report.simulated:
        out.append(p.line(API, "sim.py:1", SIMULATED_MARKER))
    if at_least(version, "0.25.0"):
        msg = f"vLLM server version {version}, serving model {s.model}"
        out.append(p.line(API, "utils.py:60", msg))
    else:
        out.append(p.line(API, "api_server.py:1755", f"vLLM API server version {version}"))
    args: dict[str, object] = {"model_tag": s.model, "host": s.host, "port": s.port}
    for key in ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization"):
        value = getattr(report, key)
        if value is not None:
            args[key] = value
    if s.tp_size > 1:
        args["tensor_parallel_size"] = s.tp_size
    args.update(non_default or {})
    out.append(p.line(API, "utils.py:263", f"non-default args: {_non_default_repr(args)}"))
    return out


def _api_settings(s: _Launch, mamba_padding_pct: float | None) -> list[str]:
    """The API server's config lines: max model len, chunked prefill, the hybrid block size."""
    p, report = s.p, s.report
    out: list[str] = []
    if report.context_len is not None:
        out.append(p.line(API, "model.py:1545", f"Using max model len {report.context_len}"))
    if report.max_num_batched_tokens is not None and report.enable_chunked_prefill is not False:
        msg = (
            "Chunked prefill is enabled with "
            f"max_num_batched_tokens={report.max_num_batched_tokens}."
        )
        out.append(p.line(API, "scheduler.py:230", msg))
    if report.block_size is not None:
        msg = (
            f"Setting attention block size to {report.block_size} tokens to ensure that "
            "attention page size is >= mamba page size."
        )
        out.append(p.line(API, "config.py:477", msg))
        if mamba_padding_pct is not None:
            msg = (
                f"Padding mamba page size by {mamba_padding_pct:.2f}% to ensure that mamba "
                "page size and attention page size are exactly equal."
            )
            out.append(p.line(API, "config.py:497", msg))
    return out


def _engine_config_msg(s: _Launch) -> str:
    version, report, model = s.version, s.report, s.model
    chunked_key = (
        "enable_chunked_prefill" if at_least(version, "0.11.1") else "chunked_prefill_enabled"
    )
    config = (
        f"model={model!r}, speculative_config=None, tokenizer={model!r}, "
        f"max_seq_len={report.context_len}, tensor_parallel_size={s.tp_size}, "
        f"quantization={report.quantization}, enforce_eager={bool(report.enforce_eager)}, "
        f"kv_cache_dtype={report.kv_dtype or 'auto'}, device_config=cuda, "
        f"served_model_name={model}, enable_prefix_caching={report.enable_prefix_caching}, "
        f"{chunked_key}={report.enable_chunked_prefill}"
    )
    return f"Initializing a V1 LLM engine (v{version}) with config: {config}"


def _worker_memory_lines(s: _Launch, total_gib: float | None, estimate: bool | None) -> list[str]:
    """Each worker's weights line, then each worker's memory profiling lines."""
    out: list[str] = []
    if s.report.weights_gib is not None:
        msg = _weights_msg(s.version, s.report, s.elapsed_s)
        out += [s.p.line(w, "gpu_model_runner.py:1892", msg) for w in s.workers()]
    extensible = bool(s.report.extensible_kv_cache)
    for w in s.workers():
        out += [
            s.p.line(w, "gpu_worker.py:359", m, level=level)
            for level, m in _memory_msgs(s.version, s.report, total_gib, estimate, extensible)
        ]
    return out


def _kv_capacity_lines(s: _Launch) -> list[str]:
    report = s.report
    if report.kv_pool_tokens is None:
        return []
    if report.max_concurrency is None or report.context_len is None:
        raise ConfigError(
            "the KV capacity line needs max_concurrency and context_len with kv_pool_tokens",
            field="max_concurrency",
        )
    return [
        s.p.line(s.core, "kv_cache_utils.py:1305", m)
        for m in _kv_lines(
            s.version, report.kv_pool_tokens, report.context_len, report.max_concurrency
        )
    ]


def _graph_capture_lines(s: _Launch) -> list[str]:
    report = s.report
    if report.graph_gib is None or report.enforce_eager:
        return []
    msg = (
        f"Graph capturing finished in {report.graph_capture_s or s.elapsed_s:.0f} secs, "
        f"took {report.graph_gib:.2f} GiB"
    )
    return [s.p.line(w, "gpu_model_runner.py:2485", msg) for w in s.workers()]


def _serving_lines(s: _Launch) -> list[str]:
    """From the engine's init time to the server's ready line (when the report is ready)."""
    p, version, report = s.p, s.version, s.report
    init_s = report.init_engine_s or s.elapsed_s
    unit = "s" if at_least(version, "0.20.0") else "seconds"
    msg = f"init engine (profile, create kv cache, warmup model) took {init_s:.2f} {unit}"
    out = [p.line(s.core, "core.py:274", msg)]
    if report.num_gpu_blocks is not None and not at_least(version, "0.11.1"):
        msg = (
            "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks "
            f"is: {report.num_gpu_blocks}"
        )
        out.append(p.line(API, "loggers.py:142", msg))
    out += [p.line(API, "api_server.py:1", w, level="WARNING") for w in report.warnings]
    url = f"http://{s.host}:{s.port}"
    if at_least(version, "0.18.0"):
        out.append(p.line(API, "api_server.py:602", f"Starting vLLM server on {url}"))
    else:
        out.append(p.line(API, "api_server.py:1818", f"Starting vLLM API server 0 on {url}"))
    if report.ready:
        head = f"(APIServer pid={p.pid}) " if at_least(version, "0.10.1") else ""
        out += [
            f"{head}INFO:     Started server process [{p.pid}]",
            f"{head}INFO:     Waiting for application startup.",
            f"{head}INFO:     {READY_TEXT}",
        ]
    return out


def _weights_msg(version: str, report: VLLMLaunchReport, elapsed: float) -> str:
    gib = report.weights_gib or 0.0
    seconds = report.weights_load_s or elapsed
    if not at_least(version, "0.11.1"):
        return f"Model loading took {gib:.4f} GiB and {seconds:.6f} seconds"
    if not at_least(version, "0.14.0"):
        return f"Model loading took {gib:.4f} GiB memory and {seconds:.6f} seconds"
    return f"Model loading took {format_gib(gib)} GiB memory and {seconds:.6f} seconds"


def _memory_msgs(
    version: str,
    report: VLLMLaunchReport,
    total_gib: float | None,
    estimate: bool | None,
    extensible: bool = False,
) -> list[tuple[str, str]]:
    """determine_available_memory's (level, message) pairs. With the extensible KV cache
    (0.34.0+) the graph estimate is 0, so only the reserved capacity is logged."""
    out: list[tuple[str, str]] = []
    graph_est = report.graph_estimate_gib
    if graph_est is not None:
        if not at_least(version, "0.18.0"):
            raise ConfigError(
                f"vLLM {version} does not profile CUDA graph memory (0.18.0+)",
                field="graph_estimate_gib",
            )
        if not at_least(version, EXTENSIBLE_KV_CACHE_SINCE):  # the V1 model runner's line
            out.append(("INFO", f"Estimated CUDA graph memory: {graph_est:.2f} GiB total"))
    kv = report.kv_reserve_gib if extensible else report.kv_cache_gib
    if kv is not None:
        out.append(("INFO", f"Available KV cache memory: {gib_text(version, kv)} GiB"))
    util = report.gpu_memory_utilization
    if at_least(version, EXTENSIBLE_KV_CACHE_SINCE) and estimate is False:
        # 0.34.0 skips the estimate when it is off, and warns only without the extensible cache
        if not extensible:
            out.append(("WARNING", _GRAPH_PROFILING_OFF_0_34))
    elif graph_est is not None and graph_est > 0 and util is not None and total_gib:
        on = at_least(version, "0.20.0") if estimate is None else estimate
        delta = graph_est / total_gib
        equiv, suggested = round(util - delta, 4), min(round(util + delta, 4), 1.0)
        out.append(("INFO", _graph_profiling_advice(version, on, util, equiv, suggested)))
    return out


# v1/worker/gpu_worker.py determine_available_memory, 0.34.0 (a logger.warning).
_GRAPH_PROFILING_OFF_0_34 = (
    "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). "
    "Without it, CUDA graph memory is not accounted for during KV cache allocation, which may "
    "require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it (the "
    "default as of v0.21.0)."
)


def _graph_profiling_advice(
    version: str, on: bool, util: float, equiv: float, suggested: float
) -> str:
    """The --gpu-memory-utilization advice of CUDA graph memory profiling (0.18+), worded per
    release: opt-in on 0.18/0.19, the default from 0.20."""
    if at_least(version, "0.20.0"):
        if on:
            return (
                "CUDA graph memory profiling is enabled (default since v0.21.0). The "
                f"current --gpu-memory-utilization={util:.4f} is equivalent to "
                f"--gpu-memory-utilization={equiv:.4f} without CUDA graph memory "
                "profiling. To maintain the same effective KV cache size as before, "
                f"increase --gpu-memory-utilization to {suggested:.4f}. To disable, set "
                "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."
            )
        return (
            "CUDA graph memory profiling is disabled "
            "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph "
            "memory is not accounted for during KV cache allocation, which may require "
            "lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it "
            "(the default as of v0.21.0) and increasing --gpu-memory-utilization from "
            f"{util:.4f} to {suggested:.4f}."
        )
    if on:
        return (
            "CUDA graph memory profiling is enabled "
            "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1). This will become the default in "
            f"v0.19. The current --gpu-memory-utilization={util:.4f} is equivalent to "
            f"--gpu-memory-utilization={equiv:.4f} without CUDA graph memory profiling. To "
            "maintain the same effective KV cache size as before, increase "
            f"--gpu-memory-utilization to {suggested:.4f}."
        )
    return (
        "In v0.19, CUDA graph memory profiling will be enabled by default "
        "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which more accurately accounts "
        "for CUDA graph memory during KV cache allocation. To try it now, set "
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase "
        f"--gpu-memory-utilization from {util:.4f} to {suggested:.4f} to maintain the "
        "same effective KV cache size."
    )
