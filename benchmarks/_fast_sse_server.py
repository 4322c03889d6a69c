"""A minimal, fast OpenAI-compatible streaming server for measuring the benchmark client.

Raw asyncio (no framework) so that the server costs less CPU per chunk than the client it
measures. It speaks just enough HTTP/1.1 (keep-alive, Content-Length request bodies, chunked
responses) and streams chunks shaped like SGLang's OpenAI streaming API: a role chunk (chat),
``max_tokens`` content chunks (or fewer with ``--tokens-per-chunk``), a finish chunk, a usage
chunk with ``choices: []``, then ``data: [DONE]``. It never sleeps between chunks.

    python benchmarks/_fast_sse_server.py --port 0     # prints "PORT <n>" once listening
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

_MODEL = "fast-sse"
_METRICS = b"""# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="fast-sse"} %d
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="fast-sse"} %d
"""


def _frame(payload: bytes) -> bytes:
    """One SSE event as one HTTP chunk."""
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


class Server:
    def __init__(self, tokens_per_chunk: int, metrics: bool):
        self.tpc = tokens_per_chunk
        self.metrics = metrics
        self.prompt_total = 0
        self.gen_total = 0
        base = {"id": "x", "created": int(time.time()), "model": _MODEL}
        chat = dict(base, object="chat.completion.chunk")
        word = " tok" * tokens_per_chunk
        self.chat_role = _frame(
            json.dumps(
                dict(chat, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}}])
            ).encode()
        )
        self.chat_content = _frame(
            json.dumps(
                dict(
                    chat,
                    choices=[
                        {
                            "index": 0,
                            "delta": {"role": None, "content": word, "reasoning_content": None},
                            "logprobs": None,
                            "finish_reason": None,
                            "matched_stop": None,
                        }
                    ],
                    usage=None,
                )
            ).encode()
        )
        self.chat_finish = _frame(
            json.dumps(
                dict(
                    chat,
                    choices=[
                        {"index": 0, "delta": {}, "finish_reason": "length", "matched_stop": None}
                    ],
                )
            ).encode()
        )
        comp = dict(base, object="text_completion")
        self.comp_content = _frame(
            json.dumps(
                dict(comp, choices=[{"index": 0, "text": word, "finish_reason": None}])
            ).encode()
        )
        self.comp_finish = _frame(
            json.dumps(
                dict(comp, choices=[{"index": 0, "text": "", "finish_reason": "length"}])
            ).encode()
        )
        self.done = _frame(b"[DONE]") + b"0\r\n\r\n"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    if line[:15].lower() == "content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length) if length else b""
                await self.route(method, path, body, writer)
        except ConnectionError:
            return
        finally:
            writer.close()

    def _send(self, writer: asyncio.StreamWriter, status: str, ctype: str, data: bytes) -> None:
        writer.write(
            b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (status.encode(), ctype.encode(), len(data), data)
        )

    async def route(
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter
    ) -> None:
        if method == "GET" and path == "/v1/models":
            data = json.dumps({"object": "list", "data": [{"id": _MODEL, "object": "model"}]})
            self._send(writer, "200 OK", "application/json", data.encode())
        elif method == "GET" and path == "/health":
            self._send(writer, "200 OK", "text/plain", b"")
        elif method == "GET" and path == "/metrics" and self.metrics:
            text = _METRICS % (self.prompt_total, self.gen_total)
            self._send(writer, "200 OK", "text/plain; version=0.0.4", text)
        elif method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            await self.stream(json.loads(body), path.endswith("chat/completions"), writer)
            return
        else:
            self._send(writer, "404 Not Found", "application/json", b'{"detail":"Not Found"}')
        await writer.drain()

    async def stream(self, req: dict[str, Any], chat: bool, writer: asyncio.StreamWriter) -> None:
        max_tokens = int(req.get("max_tokens", 16))
        if chat:
            prompt = sum(len(m.get("content", "").split()) for m in req.get("messages", []))
        else:
            prompt = len(str(req.get("prompt", "")).split())
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
        )
        if chat:
            writer.write(self.chat_role)
        content = self.chat_content if chat else self.comp_content
        n_chunks = -(-max_tokens // self.tpc)
        for i in range(n_chunks):
            writer.write(content)
            if i % 32 == 31:
                await writer.drain()  # let other connections and the client's reads interleave
        writer.write(self.chat_finish if chat else self.comp_finish)
        usage = {"prompt_tokens": prompt, "completion_tokens": max_tokens}
        usage["total_tokens"] = prompt + max_tokens
        tail = {"id": "x", "model": _MODEL, "choices": [], "usage": usage}
        writer.write(_frame(json.dumps(tail).encode()))
        writer.write(self.done)
        await writer.drain()
        self.prompt_total += prompt
        self.gen_total += max_tokens


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: pick a free port")
    ap.add_argument("--tokens-per-chunk", type=int, default=1, help=">1 imitates speculation")
    ap.add_argument("--metrics", action="store_true", help="serve /metrics (else 404)")
    args = ap.parse_args()
    srv = Server(args.tokens_per_chunk, args.metrics)
    server = await asyncio.start_server(srv.handle, args.host, args.port)
    port = server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
