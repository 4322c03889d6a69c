"""A request whose pooled connection the server had already closed (no response at all) is sent
again on a fresh one; a stream that broke after the response began is not."""

from __future__ import annotations

import httpx
import pytest

from autotune.bench.client import STALE_CONNECTION_RETRIES
from tests.bench.fakes import FakeServer
from tests.bench.test_client import one

pytestmark = pytest.mark.anyio

STALE = "Server disconnected without sending a response."


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def dropping(server: FakeServer, drops: int) -> tuple[httpx.MockTransport, list[int]]:
    """The first `drops` POSTs die before any response byte (a stale keep-alive connection)."""
    posts: list[int] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posts.append(1)
            if len(posts) <= drops:
                raise httpx.RemoteProtocolError(STALE, request=request)
        return await server.handle(request)

    return httpx.MockTransport(handle), posts


@pytest.mark.parametrize("drops", range(1, STALE_CONNECTION_RETRIES + 1))
async def test_stale_connection_is_retried(drops: int) -> None:
    transport, posts = dropping(FakeServer(), drops)
    res, _ = await one(transport, max_tokens=4)
    assert res.ok, res.error
    assert res.output_tokens == 4 and len(posts) == drops + 1


async def test_retries_are_bounded() -> None:
    transport, posts = dropping(FakeServer(), STALE_CONNECTION_RETRIES + 1)
    res, _ = await one(transport)
    assert not res.ok and res.error_kind == "protocol" and STALE in (res.error or "")
    assert len(posts) == STALE_CONNECTION_RETRIES + 1


async def test_metrics_scrape_retries_a_stale_connection() -> None:
    from autotune.bench.metrics import scrape_metrics
    from autotune.errors import BenchmarkError

    gets: list[int] = []

    def handler(drops: int) -> httpx.MockTransport:
        async def handle(request: httpx.Request) -> httpx.Response:
            gets.append(1)
            if len(gets) <= drops:
                raise httpx.RemoteProtocolError(STALE, request=request)
            return httpx.Response(
                200,
                text="# TYPE vllm:prompt_tokens counter\n"
                'vllm:prompt_tokens_total{model_name="m"} 7\n',
            )

        return httpx.MockTransport(handle)

    async with httpx.AsyncClient(transport=handler(1)) as client:
        got = await scrape_metrics(client, "http://test")
    assert got["vllm:prompt_tokens_total"] == 7 and len(gets) == 2
    gets.clear()
    async with httpx.AsyncClient(transport=handler(STALE_CONNECTION_RETRIES + 1)) as client:
        with pytest.raises(BenchmarkError, match="Server disconnected"):
            await scrape_metrics(client, "http://test")
