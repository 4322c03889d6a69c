"""Read vLLM's own log lines (V1 engine, 0.10.0 .. 0.34.0): startup figures -> VLLMLaunchReport.

Line shape: `[(Proc pid=N) ]LEVEL MM-DD HH:MM:SS [file.py:line] message`; the `(Proc pid=N)`
prefix comes from decorate_logs (EngineCore_DP0, Worker_TP1, APIServer; 0.10.0 names workers
`VllmWorker rank=N`) and is part of the format itself from 0.31. ANSI colours are stripped.
Per-rank lines (a TP worker's `Model loading took`) are read from rank 0 only.

The f-strings, checked against the wheels (vllm/v1/...):
- worker/gpu_model_runner.py: `Model loading took %.4f GiB and %.6f seconds` (<= 0.11.0),
  `... %.4f GiB memory and ...` (0.11.1 .. 0.13.0), `... %s GiB memory and ...` (0.14.0+,
  format_gib = round(b / 2**30, 2)); `Graph capturing finished in %.0f secs, took %.2f GiB`;
  `Estimated CUDA graph memory: %.2f GiB total` (0.18+, profile_cudagraph_memory).
- worker/gpu_worker.py: `Available KV cache memory: %.2f GiB` (`%s GiB` from 0.14.0), and
  from 0.18 the `--gpu-memory-utilization=%.4f` / `from %.4f to %.4f` advice lines (the
  utilisation the launch used).
- core/kv_cache_utils.py: `GPU KV cache size: %s tokens` and `Maximum concurrency for %s tokens
  per request: %.2fx` on two lines (<= 0.27.1), on one line (0.28, 0.29), with the device first
  (`GPU KV cache size` / `XPU ...`, `GPU + host ...`) from 0.30. The token figure is
  num_blocks // groups * block_size up to 0.19.1 and int(max_concurrency * max_model_len) from
  0.20.0 (both "tokens of context the pool holds").
- engine/core.py: `Initializing a V1 LLM engine (v%s) with config: ...kv_cache_dtype=...`;
  `init engine (profile, create kv cache, warmup model) took %.2f seconds` (`s` from 0.20).
- Ready: uvicorn's `Application startup complete.` (after `Starting vLLM API server ...`).

0.34.0's extensible KV cache (the default on CUDA and ROCm; v1/worker/extensible_kv_cache.py)
sizes the pool after warmup and CUDA graph capture, so `Available KV cache memory` is only the
reserved capacity (profile_cudagraph_memory returns 0 then: no graph estimate, no advice line)
and three lines follow the graph capture: each worker's `Memory after warmup: %s GiB free, %s
GiB committed to the KV cache, %s GiB kept for transient activations (%s GiB allocated at peak,
%s GiB of torch reservation growth); %d KV cache blocks (%s GiB) fit within the requested %s GiB.
Torch may reserve up to %s GiB.` (measure_kv_cache_blocks, format_gib), the engine core's KV
capacity line with the final count (finalize_extensible_kv_cache; it is no longer printed before
warmup), then each worker's `Remapping the KV cache from %d to %d blocks to fit the measured
budget.` (when warmup committed more) and `Extended KV cache to %d blocks (%.2f GiB).`
(extend_kv_cache). The report's kv_cache_gib and num_gpu_blocks are then the extended size (the
`Memory after warmup` blocks for a log that stops before it); kv_reserve_gib keeps the capacity.
An explicit 0.7 < gpu_memory_utilization < 1.0 that keeps >= 1 GiB of free memory out of the
cache warns `gpu_memory_utilization=%s caps this instance at %s GiB, keeping %s GiB of free
device memory out of the KV cache. ...`; `Disabling the extensible KV cache: %s. ...`
(v1/executor/abstract.py) and `Extensible KV cache off: ...` (config/vllm.py) say it is off.
Also from 0.34.0: the V1 model runner (gpu_model_runner.py) is gone, and with it `Estimated
CUDA graph memory`; the disabled-profiling warning no longer names a utilisation.

Older releases, as public logs show them (checked against the 0.5.0 .. 0.9.2 wheels):
`Loading model weights took %.4f GB` (<= 0.7.3) and `Model loading took %.4f GB and ...`
(0.8.0 .. 0.8.2), both GiB; the V0 executor's `# GPU blocks: %d, # CPU blocks: %d` (<= 0.6.6)
and `# CUDA blocks: ...` (0.7+); the profiling summary `Memory profiling results:
total_gpu_memory=%.2fGiB ... kv_cache_size=%.2fGiB gpu_memory_utilization=%.2f` (0.6.4) and
`the current vLLM instance can use total_gpu_memory (%.2fGiB) x gpu_memory_utilization (%.2f)
... the rest of the memory reserved for KV Cache is %.2fGiB.` (0.6.5 .. 0.9.2).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from pydantic import Field

from autotune.engines._logs import Figures, Reader, StartupFormat, keep_first, strip_outer
from autotune.engines.base import LaunchReport

READY_TEXT = "Application startup complete."
# Printed first by the simulated engine (autotune sim) so reports never mistake it for a GPU run.
SIMULATED_MARKER = "autotune simulated vLLM engine: figures come from a model, not a GPU."

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_PROC_RE = re.compile(r"\((?P<proc>[^()]+?) pid=(?P<pid>\d+)\) ")
_LEVEL_RE = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})"
    r"(?:\.\d+)? \[(?P<src>[^\]]*)\] "
)
_RANK_RE = re.compile(r"(?:rank=|Worker-|[ _](?:TP|PP|DP|PCP|DCP|EP))(\d+)")

_NUM = r"-?\d+(?:\.\d+)?"
_WEIGHTS_RE = re.compile(
    rf"Model loading took (?P<gib>{_NUM}) GiB(?: memory)? and (?P<s>{_NUM}) seconds"
)
_OLD_WEIGHTS_RE = re.compile(
    rf"(?:Loading model weights|Model loading) took (?P<gib>{_NUM}) GB"
    rf"|model weights take (?P<take>{_NUM}) ?GiB"
)
_PROFILE_KV_RE = re.compile(
    rf"kv_cache_size=(?P<a>{_NUM}) ?GiB|the rest of the memory reserved for KV Cache is (?P<b>{_NUM}) ?GiB"
)
_PROFILE_TOTAL_RE = re.compile(
    rf"total_gpu_memory ?[=(](?P<gib>{_NUM}) ?GiB\)?.*?gpu_memory_utilization ?[=(](?P<u>{_NUM})"
)
_AVAIL_RE = re.compile(rf"Available KV cache memory: (?P<gib>{_NUM}) GiB")
# 0.34.0's extensible KV cache (v1/worker/extensible_kv_cache.py).
_AFTER_WARMUP_RE = re.compile(
    rf"Memory after warmup: (?P<free>{_NUM}) GiB free, (?P<committed>{_NUM}) GiB committed to "
    rf"the KV cache, (?P<reserve>{_NUM}) GiB kept for transient activations \((?P<peak>{_NUM}) "
    rf"GiB allocated at peak, (?P<growth>{_NUM}) GiB of torch reservation growth\); "
    rf"(?P<blocks>\d+) KV cache blocks \((?P<fit>{_NUM}) GiB\) fit within the requested "
    rf"(?P<requested>{_NUM}) GiB\. Torch may reserve up to (?P<limit>{_NUM}) GiB"
)
_EXTENDED_RE = re.compile(rf"Extended KV cache to (?P<n>\d+) blocks \((?P<gib>{_NUM}) GiB\)")
_REMAP_RE = re.compile(r"Remapping the KV cache from (?P<a>\d+) to (?P<b>\d+) blocks")
_CAP_RE = re.compile(
    rf"gpu_memory_utilization=(?P<u>\d+(?:\.\d+)?) caps this instance at (?P<requested>{_NUM}) "
    rf"GiB, keeping (?P<withheld>{_NUM}) GiB of free device memory out of the KV cache"
)
_EXTENSIBLE_OFF_RE = re.compile(r"Disabling the extensible KV cache: |Extensible KV cache off: ")
_KV_TOKENS_RE = re.compile(
    r"(?:(?P<device>[A-Z]+)(?P<host> \+ host)? )?KV cache size: (?P<tokens>[\d,]+) tokens"
)
_CONCURRENCY_RE = re.compile(
    rf"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>{_NUM})x"
)
_GRAPH_RE = re.compile(rf"Graph capturing finished in (?P<s>\d+) secs, took (?P<gib>{_NUM}) GiB")
_GRAPH_EST_RE = re.compile(rf"Estimated CUDA graph memory: (?P<gib>{_NUM}) GiB total")
_GMU_RE = re.compile(r"--gpu-memory-utilization(?:=| from )(?P<u>\d+(?:\.\d+)?)")
# The leading "# " is optional: a pasted line sometimes loses it (markdown).
_V0_BLOCKS_RE = re.compile(r"(?:# )?(?:GPU|cuda|CUDA) blocks: (?P<n>\d+), # CPU blocks: \d+")
_ENGINE_BLOCKS_RE = re.compile(
    r"cache_config_info with initialization after num_gpu_blocks is: (?P<n>\d+)"
)
_BLOCK_SIZE_RE = re.compile(r"Setting (?:attention|kv cache) block size to (?P<n>\d+)(?: tokens)?")
_CHUNKED_RE = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(?P<n>\d+)")
_ENGINE_RE = re.compile(r"Initializing a V1 LLM engine \(v(?P<v>[^)]+)\) with config: (?P<c>.*)$")
_SERVER_VERSION_RE = re.compile(r"vLLM (?:API )?server version (?P<v>[^\s,]+)")
_INIT_RE = re.compile(
    rf"init engine \(profile, create kv cache, warmup model\) took (?P<s>{_NUM}) s"
)
_NON_DEFAULT_RE = re.compile(r"non-default args: (?P<d>\{.*\})\s*$")
_MAX_LEN_RE = re.compile(r"Using max model len (?P<n>\d+)")
# key=value pairs of the engine config line that the report keeps.
_CONFIG_KEYS = {
    "max_seq_len": "context_len",
    "tensor_parallel_size": "tensor_parallel_size",
    "kv_cache_dtype": "kv_dtype",
    "enforce_eager": "enforce_eager",
    "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "chunked_prefill_enabled": "enable_chunked_prefill",  # up to 0.11.0
    "quantization": "quantization",
}
# Startup lines worth keeping with the trial (they explain a surprising capacity).
_WARNING_MARKERS = (
    "Setting attention block size to",
    "Padding mamba page size by",
    "Mamba cache mode is set to",
    "Prefix caching in Mamba cache",
    "CUDA graph memory profiling is",
    "In v0.19, CUDA graph memory profiling",
    "does not officially support",
    "padding layers, may waste",
    "is less than desired GPU memory utilization",
    "Disabling calculate_kv_scales",
    "caps this instance at",  # 0.34.0: gpu_memory_utilization below what the device has free
    "Disabling the extensible KV cache",
    "Extensible KV cache off",
)


class VLLMLaunchReport(LaunchReport):
    """LaunchReport plus what only vLLM logs: concurrency at max_model_len, the KV budget and
    the memory utilisation behind it, CUDA-graph estimate, block size and engine settings, and
    0.34.0's post-warmup sizing of the extensible KV cache."""

    max_concurrency: float | None = Field(
        default=None, description="requests of max_model_len tokens the KV cache holds"
    )
    kv_cache_gib: float | None = Field(
        default=None,
        description="the KV cache's memory: `Available KV cache memory` (V0: the profiling "
        "summary's), with 0.34.0's extensible KV cache the size committed after warmup",
    )
    kv_reserve_gib: float | None = Field(
        default=None,
        description="`Available KV cache memory` as logged (the extensible KV cache's reserved "
        "capacity, sized by the profiling run)",
    )
    extensible_kv_cache: bool | None = Field(
        default=None,
        description="KV cache sized after warmup (0.34.0+): True when the post-warmup sizing is "
        "logged, False when vLLM says it is off or the arguments turn it off",
    )
    free_after_warmup_gib: float | None = Field(
        default=None, description="device memory free after warmup and graph capture (0.34.0+)"
    )
    warmup_kv_gib: float | None = Field(
        default=None, description="KV memory committed when that was measured (0.34.0+)"
    )
    transient_reserve_gib: float | None = Field(
        default=None,
        description="memory kept free for transient activations, the larger of the two below "
        "(0.34.0+)",
    )
    transient_peak_gib: float | None = Field(
        default=None, description="activation peak allocated in profiling or warmup (0.34.0+)"
    )
    torch_reserve_growth_gib: float | None = Field(
        default=None, description="largest growth of torch's reservation over a step (0.34.0+)"
    )
    requested_gib: float | None = Field(
        default=None,
        description="the instance's budget, gpu_memory_utilization x device memory (0.34.0+)",
    )
    torch_limit_gib: float | None = Field(
        default=None, description="cap on torch's caching allocator once sized (0.34.0+)"
    )
    kv_withheld_gib: float | None = Field(
        default=None,
        description="free memory an explicit gpu_memory_utilization keeps out of the KV cache "
        "(0.34.0 warns from 1 GiB)",
    )
    kv_remapped_from_blocks: int | None = Field(
        default=None, description="blocks warmup had committed beyond the measured size (0.34.0+)"
    )
    gpu_memory_utilization: float | None = None
    graph_estimate_gib: float | None = Field(
        default=None, description="CUDA graph memory profiled before the KV cache (0.18+)"
    )
    total_gpu_gib: float | None = Field(
        default=None, description="device total the profiling summary states (<= 0.9.2)"
    )
    num_gpu_blocks: int | None = Field(
        default=None,
        description="KV cache blocks (V0's `# GPU blocks`, <= 0.11.0's cache_config_info, "
        "0.34.0's extended size)",
    )
    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    tensor_parallel_size: int | None = None
    quantization: str | None = None
    enforce_eager: bool | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    weights_load_s: float | None = None
    graph_capture_s: float | None = None
    init_engine_s: float | None = None


