"""The simulated engine as a real process: SGLang's HTTP API, metrics, startup and failures."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autotune.process import free_port
from autotune.sim import tokens
from autotune.sim.analytic import closed_loop, evaluate
from tests.sim.conftest import AWQ, G4080, K1

ROOT = Path(__file__).resolve().parents[2]


def _k1_allocated() -> int:
    """C1's pool as the simulated 4080 SUPER machine allocates it (seed 0)."""
    from autotune.hardware import get_gpu
    from autotune.models.registry import load_card
    from autotune.planner import plan_sglang
    from autotune.sim.allocator import allocate_sglang, machine

    gpu, card = get_gpu(G4080), load_card(AWQ)
    plan = plan_sglang(card, gpu, K1, version="0.5.17")
    return allocate_sglang(plan, machine(gpu, 0), card, gpu, K1, version="0.5.17").kv_pool_tokens


K1_FLAGS = [
    "--kv-cache-dtype",
    "fp8_e4m3",
    "--page-size",
    "1",
    "--context-length",
    "131072",
    "--max-running-requests",
    "2",
    "--mem-fraction-static",
    "0.92",
    "--max-mamba-cache-size",
    "6",
]
K1_ALLOCATED = _k1_allocated()


@dataclass
class Sim:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def _argv(port: int, scale: str, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "autotune.sim",
        "--model-path",
        AWQ,
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--sim-gpu",
        G4080,
        "--sim-time-scale",
        scale,
        "--sim-host-free-gib",
        "200",
        *flags,
    ]


