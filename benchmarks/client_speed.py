"""How many streamed chunks per second the benchmark client sustains (goal: >= 10,000/s).

A benchmark script, not a test. It sweeps concurrency, and for each level runs:

    autotune   the real client path: autotune.bench.run_scenario (throughput scenario),
               including result models and aggregation
    lines      a naive reference loop: httpx ``aiter_lines`` + ``json.loads`` per data line
    raw        a floor: httpx ``aiter_raw`` with no parsing at all (httpx + h11 cost only)

and prints chunks/s plus the CPU share of the client and of the server process, which says who
saturates first (a share near 100 % of one core is the bottleneck).

Servers:
    --spawn-local   benchmarks/_fast_sse_server.py (raw asyncio, never sleeps): the client's ceiling
    --spawn-sim     python -m autotune.sim --model-path tiny-dense --sim-gpu h200-141g
                    --sim-time-scale 0 --port P   (the simulated SGLang)
    --url URL       an existing server

    .venv/bin/python benchmarks/client_speed.py --spawn-local
    .venv/bin/python benchmarks/client_speed.py --spawn-local --profile 16
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import platform
import pstats
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autotune.bench import ThroughputScenario, run_scenario  # noqa: E402

# ------------------------------------------------------------------------------------ servers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Spawned:
    """A server started from an argv list in its own process group, stopped by that group."""

    def __init__(self, argv: list[str], port: int, log: Path):
        self.argv, self.port = argv, port
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT
        )
        self.url = f"http://127.0.0.1:{port}"

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"server not ready after {timeout_s} s; see {self.log.name}")

    def cpu_seconds(self) -> float:
        """CPU time of the server's process tree (the simulator may fork workers)."""
        total = 0.0
        try:
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            pass
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # P9: by our own group, never by name
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


def spawn_local(tokens_per_chunk: int) -> Spawned:
    port = _free_port()
    argv = [sys.executable, str(ROOT / "benchmarks" / "_fast_sse_server.py"), "--port", str(port)]
    argv += ["--tokens-per-chunk", str(tokens_per_chunk)]
    srv = Spawned(argv, port, Path("/tmp") / f"fast_sse_{port}.log")
    srv.wait_ready(20)
    return srv


def spawn_sim() -> Spawned:
    port = _free_port()
    argv = [sys.executable, "-m", "autotune.sim", "--model-path", "tiny-dense"]
    argv += ["--sim-gpu", "h200-141g", "--sim-time-scale", "0", "--port", str(port)]
    srv = Spawned(argv, port, Path("/tmp") / f"autotune_sim_{port}.log")
    srv.wait_ready(120)
    return srv


# ----------------------------------------------------------------------------------- variants

Runner = Callable[[httpx.AsyncClient, str, int, int, int], Awaitable[int]]


async def run_autotune(client: httpx.AsyncClient, url: str, conc: int, n: int, out: int) -> int:
    sc = ThroughputScenario(
        concurrency=conc, num_requests=n, output_len=out, prompt_len=16, warmup_requests=0
    )
    res = await run_scenario(client, url, sc, model=MODEL)
    if res.stats.errors:
        raise SystemExit(f"errors: {res.stats.error_examples}")
    return sum(r.content_chunks for r in res.requests)


def _body(out: int) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": out,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


async def _workers(conc: int, n: int, one: Callable[[], Awaitable[int]]) -> int:
    left = [n]
    total = [0]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            got = await one()  # not `total[0] += await one()`: that reads total before awaiting
            total[0] += got

    await asyncio.gather(*(worker() for _ in range(conc)))
    return total[0]


async def run_lines(client: httpx.AsyncClient, url: str, conc: int, n: int, out: int) -> int:
    async def one() -> int:
        chunks = 0
        async with client.stream("POST", url + "/v1/chat/completions", json=_body(out)) as r:
            async for line in r.aiter_lines():
                if line.startswith("data:") and line[5:].strip() != "[DONE]":
                    obj = json.loads(line[5:])
                    if obj.get("choices") and obj["choices"][0].get("delta", {}).get("content"):
                        chunks += 1
        return chunks

    return await _workers(conc, n, one)


