"""A scriptable OpenAI-compatible server for httpx.MockTransport (no sockets)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

SSE = {"content-type": "text/event-stream"}


def event(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def chat_chunk(content: str | None = None, finish: str | None = None, **delta: Any) -> bytes:
    d: dict[str, Any] = dict(delta)
    if content is not None:
        d["content"] = content
    choice = {"index": 0, "delta": d, "finish_reason": finish}
    return event({"id": "c", "object": "chat.completion.chunk", "choices": [choice]})


def usage_chunk(prompt: int, completion: int, cached: int | None = None) -> bytes:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return event({"id": "c", "choices": [], "usage": usage})


@dataclass
class FakeServer:
    """Streams `max_tokens` tokens per request, SGLang-style, with knobs for misbehaviour."""

    model: str = "mock-model"
    tokens_per_chunk: int = 1
    send_usage: bool = True
    cached_tokens: int | None = None
    chunk_delay: float = 0.0
    metrics_text: str | None = None  # None: /metrics answers 404
    fail: Callable[[int, dict[str, Any]], httpx.Response | None] | None = None
    answer_word: str = "ok"
    bodies: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.paths.append(path)
        if request.method == "GET" and path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": self.model}]})
        if request.method == "GET" and path == "/metrics":
            if self.metrics_text is None:
                return httpx.Response(404, json={"detail": "Not Found"})
            return httpx.Response(200, text=self.metrics_text)
        if request.method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            body = json.loads(request.content)
            index = len(self.bodies)
            self.bodies.append(body)
            if self.fail is not None:
                forced = self.fail(index, body)
                if forced is not None:
                    return forced
            return httpx.Response(200, headers=SSE, content=self.stream(body, path))
        return httpx.Response(404, json={"detail": "Not Found"})

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        if "messages" in body:
            return sum(len(m["content"].split()) for m in body["messages"])
        return len(body["prompt"].split())

    async def stream(self, body: dict[str, Any], path: str) -> AsyncIterator[bytes]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            chat = path.endswith("/chat/completions")
            n = int(body["max_tokens"])
            if chat:
                yield chat_chunk("", role="assistant")
            sent = 0
            while sent < n:
                k = min(self.tokens_per_chunk, n - sent)
                text = (" " + self.answer_word) * k
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
                if chat:
                    yield chat_chunk(text)
                else:
                    yield event({"choices": [{"index": 0, "text": text, "finish_reason": None}]})
                sent += k
            if chat:
                yield chat_chunk(None, finish="length")
            else:
                yield event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
            if self.send_usage:
                yield usage_chunk(self.prompt_tokens(body), n, self.cached_tokens)
            yield b"data: [DONE]\n\n"
        finally:
            self.in_flight -= 1


def scripted(*pieces: bytes | float | BaseException, status: int = 200) -> httpx.MockTransport:
    """A transport whose every POST streams `pieces` in order: bytes are sent, floats are
    sleeps, an exception is raised mid-stream. GET /v1/models answers 'mock-model'."""

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"data": [{"id": "mock-model"}]})

        async def gen() -> AsyncIterator[bytes]:
            for p in pieces:
                if isinstance(p, BaseException):
                    raise p
                if isinstance(p, float):
                    await asyncio.sleep(p)
                    continue
                yield p

        return httpx.Response(status, headers=SSE, content=gen())

    return httpx.MockTransport(handle)
