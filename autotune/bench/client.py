"""One streamed OpenAI-compatible request, measured; and model discovery.

Works against SGLang, vLLM, llama-server and the simulator: it needs only ``data:`` SSE lines
carrying OpenAI chunks and, when the server sends it, the final usage chunk
(``stream_options.include_usage``).

Hot path (measured by benchmarks/client_speed.py): raw bytes are split on newlines by hand
(cheaper than ``aiter_lines``' incremental text decoder and line splitter), one ``perf_counter``
is taken per body piece httpx yields (h11 yields one per HTTP chunk, so usually per SSE event),
and each data line is decoded and parsed with ``JSONDecoder.raw_decode``.

Failures never raise out of `stream_request`: they come back as a RequestResult with ``ok=False``
and an ``error_kind``; every wait is bounded by httpx timeouts (connect, read between two reads)
and by an overall deadline per request.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from autotune.bench.results import ErrorKind, RequestResult
from autotune.errors import BenchmarkError

ENDPOINT_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
_ERROR_BODY_BYTES = 600
# A pooled keep-alive connection the server closed just as the request went out (llama-server
# closes one now and then after a streamed answer, though it advertised keep-alive) fails with
# "Server disconnected without sending a response": nothing reached the engine's scheduler, so
# the request is sent again on a fresh connection, as HTTP clients do for stale connections.
STALE_CONNECTION_RETRIES = 2
# raw_decode on str: json.loads(bytes) spends half its time detecting the encoding (measured
# 8.1 vs 3.3 us per 250-byte chunk on the 2-core dev box).
_DECODER = json.JSONDecoder()


@dataclass(slots=True)
class RequestSpec:
    """What to send: the full URL, the JSON body, and where the result belongs."""

    url: str
    body: dict[str, Any]
    estimated_prompt_tokens: int
    index: int = 0
    repeat: int = 0
    point: str = ""
    turn: int | None = None
    session: int | None = None


@dataclass(slots=True)
class _State:
    """What a stream has delivered so far; kept when the stream fails half-way."""

    t0: float = 0.0
    times: list[float] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    usage: Any = None
    finish: str | None = None
    done: bool = False
    status: int | None = None
    events: int = 0


class _StreamError(Exception):
    def __init__(self, kind: ErrorKind, message: str):
        self.kind: ErrorKind = kind
        super().__init__(message)


def _snippet(data: bytes | str, limit: int = 160) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _chunk_error(obj: dict[str, Any]) -> str | None:
    """The message of an error object sent inside the stream (SGLang/vLLM style), if any."""
    err = obj.get("error")
    if err is None and obj.get("object") == "error":
        err = obj
    if err is None:
        return None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


async def _consume(
    client: httpx.AsyncClient,
    spec: RequestSpec,
    st: _State,
    timeout: httpx.Timeout,
    collect_text: bool,
) -> None:
    perf = time.perf_counter
    st.t0 = perf()
    async with client.stream("POST", spec.url, json=spec.body, timeout=timeout) as resp:
        st.status = resp.status_code
        await _check_response(resp)
        buf = b""
        async for data in resp.aiter_bytes():
            now = perf()
            if buf:
                data = buf + data
            lines = data.split(b"\n")
            buf = lines.pop()
            for line in lines:
                # not blank separators, ": keep-alive" comments, event:/id: fields
                if line.startswith(b"data:"):
                    _data_line(st, line[5:].strip(), now, collect_text)
        rest = buf.strip()
        if rest.startswith(b"data:") and rest[5:].strip() == b"[DONE]":
            st.done = True  # the last line lacked its newline; harmless
        elif rest:
            raise _StreamError("truncated", f"stream ended inside a line: {_snippet(rest)}")


async def _check_response(resp: httpx.Response) -> None:
    """_StreamError for an answer that is no event stream: an HTTP error status, or JSON."""
    if resp.status_code != 200:
        body = b""
        async for piece in resp.aiter_bytes():
            body += piece
            if len(body) >= _ERROR_BODY_BYTES:
                break
        raise _StreamError("http_status", f"HTTP {resp.status_code}: {_snippet(body)}")
    ctype = resp.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        body = await resp.aread()
        raise _StreamError(
            "malformed", f"expected text/event-stream, got {ctype}: {_snippet(body)}"
        )


def _data_line(st: _State, payload: bytes, now: float, collect_text: bool) -> None:
    """The payload of one `data:` line, received at `now`: [DONE], or an OpenAI chunk (its
    content a token's time, its finish reason, usage or error)."""
    if not payload:
        return
    if payload == b"[DONE]":
        st.done = True
        return
    try:
        text = payload.decode()
        obj, end = _DECODER.raw_decode(text)
        if end != len(text):
            raise ValueError("trailing data")
    except ValueError:  # also UnicodeDecodeError
        raise _StreamError("malformed", f"non-JSON data line: {_snippet(payload)}") from None
    if type(obj) is not dict:
        raise _StreamError("malformed", f"data line is not an object: {_snippet(payload)}")
    st.events += 1
    try:
        choices = obj.get("choices")
        if choices:
            ch = choices[0]
            delta = ch.get("delta")
            if delta is not None:
                content = delta.get("content")
                # Reasoning is output too (P11: with a reasoning parser the thinking moves
                # from content to reasoning_content).
                if content or delta.get("reasoning_content") or delta.get("reasoning"):
                    st.times.append(now)
                    if collect_text and type(content) is str:
                        st.parts.append(content)
            else:
                content = ch.get("text")
                if content:
                    st.times.append(now)
                    if collect_text and type(content) is str:
                        st.parts.append(content)
            finish = ch.get("finish_reason")
            if finish:
                st.finish = finish if type(finish) is str else json.dumps(finish)
        else:
            message = _chunk_error(obj)
            if message is not None:
                raise _StreamError("server_error", f"error in stream: {_snippet(message)}")
        usage = obj.get("usage")
        if usage:
            st.usage = usage
    except (AttributeError, TypeError, IndexError) as exc:
        raise _StreamError(
            "malformed", f"not an OpenAI chunk ({exc}): {_snippet(payload)}"
        ) from None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage(st: _State) -> tuple[int | None, int | None, int | None]:
    """(completion, prompt, cached) tokens of the usage chunk; None where it gives none."""
    usage = st.usage if isinstance(st.usage, dict) else {}
    completion = _int_or_none(usage.get("completion_tokens"))
    prompt = _int_or_none(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _int_or_none(details.get("cached_tokens")) if isinstance(details, dict) else None
    return completion, prompt, cached


def _latencies(
    st: _State, end: float, output: int, tpc: float | None, *, ok: bool
) -> tuple[float | None, float | None, float | None, list[float]]:
    """(TTFT, end-to-end, TPOT, inter-token latencies) of a stream that ended at `end`; TPOT
    and ITL only for a request that succeeded."""
    chunks = len(st.times)
    ttft = st.times[0] - st.t0 if chunks else None
    e2e = end - st.t0 if st.t0 else None
    tpot = None
    itl: list[float] = []
    if ok and ttft is not None and e2e is not None:
        if output > 1:
            tpot = (e2e - ttft) / (output - 1)
        per = tpc if tpc else 1.0
        times = st.times
        itl = [(times[i] - times[i - 1]) / per for i in range(1, chunks)]
    return ttft, e2e, tpot, itl


def _result(
    spec: RequestSpec,
    st: _State,
    start_s: float,
    end: float,
    error_kind: ErrorKind | None,
    error: str | None,
) -> RequestResult:
    chunks = len(st.times)
    completion, prompt, cached = _usage(st)

    if error_kind is None:
        if not st.done and st.finish is None:
            error_kind = "truncated"
            error = f"stream ended without finish_reason or [DONE] after {chunks} content chunks"
        elif chunks == 0:
            error_kind, error = "empty", f"no output token in {st.events} chunks"

    # P8: token counts from usage; chunk counts only when usage is missing (flagged).
    if completion is not None:
        output, source = completion, "usage"
        tpc = completion / chunks if chunks else None
    else:
        output, source, tpc = chunks, "chunks", None

    ttft, e2e, tpot, itl = _latencies(st, end, output, tpc, ok=error_kind is None)
    return RequestResult(
        index=spec.index,
        repeat=spec.repeat,
        point=spec.point,
        turn=spec.turn,
        session=spec.session,
        ok=error_kind is None,
        error=error,
        error_kind=error_kind,
        status_code=st.status,
        start_s=start_s,
        ttft_s=ttft,
        e2e_s=e2e if error_kind is None else None,
        tpot_s=tpot,
        itl_s=itl,
        prompt_tokens=prompt if prompt is not None else spec.estimated_prompt_tokens,
        prompt_tokens_estimated=spec.estimated_prompt_tokens,
        prompt_tokens_from_usage=prompt is not None,
        output_tokens=output,
        output_tokens_source=source,
        content_chunks=chunks,
        tokens_per_chunk=tpc,
        cached_tokens=cached,
        finish_reason=st.finish,
        done_seen=st.done,
    )


async def stream_request(
    client: httpx.AsyncClient,
    spec: RequestSpec,
    *,
    timeout: httpx.Timeout,
    deadline_s: float,
    phase_start: float | None = None,
    collect_text: bool = False,
) -> tuple[RequestResult, str]:
    """Send one streaming request and measure it; returns the result and (if `collect_text`)
    the generated content. Never raises for server or network failures."""
    st = _State()
    start = time.perf_counter()
    start_s = start - phase_start if phase_start is not None else 0.0
    kind: ErrorKind | None = None
    message: str | None = None
    try:
        async with asyncio.timeout(deadline_s):
            for attempt in range(STALE_CONNECTION_RETRIES + 1):
                try:
                    await _consume(client, spec, st, timeout, collect_text)
                    break
                except httpx.RemoteProtocolError:
                    if st.status is not None or attempt == STALE_CONNECTION_RETRIES:
                        raise
                    st = _State()  # no response at all: a stale connection, send it again
    except _StreamError as exc:
        kind, message = exc.kind, str(exc)
    except TimeoutError:
        kind, message = "timeout", f"no complete answer within {deadline_s:g} s"
    except httpx.ConnectTimeout as exc:
        kind, message = "connect", f"connect timeout ({timeout.connect} s): {exc}"
    except httpx.ConnectError as exc:
        kind, message = "connect", f"cannot connect to {spec.url}: {exc}"
    except httpx.ReadTimeout:
        kind = "read_timeout"
        message = f"no data for {timeout.read} s after {len(st.times)} content chunks"
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        kind = "protocol"
        message = (
            f"connection broke after {len(st.times)} content chunks: {type(exc).__name__}: {exc}"
        )
    except httpx.HTTPError as exc:
        kind, message = "transport", f"{type(exc).__name__}: {exc}"
    end = time.perf_counter()
    if not st.t0:
        st.t0 = start
    result = _result(spec, st, start_s, end, kind, message)
    return result, "".join(st.parts)


async def discover_model(client: httpx.AsyncClient, base_url: str, timeout_s: float = 30.0) -> str:
    """The first model id served at ``{base_url}/v1/models``.

    Raises:
        BenchmarkError: the server cannot be reached or lists no model.
    """
    url = base_url.rstrip("/") + "/v1/models"
    try:
        resp = await client.get(url, timeout=httpx.Timeout(timeout_s))
    except httpx.HTTPError as exc:
        raise BenchmarkError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        raise BenchmarkError(
            f"GET {url} answered HTTP {resp.status_code}: {_snippet(resp.content)}; "
            "pass the model name with --model"
        )
    try:
        data = resp.json()["data"]
        return str(data[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise BenchmarkError(
            f"GET {url} did not list a model (expected {{'data': [{{'id': ...}}]}}), got "
            f"{_snippet(resp.content)}; pass the model name with --model"
        ) from exc
