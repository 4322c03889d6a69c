"""Serving-benchmark results read in the field names each release's own writer uses (SGLang's
bench_serving / sglang.benchmark.serving, vLLM's vllm/benchmarks/serve.py)."""

from __future__ import annotations

import ast
import json
import zipfile
from pathlib import Path

import pytest

from autotune.calibration.bench import bench_run, json_objects, looks_like_bench, read_bench
from autotune.errors import ConfigError
from tests.calibration.bench_data import N, c2_runs, sglang_result, vllm_result, write_jsonl
from tests.wheels import engine_wheel_or_skip

# What calibration/bench.py reads, by the release that started writing it.
SGLANG_KEYS = {
    "0.3.3": {"completed", "duration", "total_input_tokens", "total_output_tokens",
              "request_rate", "output_throughput", "median_ttft_ms", "median_itl_ms",
              "mean_e2e_latency_ms", "backend"},
    "0.4.1.post6": {"max_concurrency", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms"},
    "0.4.3.post3": {"concurrency", "accept_length"},
    "0.5.8": {"server_info"},
}  # fmt: skip
VLLM_KEYS = {"completed", "duration", "total_input_tokens", "total_output_tokens", "request_rate",
             "max_concurrency", "output_throughput", "mean_ttft_ms", "mean_tpot_ms",
             "mean_itl_ms", "date", "model_id"}  # fmt: skip


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.replace(".post", ".").split("."))


def sglang_keys(version: str) -> set[str]:
    return set().union(*(k for v, k in SGLANG_KEYS.items() if _vkey(v) <= _vkey(version)))


def writer_keys(source: str) -> set[str]:
    """The keys a result writer puts in its dicts: dict-literal keys, `x["key"] = ...`, and
    vLLM's f"mean_{metric}_ms" (median, std, p99) for each process_one_metric("metric", ...)."""
    keys: set[str] = set()
    metrics: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            keys |= {k.value for k in node.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant):
                    keys.add(str(t.slice.value))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "process_one_metric":
            if node.args and isinstance(node.args[0], ast.Constant):
                metrics.add(str(node.args[0].value))
    flat = source.replace("'", '"')
    stats = [
        s for s in ("mean", "median", "std") if f'f"{s}_{{metric_attribute_name}}_ms"' in flat
    ]
    if 'f"p{p_word}_{metric_attribute_name}_ms"' in flat:
        stats.append("p99")  # --metric-percentiles defaults to 99
    keys |= {f"{s}_{m}_ms" for m in metrics for s in stats}
    return {k for k in keys if isinstance(k, str)}


def wheel_source(engine: str, version: str, members: tuple[str, ...]) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip(engine, version)) as z:
        names = set(z.namelist())
        return "\n".join(z.read(m).decode() for m in members if m in names)


@pytest.mark.parametrize("version", ["0.3.3", "0.4.1.post6", "0.5.2", "0.5.17", "0.5.23"])
def test_sglang_writers_use_the_keys_we_read(version: str) -> None:
    src = wheel_source(
        "sglang", version, ("sglang/bench_serving.py", "sglang/benchmark/serving.py")
    )
    keys = writer_keys(src)
    assert sglang_keys(version) <= keys, sglang_keys(version) - keys
    # how a vLLM file is told apart: SGLang never writes these
    assert not keys & {"model_id", "date"}


def test_the_fixture_line_is_sglang_0_5_17s() -> None:
    src = wheel_source("sglang", "0.5.17", ("sglang/benchmark/serving.py",))
    fixture = set(c2_runs()[0])
    assert fixture <= writer_keys(src), fixture - writer_keys(src)


@pytest.mark.parametrize("version", ["0.10.0", "0.19.0", "0.33.0"])
def test_vllm_writers_use_the_keys_we_read(version: str) -> None:
    keys = writer_keys(wheel_source("vllm", version, ("vllm/benchmarks/serve.py",)))
    assert keys >= VLLM_KEYS, VLLM_KEYS - keys


def test_the_vllm_fixture_is_vllm_0_33s() -> None:
    keys = writer_keys(wheel_source("vllm", "0.33.0", ("vllm/benchmarks/serve.py",)))
    fixture = set(vllm_result(input_len=1, output_len=2, tpot_ms=1, ttft_ms=1, max_concurrency=1))
    assert fixture <= keys, fixture - keys


def test_an_sglang_jsonl_file_gives_one_run_per_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bench.jsonl", c2_runs())
    assert "Infinity" in path.read_text()  # bench_serving's json.dumps of request_rate inf
    runs = read_bench(path)
    assert len(runs) == 7 and all(r.tool == "sglang" and r.backend == "sglang" for r in runs)
    one, two = runs[0], runs[1]
    assert (one.input_len, one.output_len, one.streams, one.request_rate) == (128, 256, 1, None)
    assert one.tpot_ms == pytest.approx(1000 / 41.4) and one.tpot_from == "mean_tpot_ms"
    assert (two.streams, two.streams_from) == (2, "max_concurrency")
    prefill = runs[3]
    assert prefill.tpot_ms is None and prefill.ttft_ms == pytest.approx(512 / 1736.8 * 1000)


def test_sglang_0_3_3_lines_have_medians_only() -> None:
    line = {"backend": "sglang", "dataset_name": "random", "request_rate": 2.0,
            "total_input_tokens": 4096, "total_output_tokens": 1024,
            "total_output_tokens_retokenized": 1024, "mean_e2e_latency_ms": 5000.0,
            "median_e2e_latency_ms": 5000.0, "median_ttft_ms": 300.0, "median_itl_ms": 20.0,
            "output_throughput": 100.0, "random_input_len": 1024, "random_output_len": 256,
            "random_range_ratio": 1.0, "duration": 10.0, "completed": 4}  # fmt: skip
    run = bench_run(line)
    assert run is not None and run.tpot_ms == 20.0 and run.tpot_from == "median_itl_ms"
    assert run.ttft_ms == 300.0 and run.request_rate == 2.0
    # Little's law: 4 requests x 5 s over 10 s
    assert run.streams == 2.0 and run.streams_from.startswith("completed x e2e")


def test_vllm_saved_and_appended_results(tmp_path: Path) -> None:
    a = vllm_result(input_len=1024, output_len=128, tpot_ms=25.0, ttft_ms=600.0, max_concurrency=1)
    b = vllm_result(input_len=1024, output_len=128, tpot_ms=30.0, ttft_ms=900.0,
                    max_concurrency=None)  # fmt: skip
    one = tmp_path / "vllm.json"
    one.write_text(json.dumps(a))
    (run,) = read_bench(one)
    assert (run.tool, run.streams, run.request_rate, run.tpot_ms) == ("vllm", 1, None, 25.0)
    both = tmp_path / "appended.json"  # --append-result: objects separated by a newline
    both.write_text(json.dumps(a) + "\n" + json.dumps(b))
    runs = read_bench(both)
    assert [r.index for r in runs] == [0, 1]
    # no cap, rate inf, no e2e latency in vLLM's default metrics: every request at once
    assert runs[1].streams == N and runs[1].streams_from.startswith("completed")


def test_not_a_benchmark(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("[2026-01-01] KV Cache is allocated. #tokens: 1000\n")
    assert not looks_like_bench(log.read_text())
    assert looks_like_bench(json.dumps(sglang_result(input_len=1, output_len=2, tpot_ms=1,
                                                     ttft_ms=1)))  # fmt: skip
    assert json_objects('{"a": 1}\n{"b": 2}\n') == [{"a": 1}, {"b": 2}]
    with pytest.raises(ConfigError, match="no serving-benchmark result"):
        read_bench(log)
