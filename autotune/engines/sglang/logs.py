"""Read SGLang's own log lines: startup figures (LaunchReport) and runtime batch lines.

Handles both log generations (0.5.9 and 0.5.2x; reference/sglang-internals.md §3), whose
f-strings were checked against every wheel 0.5.9 .. 0.5.23:
- `Load weight end. ... dtype=... (0.5.9) / quant=... (0.5.10+) ..., mem usage=X GB.`
- `KV Cache is allocated. [dtype: D, ]#tokens: N, K size: K GB, V size: V GB` (dtype from
  0.5.13; MLA prints `KV size:`; 0.5.18+ may say `VA upper bound` instead of `is allocated`),
  or `KV Cache skipped (no-op pool). Logical #tokens: N, ...` (0.5.15+, an embedding model
  served without a pool: N is still the pool the scheduler admits against);
- `Capture cuda graph end. Time elapsed: ... mem usage=X GB.` (<= 0.5.13) and
  `Capture target decode CUDA graph end. [bs=[..], ]elapsed=..., mem usage=X GB, ...` (0.5.14+).
Older releases, as public logs show them (checked against the 0.3.0 .. 0.5.8 wheels):
- `Load weight end. type=..., dtype=..., avail mem=X GB` without `mem usage` (<= 0.4.3.post2):
  the weights are `Load weight begin`'s free memory minus this line's;
- `KV Cache is allocated. K size: K GB, V size: V GB.` without `#tokens` (0.4.1.post6 ..
  0.4.3.post2), and no KV line at all before that (the summary line gives the pool);
- the summary line without `chunked_prefill_size=` (< 0.4.2) and `available_gpu_mem=` (< 0.4.7);
- `Mamba Cache is allocated. conv_state size: ...` without `max_mamba_cache_size` (0.5.2).
The first releases (0.1.17 .. 0.2.13, checked against their wheels) log through a bare
`%(message)s` format: no time, and the rank as a message prefix, `[gpu_id=N] ` (<= 0.2.6) or
`[gpu=N] ` (0.2.7 .. 0.2.13); read as rank GPU N. Their summary line has no
`max_running_requests=` before 0.1.24 (0.1.17 ends it in `context_len=N, `), and the pool is
only stated there (no KV line); `Load weight end` has no `mem usage` (weights = begin - end).
Two SWA pools (0.5.7 .. 0.5.23): `Use sliding window memory pool. full_layer_tokens=N,
swa_layer_tokens=M` comes before both pools' `KV Cache is allocated` lines (window pool first);
the launch's KV tokens are the full pool's N (max_total_num_tokens). After both pools'
lines, `SWAKVPool mem usage: X GB, swa size: M, full size: N` (mem_cache SWAKVPool, the same
f-string 0.5.7 .. 0.5.23) states N again, for logs without the first line.
All "GB" on device-side lines are GiB (free bytes / 2**30); host pools use decimal GB.
Per-rank lines are read from rank 0 only (each TP rank repeats them with its own prefix).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from autotune.engines._logs import (
    Figures,
    Reader,
    StartupFormat,
    add_to,
    add_up,
    keep_first,
    strip_outer,
)
from autotune.engines.base import LaunchReport

READY_TEXT = "The server is fired up and ready to roll!"
# Printed first by the simulated engine (autotune sim) so reports never mistake it for a GPU run.
SIMULATED_MARKER = "autotune simulated SGLang engine: figures come from a model, not a GPU."

# `[%(asctime)s{.msecs}{ DPn PPn ATTN_CPn MOE_DPn TPn EPn}] message` (configure_logger); the
# 0.3 releases print the time only (`[22:30:32 TP0] ...`).
PREFIX_RE = re.compile(
    r"^\[(?P<ts>(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?)(?P<ranks>(?: [A-Z_]+\d+)*)\] "
)
_RANK_RE = re.compile(r" ([A-Z_]+?)(\d+)")
# 0.1.17 .. 0.2.13: `[gpu_id={gpu_id}] ` / `[gpu={gpu_id}] ` opening the message itself
# (managers/controller/model_runner.py, tp_worker.py), the logger adding nothing.
_GPU_PREFIX_RE = re.compile(r"^\[gpu(?:_id)?=(?P<gpu>\d+)\] ")

_WEIGHTS_RE = re.compile(
    r"Load weight end\. .*?(?:avail mem=(?P<avail>\d+(?:\.\d+)?) GB, )?"
    r"mem usage=(?P<gib>\d+(?:\.\d+)?) GB"
)
_WEIGHTS_OLD_RE = re.compile(
    r"Load weight end\. (?!.*mem usage).*avail mem=(?P<gib>\d+(?:\.\d+)?) GB"
)
_BEGIN_RE = re.compile(r"Load weight begin\. avail mem=(?P<gib>\d+(?:\.\d+)?) GB")
_KV_RE = re.compile(
    r"^(?:(?P<label>.+?) )?KV Cache (?:is allocated|VA upper bound)\. "
    r"(?:dtype: (?P<dtype>\S+), )?(?:#tokens: (?P<tokens>\d+), )?"
    r"(?:K size: (?P<k>\d+(?:\.\d+)?) GB, V size: (?P<v>\d+(?:\.\d+)?) GB"
    r"|KV size: (?P<kv>\d+(?:\.\d+)?) GB)"
)
# An embedding launch that attends over raw K/V (prefill_only_disable_kv_cache, 0.5.15 on:
# NoOpMHATokenToKVPool) allocates no pool; the line still states the profiled pool's size,
# which the scheduler admits against.
_NOOP_KV_RE = re.compile(r"^KV Cache skipped \(no-op pool\)\. Logical #tokens: (?P<tokens>\d+), ")
_SWA_POOLS_RE = re.compile(
    r"^Use sliding window memory pool\. full_layer_tokens=(?P<full>\d+), swa_layer_tokens=\d+"
)
_SWA_KV_POOL_RE = re.compile(r"^SWAKVPool mem usage: .*?, full size: (?P<full>\d+)")
_MAMBA_RE = re.compile(
    r"Mamba Cache is allocated\. (?:max_mamba_cache_size: (?P<n>\d+), )?"
    r"conv_state size: (?P<conv>\d+(?:\.\d+)?)GB, ssm_state size: (?P<ssm>\d+(?:\.\d+)?)GB"
    r"(?: intermediate_ssm_state_cache size: (?P<ispec>\d+(?:\.\d+)?)GB"
    r" intermediate_conv_window_cache size: (?P<iconv>\d+(?:\.\d+)?)GB)?"
)
_GRAPH_RE = re.compile(
    r"^Capture (?:.+ )?(?:cuda|CUDA) graph end\. .*?mem usage=(?P<gib>\d+(?:\.\d+)?) GB"
)
_SUMMARY_RE = re.compile(
    r"max_total_num_tokens=(?P<tokens>\d+), (?:chunked_prefill_size=(?P<cps>-?\d+|None), )?"
    r"max_prefill_tokens=(?P<mpt>\d+), (?:max_running_requests=(?P<mrr>\d+), )?"
    r"context_len=(?P<ctx>\d+)(?:, available_(?:gpu|cpu)_mem=(?P<avail>-?\d+(?:\.\d+)?) GB)?"
)
# bench_one_batch / bench_latency print the pool alone.
_BENCH_TOKENS_RE = re.compile(r"^max_total_num_tokens=(?P<tokens>\d+)\s*$")
_HOST_KV_OLD_RE = re.compile(
    r"^Allocating (?P<gb>\d+(?:\.\d+)?) GB host memory for hierarchical KV cache\."
)
_HOST_KV_RE = re.compile(
    r"^Allocating (?P<label>\S+) hierarchical KV host pool: (?P<tokens>\d+) tokens, "
    r"(?P<gb>\d+(?:\.\d+)?) GB host memory"
)
_HOST_MAMBA_RE = re.compile(
    r"^Allocating (?P<gb>\d+(?:\.\d+)?) GB host memory for hierarchical Mamba cache"
)
# Startup warnings worth keeping with the trial (they explain a surprising capacity).
_WARNING_MARKERS = (
    "Max running requests is reset to 48",
    "max_running_requests is capped to",
    "max_running_requests was reduced from",
    "is larger than the profiled value",
    "Disabling overlap schedule",
    "Disabling radix cache",
    "HiCache auto-sizing",
    "is smaller than the device pool",
    "The memory capacity is unbalanced",
)


def split_prefix(line: str) -> tuple[dict[str, int], str]:
    """`[2026-03-01 12:00:00 TP1] msg` -> ({"TP": 1}, "msg"), `[gpu_id=1] msg` -> ({"GPU": 1},
    "msg"); no prefix -> ({}, line)."""
    match = PREFIX_RE.match(line)
    ranks: dict[str, int] = {}
    if match is not None:
        ranks = {name: int(num) for name, num in _RANK_RE.findall(match.group("ranks"))}
        line = line[match.end() :]
    gpu = _GPU_PREFIX_RE.match(line)
    if gpu is not None:
        ranks["GPU"] = int(gpu["gpu"])
        line = line[gpu.end() :]
    return ranks, line


def strip_prefix(line: str) -> str:
    return split_prefix(line)[1]


def is_ready_line(line: str) -> bool:
    return READY_TEXT in line


def _rank0_messages(log_text: str) -> Iterator[str]:
    for raw in log_text.splitlines():
        ranks, msg = split_prefix(strip_outer(raw.rstrip("\r")))
        if not any(ranks.values()):  # else another rank's copy of a per-rank line
            yield msg


def _kv_pool(values: Figures, m: re.Match[str]) -> None:
    if m["label"] is None and "kv_k_gib" not in values:
        if m["tokens"] is not None:  # an SWA pools line gave the full pool's already
            values.setdefault("kv_pool_tokens", int(m["tokens"]))
        values["kv_dtype"] = m["dtype"]
        values["kv_k_gib"] = float(m["k"] if m["k"] is not None else m["kv"])
        values["kv_v_gib"] = float(m["v"]) if m["v"] is not None else None


def _swa_kv_pool(values: Figures, m: re.Match[str]) -> None:
    """The full pool's tokens, which replace the window pool's its KV line gave first."""
    values.setdefault("_swa_full_tokens", int(m["full"]))


def _mamba_pool(values: Figures, m: re.Match[str]) -> None:
    if "mamba_conv_gib" not in values:
        if m["n"] is not None:
            values["mamba_slots"] = int(m["n"])
        values["mamba_conv_gib"] = float(m["conv"])
        values["mamba_ssm_gib"] = float(m["ssm"])
        if m["ispec"] is not None:
            values["mamba_spec_gib"] = float(m["ispec"]) + float(m["iconv"])


def _summary(values: Figures, m: re.Match[str]) -> None:
    values["max_total_num_tokens"] = int(m["tokens"])
    values["chunked_prefill_size"] = None if m["cps"] in (None, "None") else int(m["cps"])
    values["max_prefill_tokens"] = int(m["mpt"])
    values["max_running_requests"] = None if m["mrr"] is None else int(m["mrr"])
    values["context_len"] = int(m["ctx"])
    values["available_gpu_mem_gib"] = None if m["avail"] is None else float(m["avail"])


def _weights_end(values: Figures, m: re.Match[str]) -> None:
    """Weights summed over target and draft; the free memory after the first (the target's)."""
    add_to(values, "weights_gib", float(m["gib"]))
    values.setdefault("_first_weights", float(m["gib"]))
    if m["avail"] is not None:
        _free_after(values, float(m["avail"]))


def _weights_end_old(values: Figures, m: re.Match[str]) -> None:
    """Before `mem usage` was logged: the free memory after weights, for parse_startup."""
    _free_after(values, float(m["gib"]))


def _free_after(values: Figures, gib: float) -> None:
    """The first reading after weights (the target's), and the last one ahead of the KV pool
    (a draft that loads first reads after it)."""
    values.setdefault("_free_after_weights", gib)
    if "kv_k_gib" not in values and "kv_pool_tokens" not in values:
        values["_free_before_pool"] = gib


def _host_kv_pool(values: Figures, m: re.Match[str]) -> None:
    values.setdefault("host_pool_tokens", int(m["tokens"]))
    add_to(values, "host_pool_gb", float(m["gb"]))


# In order; a line is read by the first that matches.
_READERS: tuple[Reader, ...] = (
    ((_WEIGHTS_RE,), _weights_end),
    ((_WEIGHTS_OLD_RE,), _weights_end_old),
    ((_BEGIN_RE,), keep_first(free_before_weights_gib=("gib", float))),
    ((_SWA_POOLS_RE,), keep_first(kv_pool_tokens=("full", int))),
    ((_KV_RE,), _kv_pool),
    ((_NOOP_KV_RE,), keep_first(kv_pool_tokens=("tokens", int))),
    ((_SWA_KV_POOL_RE,), _swa_kv_pool),
    ((_MAMBA_RE,), _mamba_pool),
    ((_GRAPH_RE,), add_up("graph_gib", "gib")),
    ((_SUMMARY_RE,), _summary),
    ((_BENCH_TOKENS_RE,), keep_first(max_total_num_tokens=("tokens", int))),
    ((_HOST_KV_RE,), _host_kv_pool),
    ((_HOST_KV_OLD_RE, _HOST_MAMBA_RE), add_up("host_pool_gb", "gb")),
)
_FORMAT = StartupFormat(READY_TEXT, SIMULATED_MARKER, _READERS, _WARNING_MARKERS, exclusive=True)
# Summed over lines (draft weights, several graphs, KV and Mamba host pools).
_SUMS = ("weights_gib", "graph_gib", "host_pool_gb")


def parse_startup(log_text: str) -> LaunchReport:
    """What a launch got, from its startup log (any mix of rank prefixes; unknown lines ignored).

    weights_gib sums every `Load weight end` of rank 0 (target plus a draft model, which
    occupies the GPU too); the KV and Mamba figures are the first unlabeled pool (the target's);
    graph_gib sums every graph capture (decode, verify, prefill, draft); host_pool_gb sums the KV
    and Mamba host pools (HiCache's --hicache-size covers both, FIELD-NOTES P3).
    """
    scan = _FORMAT.scan(_rank0_messages(log_text))
    sums = {key: _round(scan.values.pop(key, None)) for key in _SUMS}
    after = scan.values.pop("_free_after_weights", None)
    scan.values.pop("_free_before_pool", None)
    before = scan.values.get("free_before_weights_gib")
    weights = scan.values.pop("_first_weights", None)
    full = scan.values.pop("_swa_full_tokens", None)
    if isinstance(full, int):
        scan.values["kv_pool_tokens"] = full
    if sums["weights_gib"] is None and isinstance(after, float) and isinstance(before, float):
        sums["weights_gib"] = round(before - after, 2)
    elif before is None and isinstance(after, float) and isinstance(weights, float):
        # No `Load weight begin` line: the end line's free memory plus what loading took.
        scan.values["free_before_weights_gib"] = round(after + weights, 2)
    return LaunchReport(
        **sums,
        ready=scan.ready,
        simulated=scan.simulated,
        warnings=scan.warnings,
        **scan.values,
    )


def free_after_weights_gib(log_text: str) -> float | None:
    """The free memory rank 0 logged after the target's weights (`Load weight end`): all a log
    states of its free memory when it has no `Load weight begin` and no `mem usage`."""
    after = _FORMAT.scan(_rank0_messages(log_text)).values.get("_free_after_weights")
    return after if isinstance(after, float) else None


def _round(value: object) -> float | None:
    # Sums of 2-decimal figures: drop float noise such as 0.30000000000000004.
    return round(value, 6) if isinstance(value, float) else None


# ---------------------------------------------------------------------------------------------
# Runtime batch lines


@dataclass(frozen=True)
class BatchLine:
    """One `Prefill batch` or `Decode batch` scheduler line (managers/scheduler_metrics_mixin).

    `token_usage` is the full-attention usage on hybrid models (`full token usage`), like the
    `sglang:token_usage` gauge. Fields the line lacks are None; unknown keys land in `extra`.
    """

    kind: str  # "prefill" | "decode"
    running_req: int | None = None
    queue_req: int | None = None
    token_usage: float | None = None
    num_tokens: int | None = None  # decode: #token / #full token
    mamba_usage: float | None = None
    mamba_num: int | None = None
    swa_token_usage: float | None = None
    new_seq: int | None = None  # prefill
    new_token: int | None = None
    cached_token: int | None = None
    input_throughput: float | None = None
    gen_throughput: float | None = None  # decode
    accept_len: float | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None
    extra: dict[str, str] = field(default_factory=dict)


_BATCH_RE = re.compile(r"(?P<kind>Prefill|Decode) batch(?: \[\d+\])?, (?P<body>.*)$")
_INT_KEYS = {
    "#running-req": "running_req",
    "#queue-req": "queue_req",
    "#token": "num_tokens",
    "#full token": "num_tokens",
    "mamba num": "mamba_num",
    "#new-seq": "new_seq",
    "#new-token": "new_token",
    "#cached-token": "cached_token",
}
_FLOAT_KEYS = {
    "token usage": "token_usage",
    "full token usage": "token_usage",
    "mamba usage": "mamba_usage",
    "swa token usage": "swa_token_usage",
    "input throughput (token/s)": "input_throughput",
    "gen throughput (token/s)": "gen_throughput",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
}


def parse_batch_line(line: str) -> BatchLine | None:
    """Parse a scheduler batch line (with or without the log prefix); None for other lines."""
    match = _BATCH_RE.search(strip_prefix(line.rstrip()))
    if match is None:
        return None
    values: dict[str, object] = {}
    extra: dict[str, str] = {}
    for part in match["body"].split(", "):
        key, sep, value = part.partition(": ")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        try:
            if key in _INT_KEYS:
                values[_INT_KEYS[key]] = int(value)
            elif key in _FLOAT_KEYS:
                values[_FLOAT_KEYS[key]] = float(value)
            elif key.endswith(" graph"):  # "cuda graph", "CUDA graph", "npu graph"
                values["cuda_graph"] = value == "True"
            else:
                extra[key] = value
        except ValueError:
            extra[key] = value
    return BatchLine(kind=match["kind"].lower(), extra=extra, **values)  # type: ignore[arg-type]


def free_before_pool_gib(log_text: str) -> float | None:
    """The free memory rank 0 logged at the last `Load weight end` before its KV pool: the
    target's, or a draft's that loads first (DFLASH, EAGLE heads in the releases that load them
    before the target profiles). On an integrated GPU it is the reading the pool is sized from."""
    after = _FORMAT.scan(_rank0_messages(log_text)).values.get("_free_before_pool")
    return after if isinstance(after, float) else None
