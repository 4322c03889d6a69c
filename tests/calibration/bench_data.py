"""Serving-benchmark results written in the engines' own formats (SGLang 0.5.17's bench_serving
--output-file line, vLLM's `vllm bench serve --save-result` object; test_bench.py checks the keys
against each release's writer) from FIELD-NOTES C2's figures: the K1 launch (SGLang 0.5.17, RTX
4080 SUPER 32G, AWQ-INT4, fp8 KV). C2 gives speeds, not the benchmark's lengths: the output
lengths (256 decoded tokens, 1 for a prefill run) are the fixture's own choice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

N = 4  # requests per run


def sglang_result(
    *,
    input_len: int,
    output_len: int,
    tpot_ms: float,
    ttft_ms: float,
    max_concurrency: int | None = 1,
    request_rate: float = float("inf"),
    server_info: dict[str, Any] | None = None,
    accept_length: float | None = None,
) -> dict[str, Any]:
    """One run as SGLang 0.5.17's sglang/benchmark/serving.py writes it (without
    --output-details); bench_serving writes 0 for TPOT and ITL of one-token outputs."""
    e2e = ttft_ms + tpot_ms * max(output_len - 1, 0)
    conc = max_concurrency or N
    duration = N * e2e / 1000 / conc
    out_tokens = N * output_len
    ms = {
        f"{stat}_{m}_ms": v
        for m, v in (("e2e_latency", e2e), ("ttft", ttft_ms), ("tpot", tpot_ms), ("itl", tpot_ms))
        for stat in ("mean", "median", "p90", "p95", "p99")
    }
    ms.update({f"std_{m}_ms": 0.0 for m in ("e2e_latency", "ttft", "tpot", "itl")})
    return {
        "tag": None,
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": request_rate,
        "max_concurrency": max_concurrency,
        "sharegpt_output_len": None,
        "random_input_len": input_len,
        "random_output_len": output_len,
        "random_range_ratio": 1.0,
        "server_info": server_info,
        "duration": duration,
        "completed": N,
        "total_input_tokens": N * input_len,
        "total_input_text_tokens": N * input_len,
        "total_input_vision_tokens": 0,
        "total_output_tokens": out_tokens,
        "total_output_tokens_retokenized": out_tokens,
        "request_throughput": N / duration,
        "input_throughput": N * input_len / duration,
        "output_throughput": out_tokens / duration,
        "total_throughput": N * (input_len + output_len) / duration,
        **ms,
        "concurrency": float(conc),
        "accept_length": accept_length,
        "max_output_tokens_per_s": out_tokens / duration,
        "max_concurrent_requests": conc,
    }


def vllm_result(
    *, input_len: int, output_len: int, tpot_ms: float, ttft_ms: float, max_concurrency: int | None
) -> dict[str, Any]:
    """One run as vLLM 0.33's vllm/benchmarks/serve.py saves it (--save-result, default
    --percentile-metrics ttft,tpot,itl, --metric-percentiles 99)."""
    e2e = ttft_ms + tpot_ms * max(output_len - 1, 0)
    conc = max_concurrency or N
    duration = N * e2e / 1000 / conc
    out = {
        "date": "20261202-090000",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": "Qwen/Qwen3.8-27B-AWQ",
        "tokenizer_id": "Qwen/Qwen3.8-27B-AWQ",
        "num_prompts": N,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": max_concurrency,
        "duration": duration,
        "completed": N,
        "failed": 0,
        "total_input_tokens": N * input_len,
        "total_output_tokens": N * output_len,
        "request_throughput": N / duration,
        "request_goodput": None,
        "output_throughput": N * output_len / duration,
        "total_token_throughput": N * (input_len + output_len) / duration,
        "max_output_tokens_per_s": N * output_len / duration,
        "max_concurrent_requests": conc,
        "rtfx": 0.0,
    }
    for m, v in (("ttft", ttft_ms), ("tpot", tpot_ms), ("itl", tpot_ms)):
        out.update({f"mean_{m}_ms": v, f"median_{m}_ms": v, f"std_{m}_ms": 0.0, f"p99_{m}_ms": v})
    return out


# C2: decode 1 stream at a short context 41.4 tok/s (TTFT 285 ms for 128 tokens); 2 streams
# 36.7 + 38.1 = 74.8 tok/s; 1 stream at 64K 37.0 tok/s; prefill pp512 / pp8.5k / pp34k / pp68k
# 1736.8 / 1884.0 / 1684.3 / 1459.8 tok/s.
C2_DECODE = [  # (input, output, streams, aggregate tok/s, TTFT ms)
    (128, 256, 1, 41.4, 285.0),
    (128, 256, 2, 74.8, 285.0),
    (65536, 256, 1, 37.0, 65536 / 1459.8 * 1000),  # TTFT at pp68k's rate (C2 gives none)
]
C2_PREFILL = [(512, 1736.8), (8500, 1884.0), (34000, 1684.3), (68000, 1459.8)]


def c2_runs(slow: float = 1.0) -> list[dict[str, Any]]:
    """C2 as SGLang bench_serving lines; `slow` stretches every time (a slower machine)."""
    runs = [
        sglang_result(
            input_len=i,
            output_len=o,
            tpot_ms=1000 * s / tok_s * slow,
            ttft_ms=ttft * slow,
            max_concurrency=s,
        )  # fmt: skip
        for i, o, s, tok_s, ttft in C2_DECODE
    ]
    runs += [
        sglang_result(input_len=n, output_len=1, tpot_ms=0.0, ttft_ms=n / tok_s * 1000 * slow)
        for n, tok_s in C2_PREFILL
    ]
    return runs


def write_jsonl(path: Path, objs: list[dict[str, Any]]) -> Path:
    # json.dumps writes inf as Infinity, as bench_serving's own file does
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path
