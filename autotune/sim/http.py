"""A small asyncio HTTP/1.1 server on h11 for the simulated engine.

No ASGI framework: the server must stream well over 10,000 SSE chunks a second on two cores while
the benchmark client runs beside it, so handlers are plain synchronous callbacks, and the engine
loop writes a request's chunks straight to its connection. h11 does the HTTP parsing and framing
(keep-alive, chunked transfer encoding, Content-Length bodies).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import h11

MAX_BODY_BYTES = 256 * 2**20  # a 128K-token prompt is a few MB


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes = b""


Dispatch = Callable[[Request, "Connection"], None]


class Connection(asyncio.Protocol):
    """One client connection; one request at a time (no pipelining overlap)."""

    def __init__(self, dispatch: Dispatch, dirty: set[Connection] | None = None):
        self.dispatch = dispatch
        # Stream data is buffered and flushed by the engine after each step (or burst of steps):
        # one h11 event and one socket write per connection, however many chunks it carries.
        self.dirty = dirty if dirty is not None else set()
        self._pending: list[bytes] = []
        self._http11 = True
        self._chunked = False
        self.h11 = h11.Connection(h11.SERVER)
        self.transport: asyncio.Transport | None = None
        self.request: Request | None = None
        self.body = bytearray()
        self.busy = False  # a response is owed for the current request
        self.closed = False
        self.on_close: Callable[[], None] | None = None  # the current request's abort hook

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        hook, self.on_close = self.on_close, None
        if hook is not None:
            hook()
        self._pending.clear()

    def data_received(self, data: bytes) -> None:
        try:
            self.h11.receive_data(data)
        except h11.RemoteProtocolError:
            self._bad_request("malformed HTTP")
            return
        self._process()

    def eof_received(self) -> bool | None:
        with contextlib.suppress(h11.RemoteProtocolError):  # EOF mid-request: closing anyway
            self.h11.receive_data(b"")
        if not self.busy:
            self._close()
        return None

    # -- request assembly ----------------------------------------------------------------------

    def _process(self) -> None:
        while not self.busy and not self.closed:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._bad_request(f"malformed HTTP: {exc}")
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._http11 = event.http_version == b"1.1"
                target = event.target.decode("latin-1")
                path, _, query = target.partition("?")
                self.request = Request(
                    event.method.decode("ascii").upper(),
                    path,
                    query,
                    {k.decode("latin-1"): v.decode("latin-1") for k, v in event.headers},
                )
                self.body = bytearray()
            elif isinstance(event, h11.Data):
                self.body += event.data
                if len(self.body) > MAX_BODY_BYTES:
                    self._bad_request(f"request body over {MAX_BODY_BYTES} bytes", status=413)
                    return
            elif isinstance(event, h11.EndOfMessage):
                assert self.request is not None
                self.request.body = bytes(self.body)
                self.body = bytearray()
                self.busy = True
                req, self.request = self.request, None
                try:
                    self.dispatch(req, self)
                except Exception as exc:  # a handler bug must not take the server down
                    if self.busy and self.h11.our_state is h11.SEND_RESPONSE:
                        from autotune.sim.api import error_body

                        self.respond(500, error_body(f"internal error: {exc!r}", 500))
                    else:
                        self._close()
                return
            elif isinstance(event, h11.ConnectionClosed):
                self._close()
                return

    def _bad_request(self, message: str, status: int = 400) -> None:
        from autotune.sim.api import error_body

        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            # The peer may already have broken the protocol past answering: close regardless.
            with contextlib.suppress(h11.LocalProtocolError):
                self._send(
                    h11.Response(
                        status_code=status,
                        headers=[
                            ("content-type", "application/json"),
                            ("connection", "close"),
                            ("content-length", str(len(error_body(message, status)))),
                        ],
                    )
                )
                self._send(h11.Data(data=error_body(message, status)))
                self._send(h11.EndOfMessage())
        self._close()

    # -- responses -----------------------------------------------------------------------------

    def _send(self, event: h11.Event) -> None:
        data = self.h11.send(event)
        if data and self.transport is not None and not self.closed:
            self.transport.write(data)

    def respond(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        if self.closed or not self.busy:
            return
        self.flush()
        hdrs = [
            ("content-type", content_type),
            ("content-length", str(len(body))),
            *(headers or []),
        ]
        self._send(h11.Response(status_code=status, headers=hdrs))
        if body:
            self._send(h11.Data(data=body))
        self._send(h11.EndOfMessage())
        self._cycle_done()

    def start_stream(self, status: int = 200, content_type: str = "text/event-stream") -> None:
        # HTTP/1.1 without a Content-Length: h11 frames the body with chunked encoding
        self._chunked = self._http11
        self._send(
            h11.Response(
                status_code=status,
                headers=[
                    ("content-type", content_type),
                    ("cache-control", "no-cache"),
                    ("x-accel-buffering", "no"),
                ],
            )
        )

    def write(self, data: bytes) -> None:
        """Queue stream data; `flush` (called by the engine) sends it."""
        if not self.closed and data:
            if not self._pending:
                self.dirty.add(self)
            self._pending.append(data)

    def flush(self) -> None:
        if not self._pending or self.closed:
            return
        if self._chunked and self.transport is not None:
            # One HTTP chunk per SSE event, as SGLang's StreamingResponse sends them, framed here
            # (h11 keeps no state for chunked bodies) so a burst costs one socket write.
            out = b"".join([b"%x\r\n%s\r\n" % (len(p), p) for p in self._pending])
            self._pending.clear()
            self.transport.write(out)
            return
        data = b"".join(self._pending)
        self._pending.clear()
        self._send(h11.Data(data=data))

    def end_stream(self, tail: bytes = b"") -> None:
        if self.closed:
            return
        if tail:
            self._pending.append(tail)
        self.flush()
        self._send(h11.EndOfMessage())
        self._cycle_done()

    def _cycle_done(self) -> None:
        self.busy = False
        self._chunked = False
        self.on_close = None
        if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is h11.MUST_CLOSE:
            self._close()
            return
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            try:
                self.h11.start_next_cycle()
            except h11.LocalProtocolError:
                self._close()
                return
            # a pipelined request may already be buffered
            asyncio.get_running_loop().call_soon(self._process)
        elif self.h11.their_state is not h11.DONE:
            # we answered before the body ended (error): do not try to reuse the connection
            self._close()

    def _close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.closed = True