def clean(line: str) -> str:
    return _ANSI_RE.sub("", line.rstrip("\r\n"))


def split_prefix(line: str) -> tuple[str | None, str]:
    """`(Worker_TP1 pid=7) INFO 03-01 12:00:00 [gpu_worker.py:1] msg` -> ("Worker_TP1", "msg");
    a line without a vLLM prefix -> (None, line)."""
    text = clean(line)
    proc: str | None = None
    pos = 0
    while m := _PROC_RE.match(text, pos):
        proc, pos = m["proc"], m.end()
    if m := _LEVEL_RE.match(text, pos):
        pos = m.end()
    return proc, text[pos:]


def strip_prefix(line: str) -> str:
    return split_prefix(line)[1]


def rank_of(proc: str | None) -> int:
    """The highest parallel rank a process name carries (0 for the API server, EngineCore_DP0,
    a single-GPU worker)."""
    if not proc:
        return 0
    return max((int(n) for n in _RANK_RE.findall(proc)), default=0)


def is_ready_line(line: str) -> bool:
    return READY_TEXT in line


def _bool(text: str) -> bool | None:
    return {"True": True, "False": False}.get(text)


def _config_pairs(text: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, target in _CONFIG_KEYS.items():
        m = re.search(rf"(?:^|, ){key}=([^,]+?)(?:,|$)", text)
        if m is None:
            continue
        raw = m.group(1).strip().strip("'")
        if target in ("context_len", "tensor_parallel_size"):
            if raw.isdigit():
                out[target] = int(raw)
        elif target in ("enforce_eager", "enable_prefix_caching", "enable_chunked_prefill"):
            out.setdefault(target, _bool(raw))
        elif raw != "None":
            out[target] = raw
    return out


def logged_args(log_text: str) -> dict[str, object] | None:
    """The last `non-default args: {...}` mapping the log holds (vLLM's field names), or None."""
    for line in reversed(log_text.splitlines()):
        m = _NON_DEFAULT_RE.search(line)
        if m:
            return _non_default(m["d"])
    return None


def _non_default(text: str) -> dict[str, object]:
    """The dict vLLM logs as `non-default args: {...}` (literal_eval; a regex for the numeric
    keys when some value has no literal repr)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = {
            k: float(v) if "." in v else int(v)
            for k, v in re.findall(r"'(\w+)': (-?\d+(?:\.\d+)?)\b", text)
        }
    return value if isinstance(value, dict) else {}


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _rank0_messages(log_text: str) -> Iterator[str]:
    for raw in log_text.splitlines():
        proc, msg = split_prefix(strip_outer(clean(raw)))
        if rank_of(proc) == 0:
            yield msg


def _concurrency(values: Figures, m: re.Match[str]) -> None:
    values.setdefault("max_concurrency", float(m["x"]))
    values["context_len"] = _num(m["len"])


def _old_weights(values: Figures, m: re.Match[str]) -> None:
    values.setdefault("weights_gib", float(m["gib"] if m["gib"] is not None else m["take"]))


def _profile_kv(values: Figures, m: re.Match[str]) -> None:
    values.setdefault("kv_cache_gib", float(m["a"] if m["a"] is not None else m["b"]))


def _profile_total(values: Figures, m: re.Match[str]) -> None:
    values.setdefault("total_gpu_gib", float(m["gib"]))
    values.setdefault("gpu_memory_utilization", float(m["u"]))


def _block_size(values: Figures, m: re.Match[str]) -> None:
    values["block_size"] = int(m["n"])  # the last adjustment wins


def _after_warmup(values: Figures, m: re.Match[str]) -> None:
    """0.34.0's `Memory after warmup` (rank 0's own measurement, before the ranks agree)."""
    values["extensible_kv_cache"] = True
    figures = {
        "free_after_warmup_gib": "free",
        "warmup_kv_gib": "committed",
        "transient_reserve_gib": "reserve",
        "transient_peak_gib": "peak",
        "torch_reserve_growth_gib": "growth",
        "requested_gib": "requested",
        "torch_limit_gib": "limit",
        "kv_fit_gib": "fit",
    }
    for key, group in figures.items():
        values.setdefault(key, float(m[group]))
    values.setdefault("kv_fit_blocks", int(m["blocks"]))


def _extended(values: Figures, m: re.Match[str]) -> None:
    values["extensible_kv_cache"] = True
    values.setdefault("kv_extended_blocks", int(m["n"]))
    values.setdefault("kv_extended_gib", float(m["gib"]))


def _extensible_off(values: Figures, m: re.Match[str]) -> None:
    values["extensible_kv_cache"] = False


def _settle_kv_size(values: Figures) -> None:
    """With 0.34.0's extensible KV cache the cache is what was committed after warmup, not the
    `Available KV cache memory` capacity: the `Extended KV cache to` figures, else (a log that
    stops before them) rank 0's `Memory after warmup` ones."""
    extended = values.pop("kv_extended_gib", None), values.pop("kv_extended_blocks", None)
    fit = values.pop("kv_fit_gib", None), values.pop("kv_fit_blocks", None)
    gib, blocks = extended if extended[0] is not None else fit
    if gib is not None:
        values["kv_cache_gib"] = gib
        values["num_gpu_blocks"] = blocks


