"""Reading serving-benchmark results: SGLang's bench_serving `--output-file` (JSON lines, one
object per run, appended) and vLLM's `vllm bench serve --save-result` / `--append-result` (one
JSON object per file, or several separated by newlines; the older benchmarks/benchmark_serving.py
writes the same keys).

The field names are the engines' own (tests/calibration/test_bench.py reads them from each
release's writer):
  both: completed, duration, total_input_tokens, total_output_tokens, output_throughput,
        request_rate (inf: SGLang writes Infinity, vLLM the string "inf"), max_concurrency
        (SGLang from 0.4.1; vLLM always, null when unset), mean/median_ttft_ms, mean/median
        _tpot_ms, mean/median_itl_ms (SGLang 0.3.3 writes only the medians of TTFT and ITL).
  SGLang: concurrency (measured mean concurrency, 0.4.3+), accept_length (0.4.3+),
        mean_e2e_latency_ms, server_info (the server's /server_info: its ServerArgs fields and
        version, 0.5.8+).
  vLLM: date, model_id, tokenizer_id, num_prompts, max_concurrent_requests (0.11+); the
        ms metrics are those of --percentile-metrics (default ttft,tpot,itl).
Input and output lengths are the run's means (total tokens over completed requests): the
random-length arguments are targets, not what ran.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError

TOOLS = ("sglang", "vllm")  # which benchmark wrote the file


@dataclass(frozen=True)
class BenchRun:
    """One benchmark run's figures as the planner's speed model reads them."""

    tool: str
    index: int  # position in the file
    completed: int
    input_len: float  # mean prompt tokens
    output_len: float  # mean generated tokens
    streams: float  # concurrent requests while decoding
    streams_from: str  # which field said so
    request_rate: float | None  # None: all at once (inf)
    max_concurrency: int | None
    tpot_ms: float | None  # time per output token after the first
    tpot_from: str | None
    ttft_ms: float | None
    output_throughput: float | None
    accept_length: float | None  # speculative decoding, as the server reported it
    backend: str | None  # SGLang's --backend (the server engine it drove)
    server_info: Mapping[str, Any] | None


def read_bench(path: Path) -> list[BenchRun]:
    """Every run in a benchmark result file.

    Raises:
        ConfigError: unreadable, not JSON, or holds no serving-benchmark result.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc})", field="BENCH") from exc
    objs = json_objects(text)
    runs = [r for i, o in enumerate(objs) if (r := bench_run(o, i)) is not None]
    if not runs:
        raise ConfigError(
            f"{path}: no serving-benchmark result found (SGLang bench_serving --output-file or "
            "vllm bench serve --save-result JSON with completed, duration and token totals)",
            field="BENCH",
        )
    return runs


def json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a file written one after another (JSON lines, or vLLM's appended
    results); [] when the text is not JSON."""
    dec = json.JSONDecoder()
    out: list[dict[str, Any]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return out
        if isinstance(obj, dict):
            out.append(obj)
    return out


def is_bench_result(obj: Mapping[str, Any]) -> bool:
    return all(k in obj for k in ("completed", "total_input_tokens", "total_output_tokens"))


def looks_like_bench(text: str) -> bool:
    """Whether a file's text is a benchmark result (and not a startup log)."""
    head = text.lstrip()[:1]
    return head == "{" and any(is_bench_result(o) for o in json_objects(text))


def bench_run(obj: Mapping[str, Any], index: int = 0) -> BenchRun | None:
    """One result object read, or None when it is not a serving-benchmark result or completed
    no request."""
    if not is_bench_result(obj):
        return None
    completed = int(obj.get("completed") or 0)
    if completed <= 0:
        return None
    tool = "vllm" if ("model_id" in obj or "date" in obj) else "sglang"
    rate = _rate(obj.get("request_rate"))
    mc = obj.get("max_concurrency")
    max_conc = int(mc) if isinstance(mc, int | float) and mc > 0 else None
    streams, streams_from = _streams(obj, completed, rate, max_conc)
    tpot, tpot_from = _first(
        obj, ("mean_tpot_ms", "median_tpot_ms", "mean_itl_ms", "median_itl_ms")
    )
    ttft, _ = _first(obj, ("mean_ttft_ms", "median_ttft_ms"))
    info = obj.get("server_info")
    backend = obj.get("backend") if tool == "sglang" else None
    return BenchRun(
        tool=tool,
        index=index,
        completed=completed,
        input_len=float(obj["total_input_tokens"]) / completed,
        output_len=float(obj["total_output_tokens"]) / completed,
        streams=streams,
        streams_from=streams_from,
        request_rate=rate,
        max_concurrency=max_conc,
        tpot_ms=tpot,
        tpot_from=tpot_from,
        ttft_ms=ttft,
        output_throughput=_num(obj.get("output_throughput")),
        accept_length=_num(obj.get("accept_length")),
        backend=str(backend) if isinstance(backend, str) else None,
        server_info=info if isinstance(info, Mapping) else None,
    )


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if math.isfinite(f) and f > 0 else None


def _first(obj: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[float | None, str | None]:
    """The first positive figure among keys (the tools write 0 where a run had no such
    interval, e.g. TPOT of one-token outputs)."""
    for k in keys:
        v = _num(obj.get(k))
        if v is not None:
            return v, k
    return None, None


def _rate(v: Any) -> float | None:
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    f = _num(v)
    return f if f is not None and math.isfinite(f) else None


def _streams(
    obj: Mapping[str, Any], completed: int, rate: float | None, max_conc: int | None
) -> tuple[float, str]:
    """Concurrent requests: the client's cap, else SGLang's measured mean concurrency, else
    Little's law from the request rate and end-to-end latency, else every request at once."""
    if max_conc is not None:  # a closed loop: the cap is what runs
        return float(min(max_conc, completed)), "max_concurrency"
    conc = _num(obj.get("concurrency"))
    if conc is not None:
        return max(conc, 1.0), "concurrency"
    e2e, _ = _first(obj, ("mean_e2e_latency_ms", "mean_e2el_ms"))
    dur = _num(obj.get("duration"))
    if e2e is not None and dur is not None:
        return max(completed * e2e / 1000 / dur, 1.0), "completed x e2e latency / duration"
    if rate is None:
        return float(completed), "completed (request rate inf, no cap)"
    return 1.0, "unknown (taken as 1)"