FAST_START = ["--sim-max-startup-s", "0.1"]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # own process group (P9)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@contextmanager
def running(tmp: Path, *flags: str, scale: str = "0", wait: bool = True) -> Iterator[Sim]:
    port = free_port()
    log = tmp / f"sim-{port}.log"
    with open(log, "wb") as fh:
        argv = _argv(port, scale, *flags, *(FAST_START if wait else []))
        proc = subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=ROOT,
        )
    sim = Sim(f"http://127.0.0.1:{port}", proc, log)
    try:
        if wait:
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, sim.text()
                try:
                    if httpx.get(sim.url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "simulated engine not ready\n" + sim.text()
                time.sleep(0.05)
        yield sim
    finally:
        _stop(proc)


def run_to_exit(tmp: Path, *flags: str, version: str = "0.5.17") -> tuple[int, str]:
    port = free_port()
    out = subprocess.run(
        _argv(port, "0", "--sim-engine-version", version, *flags),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        start_new_session=True,
    )
    return out.returncode, out.stdout + out.stderr


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    tmp = tmp_path_factory.mktemp("sim")
    with running(
        tmp,
        *K1_FLAGS,
        "--enable-metrics",
        "--enable-cache-report",
        "--served-model-name",
        "qwen-sim",
    ) as s:
        yield s


def sse(lines: list[str]) -> list[dict | str]:
    out: list[dict | str] = []
    for line in lines:
        if line.startswith("data: "):
            payload = line[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def _sample(text: str, name: str) -> float:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                return float(s.value)
    raise KeyError(name)


def stream(url: str, path: str, body: dict) -> list[dict | str]:
    with httpx.stream("POST", url + path, json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return sse(list(r.iter_lines()))


# --- API shape ---------------------------------------------------------------------------------


def test_models_and_server_info_say_simulated(sim: Sim) -> None:
    models = httpx.get(sim.url + "/v1/models").json()
    assert models["data"][0]["id"] == "qwen-sim"
    info = httpx.get(sim.url + "/server_info").json()
    assert info["simulated"] is True and "SIMULATED" in info["sim"]["banner"]
    assert httpx.get(sim.url + "/get_server_info").json()["version"] == "0.5.17"
    state = info["internal_states"][0]
    assert {"weight", "kvcache", "token_capacity", "graph"} <= set(state["memory_usage"])
    mem = state["memory_usage"]
    assert mem["weight"] + mem["kvcache"] + mem["graph"] < mem["vram_in_use"] < 32.0
    assert state["memory_usage"]["token_capacity"] == info["max_total_num_tokens"] == K1_ALLOCATED
    assert state["effective_max_running_requests_per_dp"] == 2
    assert info["max_mamba_cache_size"] == 6 and info["mem_fraction_static"] == 0.92
    assert info["sim"]["vram_in_use_gib"] < 32.0
    assert httpx.get(sim.url + "/model_info").json()["model_path"] == AWQ
    first = sim.text().splitlines()[0]
    assert "SIMULATED" in first, "the first log line must say the engine is simulated"


def test_chat_stream_format(sim: Sim) -> None:
    body = {
        "model": "qwen-sim",
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events = stream(sim.url, "/v1/chat/completions", body)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    assert chunks[0]["choices"][0]["delta"] == {
        "reasoning_content": None,
        "role": "assistant",
        "content": "",
    }
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    content = [c for c in chunks[1:] if c["choices"] and c["choices"][0]["finish_reason"] is None]
    assert len(content) == 12
    finish = chunks[-2]
    assert finish["choices"][0]["finish_reason"] == "length"
    assert finish["choices"][0]["matched_stop"] is None
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12
    assert usage["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    # the same request without streaming gives the same text (temperature-0 style)
    full = httpx.post(sim.url + "/v1/chat/completions", json={**body, "stream": False}).json()
    assert full["choices"][0]["message"]["content"] == text
    assert full["usage"]["prompt_tokens"] == usage["usage"]["prompt_tokens"]
    # an exact repeat of a short prompt misses on a hybrid model (no checkpoint, P12) ...
    assert full["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # ... while the next turn (prompt + answer + new text) reuses all but the last token
    turn2 = {
        **body,
        "stream": False,
        "messages": [
            *body["messages"],
            {"role": "assistant", "content": text},
            {"role": "user", "content": "Go on."},
        ],
    }
    usage2 = httpx.post(sim.url + "/v1/chat/completions", json=turn2).json()["usage"]
    prompt1 = usage["usage"]["prompt_tokens"]
    assert usage2["prompt_tokens_details"]["cached_tokens"] == prompt1 + 12 - 1


def test_chat_without_usage_option_has_no_usage_chunk(sim: Sim) -> None:
    events = stream(
        sim.url,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True},
    )
    chunks = [e for e in events if isinstance(e, dict)]
    assert all(c["choices"] for c in chunks) and events[-1] == "[DONE]"


def test_completions_non_stream_and_stop(sim: Sim) -> None:
    r = httpx.post(sim.url + "/v1/completions", json={"prompt": "one two three", "max_tokens": 7})
    body = r.json()
    assert r.status_code == 200 and body["object"] == "text_completion"
    assert body["usage"] == {
        "prompt_tokens": 3,
        "total_tokens": 10,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 0},
        "reasoning_tokens": 0,
    }
    text = body["choices"][0]["text"]
    word = text.split()[3]
    stopped = httpx.post(
        sim.url + "/v1/completions",
        json={"prompt": "one two three", "max_tokens": 7, "stop": word},
    ).json()
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["matched_stop"] == word
    assert word not in stopped["choices"][0]["text"]
    # no max_tokens: the model ends by itself with an EOS
    free = httpx.post(sim.url + "/v1/completions", json={"prompt": "why"}).json()
    assert free["choices"][0]["finish_reason"] == "stop"
    assert isinstance(free["choices"][0]["matched_stop"], int)


def test_generate_stream_is_cumulative(sim: Sim) -> None:
    events = stream(
        sim.url,
        "/generate",
        {"text": "The quick brown fox", "stream": True, "sampling_params": {"max_new_tokens": 6}},
    )
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    prev = ""
    for c in chunks:
        assert c["text"].startswith(prev)
        prev = c["text"]
    assert [c["meta_info"]["completion_tokens"] for c in chunks[:6]] == [1, 2, 3, 4, 5, 6]
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"] == {"type": "length", "length": 6}
    assert last["prompt_tokens"] == 4 and "e2e_latency" in last
    assert len(chunks[-1]["output_ids"]) == 6
    plain = httpx.post(sim.url + "/generate", json={"input_ids": [1, 2, 3]}).json()
    assert plain["meta_info"]["completion_tokens"] == 128  # SGLang's default max_new_tokens


def test_metrics_names_types_and_counters(sim: Sim) -> None:
    def scrape() -> dict[str, object]:
        text = httpx.get(sim.url + "/metrics").text
        return {f.name: f for f in text_string_to_metric_families(text)}

    before = scrape()
    httpx.post(sim.url + "/v1/completions", json={"prompt": "a b c d e", "max_tokens": 9})
    after = scrape()
    types = {
        "sglang:prompt_tokens": "counter",
        "sglang:generation_tokens": "counter",
        "sglang:cached_tokens": "counter",
        "sglang:num_running_reqs": "gauge",
        "sglang:num_queue_reqs": "gauge",
        "sglang:token_usage": "gauge",
        "sglang:mamba_usage": "gauge",
        "sglang:gen_throughput": "gauge",
        "sglang:spec_accept_length": "gauge",
        "sglang:spec_accept_rate": "gauge",
        "sglang:time_to_first_token_seconds": "histogram",
        "sglang:inter_token_latency_seconds": "histogram",
        "sglang:e2e_request_latency_seconds": "histogram",
    }
    for name, kind in types.items():
        assert after[name].type == kind, name  # type: ignore[attr-defined]

    def value(fams: dict[str, object], name: str, **labels: str) -> float:
        for s in fams[name].samples:  # type: ignore[attr-defined]
            if s.name.startswith(name) and all(s.labels.get(k) == v for k, v in labels.items()):
                if s.name in (name, name + "_total"):
                    return float(s.value)
        raise KeyError(name)

    labels = next(iter(after["sglang:prompt_tokens"].samples)).labels  # type: ignore[attr-defined]
    assert {"model_name", "engine_type", "tp_rank", "pp_rank"} <= set(labels)
    assert labels["model_name"] == "qwen-sim"
    assert value(after, "sglang:prompt_tokens") - value(before, "sglang:prompt_tokens") == 5
    assert (
        value(after, "sglang:generation_tokens") - value(before, "sglang:generation_tokens") == 9
    )
    assert value(after, "sglang:cached_tokens", cache_source="host") >= 0
    assert value(after, "sglang:cached_tokens", cache_source="device") >= 0


def test_malformed_requests_get_openai_errors(sim: Sim) -> None:
    bad = [
        ("/v1/chat/completions", b"{not json", "not valid JSON"),
        ("/v1/chat/completions", b'{"max_tokens": 5}', "messages"),
        ("/v1/chat/completions", b'{"messages": "hi"}', "messages"),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role":"user","content":"x"}], "max_tokens": -1}',
            ">= 0",
        ),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role":"user","content":"x"}], "max_tokens": "ten"}',
            "integer",
        ),
        ("/v1/completions", b'{"max_tokens": 5}', "prompt"),
        ("/v1/completions", b"[1, 2]", "JSON object"),
        ("/generate", b'{"sampling_params": {}}', "text or input_ids"),
    ]
    for path, body, needle in bad:
        r = httpx.post(sim.url + path, content=body)
        assert r.status_code == 400, (path, body, r.text)
        err = r.json()
        assert err["object"] == "error" and err["type"] == "BadRequestError"
        assert err["code"] == 400 and needle in err["message"], err
    too_long = " ".join(["word"] * 131072)
    r = httpx.post(sim.url + "/v1/completions", json={"prompt": too_long, "max_tokens": 1})
    assert r.status_code == 400
    assert r.json()["message"] == (
        "The input (131072 tokens) is longer than the model's context length (131072 tokens)."
    )
    assert httpx.get(sim.url + "/no/such/thing").status_code == 404
    r = httpx.get(sim.url + "/v1/chat/completions")
    assert r.status_code == 405 and r.json()["code"] == 405
    # garbage on the socket: a 400 and a closed connection, never a dead server
    host, port = sim.url.rsplit(":", 1)
    with socket.create_connection(("127.0.0.1", int(port)), timeout=5) as s:
        s.sendall(b"\x00\x01 NOT HTTP\r\n\r\n")
        assert b"400" in s.recv(1000)
    with socket.create_connection(("127.0.0.1", int(port)), timeout=5) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    assert httpx.get(sim.url + "/health").status_code == 200
    assert sim.proc.poll() is None


# --- timing, lifecycle -----------------------------------------------------------------------


def test_health_loading_then_ready_and_flush_cache_rules(tmp_path: Path) -> None:
    """503 while loading, then 200; /flush_cache is 400 while a request is pending (P5)."""
    with running(
        tmp_path, *K1_FLAGS, "--enable-metrics", "--stream-interval", "4", scale="20", wait=False
    ) as s:
        codes = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                codes.append(httpx.get(s.url + "/health", timeout=2).status_code)
            except httpx.HTTPError:
                codes.append(0)
            if codes[-1] == 200:
                break
            time.sleep(0.05)
        assert 503 in codes and codes[-1] == 200, codes
        assert codes.index(200) > codes.index(503)
        assert "The server is fired up and ready to roll!" in s.text()

        async def pending_then_flush() -> tuple[int, int, int]:
            async with httpx.AsyncClient(base_url=s.url, timeout=30) as c:
                body = {
                    "messages": [{"role": "user", "content": "go"}],
                    "max_tokens": 4000,
                    "stream": True,
                }
                async with c.stream("POST", "/v1/chat/completions", json=body) as r:
                    lines = r.aiter_lines()  # keep a reference: a dropped one closes the stream
                    await lines.__anext__()
                    busy = (await c.post("/flush_cache")).status_code
                    text = (await c.get("/metrics")).text
                    running_reqs = _sample(text, "sglang:num_running_reqs")
                # closing the stream early aborts the request in the engine
                for _ in range(100):
                    idle = (await c.get("/flush_cache")).status_code
                    if idle == 200:
                        break
                    await asyncio.sleep(0.02)
                aborted = _sample(
                    (await c.get("/metrics")).text, "sglang:num_aborted_requests_total"
                )
                return busy, idle, running_reqs, aborted

        busy, idle, running_reqs, aborted = asyncio.run(pending_then_flush())
        assert (busy, idle, running_reqs, aborted) == (400, 200, 1.0, 1.0)
        # --stream-interval 4: the first token at once, then groups of 4 (1 | 4 | 4 | 1)
        events = stream(
            s.url, "/v1/completions", {"prompt": "a b c", "max_tokens": 10, "stream": True}
        )
        texts = [e["choices"][0]["text"] for e in events[:-2] if isinstance(e, dict)]
        assert [tokens.count(t) for t in texts] == [1, 4, 4, 1]
        assert "Cache not flushed because there are pending requests" in s.text()


def test_speculative_chunks_carry_several_tokens(tmp_path: Path) -> None:
    """P8: under speculative decoding one SSE chunk carries several tokens."""
    with running(
        tmp_path,
        *K1_FLAGS,
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-num-steps",
        "5",
        "--speculative-num-draft-tokens",
        "6",
    ) as s:
        prompt = "Extract and repeat verbatim: " + " ".join(f"w{i}" for i in range(300))
        events = stream(
            s.url,
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 300,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        chunks = [
            e
            for e in events
            if isinstance(e, dict) and e["choices"] and e["choices"][0]["delta"].get("content")
        ]
        usage = [e for e in events if isinstance(e, dict) and not e["choices"]][0]["usage"]
        assert usage["completion_tokens"] == 300
        assert len(chunks) < 300 / 1.5
        info = httpx.get(s.url + "/server_info").json()
        assert info["internal_states"][0]["avg_spec_accept_length"] > 1.5
        assert info["speculative_algorithm"] == "NGRAM"
        assert info["enable_mixed_chunk"] is False


def test_served_and_analytic_agree(tmp_path: Path) -> None:
    """The same closed-loop workload, served at a time scale and evaluated analytically, gives
    the same output tok/s (served wall-clock rate / scale = virtual rate) within noise."""
    scale, conc, n_req, prompt_len, out_len = 4.0, 2, 4, 200, 128
    with running(tmp_path, *K1_FLAGS, scale=str(scale)) as s:

        async def client() -> tuple[float, int]:
            prompts = [" ".join(f"p{i}x{j}" for j in range(prompt_len)) for i in range(n_req)]
            todo = list(prompts)
            done = 0

            async def worker(c: httpx.AsyncClient) -> None:
                nonlocal done
                while todo:
                    p = todo.pop()
                    r = await c.post(
                        "/v1/completions",
                        json={"prompt": p, "max_tokens": out_len, "ignore_eos": True},
                    )
                    done += r.json()["usage"]["completion_tokens"]

            async with httpx.AsyncClient(base_url=s.url, timeout=60) as c:
                # warm-up (connections, first-call costs), as the benchmark client does
                await asyncio.gather(
                    *[
                        c.post("/v1/completions", json={"prompt": f"warm {i}", "max_tokens": 2})
                        for i in range(conc)
                    ]
                )
                t0 = time.perf_counter()
                await asyncio.gather(*[worker(c) for _ in range(conc)])
                return time.perf_counter() - t0, done

        wall, tokens = asyncio.run(client())
    served = tokens / wall / scale
    analytic = evaluate(AWQ, G4080, K1, closed_loop(conc, n_req, prompt_len, out_len))
    assert 0.5 < wall < 5.0
    assert served == pytest.approx(analytic["output_tok_s"], rel=0.10)


# --- command line and failures -------------------------------------------------------------


def test_unknown_flag_exits_2_like_sglang(tmp_path: Path) -> None:
    rc, out = run_to_exit(tmp_path, "--no-such-flag", "1")
    assert rc == 2 and "unrecognized arguments: --no-such-flag" in out


def test_startup_log_reads_like_sglang(sim: Sim) -> None:
    """The adapter's parser reads the simulator's startup log as a real launch's (C1 figures)."""
    from autotune.engines.sglang import parse_startup

    report = parse_startup(sim.text())
    assert report.simulated and report.ready
    # The simulated machine allocates a few percent off C1's 356245 (sim/allocator.py); with
    # its shares off (--sim-alloc-deviation 0) the pool is C1's exactly (test below).
    assert report.kv_pool_tokens == report.max_total_num_tokens == K1_ALLOCATED
    assert 0.95 < K1_ALLOCATED / 356245 < 1.0
    assert report.mamba_slots == 6 and report.mamba_ssm_gib == 0.98  # C1
    assert report.max_running_requests == 2 and report.context_len == 131072
    assert report.weights_gib == pytest.approx(16.80, rel=0.02)


def test_without_the_machines_shares_the_pool_is_c1s(tmp_path: Path) -> None:
    from autotune.engines.sglang import parse_startup

    with running(tmp_path, *K1_FLAGS, "--sim-alloc-deviation", "0") as s:
        report = parse_startup(s.text())
    assert report.kv_pool_tokens == 356245 and report.weights_gib == pytest.approx(16.80, abs=0.01)


def test_rejected_config_exits_with_sglang_error(tmp_path: Path) -> None:
    """The planner rejects a tiny mem_fraction_static: SGLang's error text, a non-zero exit, and
    the adapter classifies it as KV_CACHE_OOM (other kinds: tests/sim/test_startup.py)."""
    from autotune.engines.sglang import classify_failure

    rc, out = run_to_exit(tmp_path, "--mem-fraction-static", "0.3")
    assert rc == 1 and "Loaded weights leave no GPU memory for the KV cache" in out, out
    assert "SIMULATED" in out.splitlines()[0]
    assert classify_failure(out, rc, was_ready=False).cls.value == "kv_cache_oom"