async def run_raw(client: httpx.AsyncClient, url: str, conc: int, n: int, out: int) -> int:
    async def one() -> int:
        pieces = 0
        async with client.stream("POST", url + "/v1/chat/completions", json=_body(out)) as r:
            async for _ in r.aiter_raw():
                pieces += 1
        return pieces  # body pieces (one per HTTP chunk): N content + role, finish, usage, DONE

    return await _workers(conc, n, one)


VARIANTS: dict[str, Runner] = {"autotune": run_autotune, "lines": run_lines, "raw": run_raw}
MODEL = "default"


def measure(
    variant: str, url: str, conc: int, n: int, out: int, srv: Spawned | None
) -> dict[str, float]:
    async def go() -> tuple[int, float, float]:
        limits = httpx.Limits(max_connections=conc + 4, max_keepalive_connections=conc + 4)
        async with httpx.AsyncClient(limits=limits, trust_env=False, timeout=60) as client:
            await VARIANTS[variant](client, url, conc, min(conc, n), 4)  # open connections
            cpu0, t0 = time.process_time(), time.perf_counter()
            chunks = await VARIANTS[variant](client, url, conc, n, out)
            return chunks, time.perf_counter() - t0, time.process_time() - cpu0

    srv_cpu0 = srv.cpu_seconds() if srv else 0.0
    sys0 = psutil.cpu_times()
    chunks, wall, cpu = asyncio.run(go())
    sys1 = psutil.cpu_times()
    srv_cpu = (srv.cpu_seconds() - srv_cpu0) if srv else float("nan")
    idle = (sys1.idle + sys1.iowait) - (sys0.idle + sys0.iowait)
    total = sum(sys1) - sum(sys0)
    return {
        "chunks": chunks,
        "wall_s": wall,
        "chunks_per_s": chunks / wall,
        "client_cpu": cpu / wall,
        # Chunks per second of client CPU: the client's own cost, robust to other load.
        "per_cpu_s": chunks / cpu if cpu > 0 else float("nan"),
        "server_cpu": srv_cpu / wall,
        "machine_busy": 1.0 - idle / total if total > 0 else float("nan"),
    }


