"""One streamed request: measurements and every way a server can misbehave."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import httpx
import pytest

from autotune.bench.client import RequestSpec, discover_model, stream_request
from autotune.bench.results import RequestResult
from autotune.errors import BenchmarkError
from tests.bench.fakes import SSE, FakeServer, chat_chunk, event, scripted, usage_chunk

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def one(
    transport: httpx.AsyncBaseTransport,
    *,
    path: str = "/v1/chat/completions",
    max_tokens: int = 4,
    deadline: float = 5.0,
    read: float = 5.0,
    base: str = "http://test",
    collect: bool = False,
) -> tuple[RequestResult, str]:
    body: dict[str, Any] = {"model": "m", "max_tokens": max_tokens, "stream": True}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "one two three"}]
    else:
        body["prompt"] = "one two three"
    spec = RequestSpec(url=base + path, body=body, estimated_prompt_tokens=7, index=3, point="p")
    async with httpx.AsyncClient(transport=transport) as client:
        return await stream_request(
            client,
            spec,
            timeout=httpx.Timeout(read, connect=1.0),
            deadline_s=deadline,
            collect_text=collect,
        )


async def test_normal_stream_with_usage() -> None:
    srv = FakeServer(cached_tokens=2, chunk_delay=0.01)
    res, text = await one(srv.transport(), max_tokens=5, collect=True)
    assert res.ok and res.error is None
    assert res.output_tokens == 5 and res.output_tokens_source == "usage"
    assert res.content_chunks == 5 and res.tokens_per_chunk == 1.0
    assert res.prompt_tokens == 3 and res.prompt_tokens_from_usage
    assert res.prompt_tokens_estimated == 7
    assert res.cached_tokens == 2
    assert res.finish_reason == "length" and res.done_seen
    assert res.ttft_s is not None and res.e2e_s is not None and res.tpot_s is not None
    assert 0 < res.ttft_s < res.e2e_s
    assert res.tpot_s == pytest.approx((res.e2e_s - res.ttft_s) / 4)
    assert len(res.itl_s) == 4 and min(res.itl_s) >= 0.009  # 10 ms between chunks
    assert text == " ok" * 5
    assert (res.index, res.point) == (3, "p")
    # The request asked for nothing special: the body is the caller's.
    assert srv.bodies[0]["max_tokens"] == 5


async def test_speculative_chunks_carry_several_tokens_usage_wins() -> None:
    # P8: 10 tokens in 4 chunks (3+3+3+1); speed must come from usage, not chunk counts.
    srv = FakeServer(tokens_per_chunk=3, chunk_delay=0.02)
    res, _ = await one(srv.transport(), max_tokens=10)
    assert res.ok
    assert res.content_chunks == 4
    assert res.output_tokens == 10 and res.output_tokens_source == "usage"
    assert res.tokens_per_chunk == pytest.approx(2.5)
    assert res.tpot_s == pytest.approx((res.e2e_s - res.ttft_s) / 9)  # type: ignore[operator]
    # ITL is the chunk gap spread over the tokens per chunk: >= 20 ms / 2.5.
    assert len(res.itl_s) == 3 and min(res.itl_s) >= 0.02 / 2.5 * 0.95


async def test_missing_usage_falls_back_to_chunks_and_flags_it() -> None:
    srv = FakeServer(send_usage=False, tokens_per_chunk=2)
    res, _ = await one(srv.transport(), max_tokens=6)
    assert res.ok
    assert res.output_tokens == 3 and res.output_tokens_source == "chunks"
    assert res.tokens_per_chunk is None
    assert res.prompt_tokens == 7 and not res.prompt_tokens_from_usage


async def test_completions_endpoint_text_field() -> None:
    srv = FakeServer()
    res, text = await one(srv.transport(), path="/v1/completions", max_tokens=3, collect=True)
    assert res.ok and res.content_chunks == 3 and res.output_tokens == 3
    assert text == " ok ok ok"


async def test_reasoning_content_counts_as_output_comments_and_crlf_ignored() -> None:
    transport = scripted(
        b": keep-alive\r\n\r\n",
        chat_chunk("", role="assistant"),
        b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}\r\n\r\n',
        chat_chunk("yes"),
        chat_chunk(None, finish="stop"),
        usage_chunk(3, 2),
        b"data: [DONE]",  # no trailing newline: tolerated
    )
    res, text = await one(transport, collect=True)
    assert res.ok, res.error
    assert res.content_chunks == 2 and res.output_tokens == 2 and res.done_seen
    assert text == "yes"  # the next agent turn carries the answer, not the reasoning


async def test_truncated_stream_without_done_or_finish() -> None:
    transport = scripted(chat_chunk("", role="assistant"), chat_chunk("a"), chat_chunk("b"))
    res, _ = await one(transport)
    assert not res.ok and res.error_kind == "truncated"
    assert "2 content chunks" in (res.error or "")
    assert res.content_chunks == 2 and res.ttft_s is not None


async def test_finish_without_done_is_ok_but_flagged() -> None:
    transport = scripted(chat_chunk("a"), chat_chunk(None, finish="length"), usage_chunk(3, 1))
    res, _ = await one(transport, max_tokens=1)
    assert res.ok and not res.done_seen


async def test_stream_cut_inside_a_line() -> None:
    transport = scripted(chat_chunk("a"), b'data: {"choices":[{"ind')
    res, _ = await one(transport)
    assert not res.ok and res.error_kind == "truncated"
    assert "inside a line" in (res.error or "")


async def test_non_json_data_line() -> None:
    transport = scripted(chat_chunk("a"), b"data: this is not json\n\n", b"data: [DONE]\n\n")
    res, _ = await one(transport)
    assert not res.ok and res.error_kind == "malformed"
    assert "this is not json" in (res.error or "")


@pytest.mark.parametrize(
    "line",
    [b'data: {"choices": ["text"]}\n\n', b'data: {"choices": 3}\n\n', b"data: [1, 2]\n\n"],
)
async def test_json_that_is_not_an_openai_chunk(line: bytes) -> None:
    res, _ = await one(scripted(chat_chunk("a"), line, b"data: [DONE]\n\n"))
    assert not res.ok and res.error_kind == "malformed"


async def test_odd_but_valid_fields_do_not_break_the_result() -> None:
    transport = scripted(
        b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":{"type":"length"}}],'
        b'"usage":{"prompt_tokens":"many","completion_tokens":1}}\n\n',
        b"data: [DONE]\n\n",
    )
    res, _ = await one(transport)
    assert res.ok and res.finish_reason == '{"type": "length"}'
    assert res.prompt_tokens == 7 and not res.prompt_tokens_from_usage  # "many" is ignored


async def test_error_object_inside_stream() -> None:
    err = event({"error": {"message": "prompt too long", "code": 400}})
    res, _ = await one(scripted(err, b"data: [DONE]\n\n"))
    assert not res.ok and res.error_kind == "server_error"
    assert "prompt too long" in (res.error or "")


async def test_http_500_records_status_and_body() -> None:
    async def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="Internal Server Error: scheduler died")

    res, _ = await one(httpx.MockTransport(handle))
    assert not res.ok and res.error_kind == "http_status" and res.status_code == 500
    assert "scheduler died" in (res.error or "")
    assert res.ttft_s is None and res.e2e_s is None


async def test_json_instead_of_event_stream() -> None:
    async def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"message": {"content": "hi"}}]})

    res, _ = await one(httpx.MockTransport(handle))
    assert not res.ok and res.error_kind == "malformed"
    assert "text/event-stream" in (res.error or "")


async def test_mid_stream_disconnect() -> None:
    transport = scripted(
        chat_chunk("a"), chat_chunk("b"), httpx.RemoteProtocolError("peer closed connection")
    )
    res, _ = await one(transport)
    assert not res.ok and res.error_kind == "protocol"
    assert "after 2 content chunks" in (res.error or "")
    assert "peer closed" in (res.error or "")


async def test_stalled_stream_hits_the_request_deadline() -> None:
    transport = scripted(chat_chunk("a"), 30.0, chat_chunk("b"))
    t0 = time.perf_counter()
    res, _ = await one(transport, deadline=0.3)
    assert time.perf_counter() - t0 < 2.0
    assert not res.ok and res.error_kind == "timeout"
    assert res.content_chunks == 1


async def _stalling_server() -> tuple[asyncio.Server, int]:
    """A real socket server that sends headers and one chunk, then says nothing."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        ev = chat_chunk("a")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(ev), ev)
        )
        await writer.drain()
        try:
            await asyncio.sleep(30)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_silent_server_hits_the_read_timeout() -> None:
    server, port = await _stalling_server()
    try:
        t0 = time.perf_counter()
        res, _ = await one(
            httpx.AsyncHTTPTransport(), base=f"http://127.0.0.1:{port}", read=0.3, deadline=5
        )
        assert time.perf_counter() - t0 < 2.0
    finally:
        server.close()
    assert not res.ok and res.error_kind == "read_timeout"
    assert res.content_chunks == 1 and "no data for 0.3 s" in (res.error or "")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_connection_refused() -> None:
    res, _ = await one(httpx.AsyncHTTPTransport(), base=f"http://127.0.0.1:{_closed_port()}")
    assert not res.ok and res.error_kind == "connect"
    assert "cannot connect" in (res.error or "")


async def test_empty_stream_is_an_error() -> None:
    transport = scripted(chat_chunk("", role="assistant"), chat_chunk(None, finish="stop"))
    res, _ = await one(transport)
    assert not res.ok and res.error_kind == "empty"


async def test_discover_model() -> None:
    srv = FakeServer(model="org/qwen")
    async with httpx.AsyncClient(transport=srv.transport()) as client:
        assert await discover_model(client, "http://test") == "org/qwen"

    async def not_found(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="no such route")

    async def garbage(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=SSE, text="[]")

    for handler, needle in ((not_found, "HTTP 404"), (garbage, "did not list a model")):
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            with pytest.raises(BenchmarkError, match=needle):
                await discover_model(client, "http://test")
    async with httpx.AsyncClient() as client:
        with pytest.raises(BenchmarkError, match="cannot reach"):
            await discover_model(client, f"http://127.0.0.1:{_closed_port()}", timeout_s=2)
