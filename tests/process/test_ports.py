from __future__ import annotations

import socket

import pytest

from autotune.process import free_port, port_is_free, wait_port_free


def test_free_port_is_bindable_and_listener_makes_it_busy() -> None:
    port = free_port()
    assert 1024 <= port < 65536
    assert port_is_free(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert not port_is_free(port)
        assert not wait_port_free(port, timeout_s=0.2)
    assert port_is_free(port)


def test_wildcard_listener_blocks_loopback() -> None:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        assert not port_is_free(s.getsockname()[1], "127.0.0.1")


def test_port_out_of_range() -> None:
    with pytest.raises(ValueError, match="1..65535"):
        port_is_free(0)