def profile(url: str, conc: int, n: int, out: int) -> None:
    prof = cProfile.Profile()

    async def go() -> None:
        limits = httpx.Limits(max_connections=conc + 4, max_keepalive_connections=conc + 4)
        async with httpx.AsyncClient(limits=limits, trust_env=False) as client:
            prof.enable()
            await run_autotune(client, url, conc, n, out)
            prof.disable()

    asyncio.run(go())
    stats = pstats.Stats(prof)
    groups: dict[str, float] = {}
    total = 0.0
    for (filename, _, func), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        total += tottime
        if "/h11/" in filename:
            g = "h11 (HTTP/1.1 parsing)"
        elif "/httpcore/" in filename or "/httpx/" in filename or "/anyio/" in filename:
            g = "httpx + httpcore + anyio"
        elif "json" in filename or func in ("raw_decode",):
            g = "json"
        elif "autotune/bench/client.py" in filename:
            g = "autotune client loop"
        elif "autotune" in filename:
            g = "autotune aggregation"
        elif "pydantic" in filename:
            g = "pydantic"
        elif "asyncio" in filename or "selectors" in filename:
            g = "asyncio event loop"
        else:
            g = f"other ({func})" if filename == "~" else "other"
        groups[g] = groups.get(g, 0.0) + tottime
    print(f"\nprofile at concurrency {conc} (share of {total:.2f} s profiled CPU):")
    for g, t in sorted(groups.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {g:40s} {100 * t / total:5.1f} %")


def main() -> None:
    global MODEL
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="an existing OpenAI-compatible server")
    where.add_argument("--spawn-local", action="store_true", help="start _fast_sse_server.py")
    where.add_argument("--spawn-sim", action="store_true", help="start python -m autotune.sim")
    ap.add_argument("--concurrency", default="1,4,16,64", help="comma-separated levels")
    ap.add_argument("--output-len", type=int, default=2000, help="tokens per request")
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument(
        "--min-chunks", type=int, default=40_000, help="at least this many chunks per run"
    )
    ap.add_argument("--runs", type=int, default=3, help="runs per (variant, concurrency)")
    ap.add_argument("--variants", default="autotune,lines,raw")
    ap.add_argument("--tokens-per-chunk", type=int, default=1, help="--spawn-local only")
    ap.add_argument("--profile", type=int, metavar="CONC", help="also profile at this level")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    levels = [int(c) for c in args.concurrency.split(",")]
    variants = [v.strip() for v in args.variants.split(",")]
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r}; valid: {', '.join(VARIANTS)}")
    srv: Spawned | None = None
    if args.spawn_local:
        srv = spawn_local(args.tokens_per_chunk)
    elif args.spawn_sim:
        srv = spawn_sim()
    url = srv.url if srv else args.url.rstrip("/")
    try:
        MODEL = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
        load = os.getloadavg()
        print(
            f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, httpx {httpx.__version__}; server: "
            f"{'spawned ' + ' '.join(srv.argv[1:]) if srv else url}; model {MODEL}; "
            f"{args.output_len} tokens/request, >= {args.requests_per_stream} requests per stream "
            f"and >= {args.min_chunks} chunks per run, "
            f"median of {args.runs} runs; load average before {load[0]:.2f}"
        )
        rows = []
        print(f"\n{'conc':>5} {'variant':>9} {'chunks/s':>10} {'(min-max)':>17} "
              f"{'client CPU':>10} {'server CPU':>10} {'machine busy':>12} "
              f"{'chunks/client-CPU-s':>19}")  # fmt: skip
        for conc in levels:
            for v in variants:
                n = max(conc * args.requests_per_stream, -(-args.min_chunks // args.output_len))
                runs = [measure(v, url, conc, n, args.output_len, srv) for _ in range(args.runs)]
                rates = [r["chunks_per_s"] for r in runs]
                med = statistics.median(rates)
                row = {
                    "concurrency": conc,
                    "variant": v,
                    "chunks_per_s": med,
                    "min": min(rates),
                    "max": max(rates),
                    "client_cpu": statistics.median(r["client_cpu"] for r in runs),
                    "server_cpu": statistics.median(r["server_cpu"] for r in runs),
                    "machine_busy": statistics.median(r["machine_busy"] for r in runs),
                    "per_cpu_s": statistics.median(r["per_cpu_s"] for r in runs),
                }
                rows.append(row)
                print(
                    f"{conc:>5} {v:>9} {med:>10,.0f} {row['min']:>8,.0f}-{row['max']:<8,.0f} "
                    f"{100 * row['client_cpu']:>9.0f}% {100 * row['server_cpu']:>9.0f}% "
                    f"{100 * row['machine_busy']:>11.0f}% {row['per_cpu_s']:>19,.0f}"
                )
        auto = [r for r in rows if r["variant"] == "autotune"]
        if auto:
            best = max(auto, key=lambda r: r["chunks_per_s"])
            if best["client_cpu"] >= 0.85:
                bound = "client CPU (one core: asyncio is single-threaded)"
            elif best["server_cpu"] >= 0.85:
                bound = "server CPU"
            elif best["machine_busy"] >= 0.85:
                bound = "machine CPU (all cores busy: client, server and other processes)"
            else:
                bound = "neither CPU (latency-bound)"
            print(
                f"\nautotune client: peak {best['chunks_per_s']:,.0f} chunks/s at concurrency "
                f"{best['concurrency']}; bound by {bound}; goal 10,000: "
                f"{'met' if best['chunks_per_s'] >= 10_000 else 'NOT met'}; "
                f"client cost {min(r['per_cpu_s'] for r in auto):,.0f}-"
                f"{max(r['per_cpu_s'] for r in auto):,.0f} chunks per CPU-second"
            )
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        if args.profile:
            profile(url, args.profile, args.profile * args.requests_per_stream, args.output_len)
        if args.json:
            print(json.dumps(rows, indent=2))
    finally:
        if srv:
            srv.stop()


if __name__ == "__main__":
    main()
