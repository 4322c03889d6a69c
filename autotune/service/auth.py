"""The bearer token and the guards every request passes before it reaches an endpoint.

The token is made on first start (`secrets`, 256 bits) and stored in STATE/token with mode
0600; a token file that others can read is refused, not silently used. Comparison is
constant-time over fixed-length digests. Bodies are buffered up to the configured limit and
refused with 413 beyond it, before any endpoint parses them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from autotune.errors import ConfigError

PUBLIC_PATHS = frozenset({"/healthz"})
TOKEN_ENV = "AUTOTUNE_TOKEN"
TOKEN_FILE_ENV = "AUTOTUNE_TOKEN_FILE"


def ensure_token(path: Path) -> str:
    """The service's token: read it, or create it (owner-only) if there is none."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_token(path)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return token


def read_token(path: Path) -> str:
    """Read a token file; refuse one that group or others can read or write."""
    try:
        st = path.stat()
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the service token: {exc.strerror or exc}", source=str(path)
        ) from None
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise ConfigError(
            f"the token file is accessible to others (mode {stat.S_IMODE(st.st_mode):04o}); "
            "run `chmod 600` on it, or delete it so the service makes a new one",
            source=str(path),
        )
    if st.st_uid != os.getuid():
        raise ConfigError("the token file belongs to another user", source=str(path))
    if len(text) < 16:
        raise ConfigError(
            "the token file holds no usable token (16 characters or more); delete it so the "
            "service makes a new one",
            source=str(path),
        )
    return text


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


def token_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(_digest(given), _digest(expected))


def _error(
    status: int, detail: str, error: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"detail": detail, "error": error, "field": None}, status_code=status, headers=headers
    )


class BearerAuth:
    """Every HTTP request except PUBLIC_PATHS needs `Authorization: Bearer <token>`."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websockets here
            await _error(404, "not found", "NotFound")(scope, receive, send)
            return
        if scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        header = ""
        for key, value in scope["headers"]:
            if key == b"authorization":
                header = value.decode("latin-1")
                break
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            detail = (
                "missing bearer token: send `Authorization: Bearer <token>` (the token is in "
                "the service's state folder, file `token`)"
            )
            await _error(401, detail, "Unauthorized", {"WWW-Authenticate": "Bearer"})(
                scope, receive, send
            )
            return
        if not token_matches(given.strip(), self.token):
            await _error(
                401,
                "invalid bearer token",
                "Unauthorized",
                {"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)


class BodyLimit:
    """Buffer the request body up to `limit` bytes; 413 beyond it (Content-Length or not)."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    def _too_large(self) -> JSONResponse:
        return _error(
            413,
            f"request body is larger than the service's limit of {self.limit} bytes "
            "(max_body_bytes in the service's config.yaml)",
            "TooLarge",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope["headers"]:
            if key == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _error(400, "invalid Content-Length header", "BadRequest")(
                        scope, receive, send
                    )
                    return
                if declared > self.limit:
                    await self._too_large()(scope, receive, send)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.limit:
                await self._too_large()(scope, receive, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        buffered: list[Message] = [
            {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        ]

        async def replay() -> Message:
            if buffered:
                return buffered.pop()
            return await receive()  # after the body: disconnect notices for streaming

        await self.app(scope, replay, send)