def _engine_config(values: Figures, m: re.Match[str]) -> None:
    values.setdefault("engine_version", m["v"])
    for key, value in _config_pairs(m["c"]).items():
        values.setdefault(key, value)


_NON_DEFAULT_KEYS = (
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "tensor_parallel_size",
)


def _non_default_args(values: Figures, m: re.Match[str]) -> None:
    args = _non_default(m["d"])
    for key in _NON_DEFAULT_KEYS:
        if isinstance(args.get(key), int | float) and not isinstance(args[key], bool):
            values.setdefault(key, args[key])
    if isinstance(args.get("enable_extensible_kv_cache"), bool):  # 0.34.0+
        values.setdefault("extensible_kv_cache", args["enable_extensible_kv_cache"])


# In order; every one reads every line (a line may carry several figures).
_READERS: tuple[Reader, ...] = (
    ((_WEIGHTS_RE,), keep_first(weights_gib=("gib", float), weights_load_s=("s", float))),
    ((_OLD_WEIGHTS_RE,), _old_weights),
    ((_AVAIL_RE,), keep_first(kv_cache_gib=("gib", float), kv_reserve_gib=("gib", float))),
    ((_AFTER_WARMUP_RE,), _after_warmup),
    ((_EXTENDED_RE,), _extended),
    ((_REMAP_RE,), keep_first(kv_remapped_from_blocks=("a", int))),
    (
        (_CAP_RE,),
        keep_first(
            gpu_memory_utilization=("u", float),
            requested_gib=("requested", float),
            kv_withheld_gib=("withheld", float),
        ),
    ),
    ((_EXTENSIBLE_OFF_RE,), _extensible_off),
    ((_PROFILE_KV_RE,), _profile_kv),
    ((_PROFILE_TOTAL_RE,), _profile_total),
    ((_KV_TOKENS_RE,), keep_first(kv_pool_tokens=("tokens", _num))),
    ((_CONCURRENCY_RE,), _concurrency),
    ((_GRAPH_RE,), keep_first(graph_gib=("gib", float), graph_capture_s=("s", float))),
    ((_GRAPH_EST_RE,), keep_first(graph_estimate_gib=("gib", float))),
    ((_GMU_RE,), keep_first(gpu_memory_utilization=("u", float))),
    ((_V0_BLOCKS_RE, _ENGINE_BLOCKS_RE), keep_first(num_gpu_blocks=("n", int))),
    ((_BLOCK_SIZE_RE,), _block_size),
    ((_CHUNKED_RE,), keep_first(max_num_batched_tokens=("n", int))),
    ((_MAX_LEN_RE,), keep_first(context_len=("n", int))),
    ((_INIT_RE,), keep_first(init_engine_s=("s", float))),
    ((_ENGINE_RE,), _engine_config),
    # After the engine line, which sets the version first when a line had both.
    ((_SERVER_VERSION_RE,), keep_first(engine_version=("v", str))),
    ((_NON_DEFAULT_RE,), _non_default_args),
)
_FORMAT = StartupFormat(READY_TEXT, SIMULATED_MARKER, _READERS, _WARNING_MARKERS, exclusive=False)


def parse_startup(log_text: str) -> VLLMLaunchReport:
    """What a launch got, from its startup log (unknown lines ignored, rank 0 figures only).

    weights_gib and graph_gib come from rank 0's worker; kv_pool_tokens and max_concurrency
    from the engine core's report (the whole TP group); max_running_requests is max_num_seqs
    and chunked_prefill_size max_num_batched_tokens when the log names them. With 0.34.0's
    extensible KV cache kv_cache_gib and num_gpu_blocks are the size committed after warmup
    (kv_reserve_gib the `Available KV cache memory` capacity before it).
    """
    scan = _FORMAT.scan(_rank0_messages(log_text))
    values = scan.values
    _settle_kv_size(values)
    if "max_num_seqs" in values:
        values["max_running_requests"] = values["max_num_seqs"]
    if "max_num_batched_tokens" in values:
        values["chunked_prefill_size"] = values["max_num_batched_tokens"]
    return VLLMLaunchReport.model_validate(
        {**values, "ready": scan.ready, "simulated": scan.simulated, "warnings": scan.warnings}
    )
