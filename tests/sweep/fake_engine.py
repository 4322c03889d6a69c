"""A misbehaving stand-in for SGLang, for the sweep's fault tests: a real process that takes
SGLang's command line (as the adapter builds it, through the spec's `engine.launcher`) and
speaks just enough of its HTTP API for the benchmark client.

What it does is chosen by `--chunked-prefill-size` (so one grid sweep over that field meets
every fault), or by FAKE_ENGINE_MODE:
    512   never_ready     /health stays 503, no ready line
    1024  exit_at_start   SGLang's KV-pool OOM text, exit 1
    2048  crash_mid       ready; dies (os._exit) in the middle of its 3rd streamed answer
    4096  garbage         ready; streams lines that are not JSON
    other ok              ready; well-formed OpenAI streams with usage
FAKE_ENGINE_MODE=port_taken prints uvicorn's "address already in use" and exits 1.
FAKE_TOKEN_DELAY_S slows each streamed token (default 0.002 s).
FAKE_ENGINE_VERSION: the release GET /server_info and GET /version report (unset: 404, as an
engine that states none).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

READY_LINE = "The server is fired up and ready to roll!"
MODES = {512: "never_ready", 1024: "exit_at_start", 2048: "crash_mid", 4096: "garbage"}


def log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {msg}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--model-path", "--model", dest="model_path", default="fake")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=30000)
    ap.add_argument("--chunked-prefill-size", type=int, default=None)
    a, _rest = ap.parse_known_args()
    mode = os.environ.get("FAKE_ENGINE_MODE") or MODES.get(a.chunked_prefill_size or 0, "ok")
    delay = float(os.environ.get("FAKE_TOKEN_DELAY_S", "0.002"))
    log(f"fake engine mode={mode}")
    if mode == "port_taken":
        print(
            f"ERROR:    [Errno 98] error while attempting to bind on address ('{a.host}', "
            f"{a.port}): address already in use",
            flush=True,
        )
        sys.exit(1)
    if mode == "exit_at_start":
        log(
            "Load weight end. elapsed=1.00 s, type=Qwen3_5ForCausalLM, avail mem=15.10 GB, "
            "mem usage=16.80 GB."
        )
        log("Scheduler hit an exception: Traceback (most recent call last):")
        print(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.5",
            flush=True,
        )
        sys.exit(1)

    ready = threading.Event()
    served = [0]
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _json(self, code: int, obj: object) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json(200 if ready.is_set() else 503, {})
            elif self.path in ("/server_info", "/version") and os.environ.get(
                "FAKE_ENGINE_VERSION"
            ):
                self._json(200, {"version": os.environ["FAKE_ENGINE_VERSION"]})
            elif self.path == "/v1/models":
                self._json(
                    200, {"object": "list", "data": [{"id": a.model_path, "object": "model"}]}
                )
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            req = json.loads(self.rfile.read(length) or b"{}")
            with lock:
                served[0] += 1
                nth = served[0]
            n = int(req.get("max_tokens") or 16)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def send(data: str) -> None:
                raw = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                self.wfile.flush()

            def chunk(delta: dict[str, str], finish: str | None = None) -> str:
                return json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion.chunk",
                        "model": a.model_path,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }
                )

            send(chunk({"role": "assistant", "content": ""}))
            for i in range(n):
                if mode == "crash_mid" and nth >= 3 and i == n // 2:
                    log("Scheduler hit an exception: fake crash")
                    os._exit(1)
                time.sleep(delay)
                if mode == "garbage":
                    send("{this is not json" + "!" * 8)
                else:
                    send(chunk({"content": " tok"}))
            send(chunk({}, "length"))
            prompt = len(json.dumps(req.get("messages") or req.get("prompt") or "")) // 4
            send(
                json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion.chunk",
                        "choices": [],
                        "usage": {
                            "prompt_tokens": prompt,
                            "completion_tokens": n,
                            "total_tokens": prompt + n,
                        },
                    }
                )
            )
            send("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    srv.daemon_threads = True
    log(f"listening on {a.host}:{a.port}")
    if mode != "never_ready":
        log("KV Cache is allocated. #tokens: 100000, K size: 1.53 GB, V size: 1.53 GB")
        log(
            "max_total_num_tokens=100000, chunked_prefill_size=2048, max_prefill_tokens=16384, "
            "max_running_requests=8, context_len=131072, available_gpu_mem=1.50 GB"
        )
        ready.set()
        log(READY_LINE)
    srv.serve_forever()


if __name__ == "__main__":
    main()
