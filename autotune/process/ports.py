"""Free-port helpers for engines that bind a TCP port (loopback by default)."""

from __future__ import annotations

import socket
import time


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that nothing listens on right now.

    The kernel picks it (bind to port 0), so it is outside the ranges engines use by default;
    another process may still take it before the engine binds, which ``EngineProcess.start``
    checks again.
    """
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could bind ``host:port`` now.

    SO_REUSEADDR is set as uvicorn/aiohttp servers set it, so sockets of a stopped server that
    linger in TIME_WAIT do not count as "in use" (they would not stop the next engine), while a
    live listener on the port, or on the wildcard address, does.
    """
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def wait_port_free(port: int, host: str = "127.0.0.1", *, timeout_s: float = 5.0) -> bool:
    """Poll until ``port`` is free or ``timeout_s`` passes; return whether it became free."""
    deadline = time.monotonic() + timeout_s
    while True:
        if port_is_free(port, host):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET
