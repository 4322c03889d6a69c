"""A benchmark of a server (`autotune bench`): scenarios in order with one client, each run by
autotune.bench.runner, into one BenchmarkReport.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import httpx

from autotune import __version__
from autotune.bench.client import discover_model
from autotune.bench.results import BenchmarkReport
from autotune.bench.runner import normalize_base_url, run_scenario
from autotune.bench.scenarios import AnyScenario
from autotune.bench.summary import describe
from autotune.errors import ConfigError


async def run_benchmark_async(
    base_url: str,
    scenarios: Sequence[AnyScenario],
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    model: str | None = None,
    progress: Callable[[str], None] | None = None,
    api_key: str | None = None,
) -> BenchmarkReport:
    """Run `scenarios` in order with one client; stops at the first failing scenario.

    `progress`, if given, is called with a one-line message before each scenario; `api_key`
    is sent as a bearer token (a server started with --api-key refuses requests without it)."""
    if not scenarios:
        raise ConfigError("no scenario to run", field="--scenario")
    base_url = normalize_base_url(base_url)
    most = max(s.concurrency for s in scenarios) + 4
    limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)
    started = datetime.now(UTC)
    # trust_env=False: a proxy from the environment would sit inside every measured latency.
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    async with httpx.AsyncClient(
        transport=transport, limits=limits, trust_env=False, headers=headers
    ) as client:
        if model is None and any(s.model is None for s in scenarios):
            model = await discover_model(client, base_url)
        results = []
        for i, s in enumerate(scenarios, 1):
            if progress:
                progress(f"[{i}/{len(scenarios)}] {describe(s)}")
            results.append(await run_scenario(client, base_url, s, model=model))
    return BenchmarkReport(
        base_url=base_url,
        model=model,
        started_at=started,
        finished_at=datetime.now(UTC),
        autotune_version=__version__,
        scenarios=results,
    )


def run_benchmark(
    base_url: str,
    scenarios: Sequence[AnyScenario],
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    model: str | None = None,
    progress: Callable[[str], None] | None = None,
    api_key: str | None = None,
) -> BenchmarkReport:
    """Synchronous wrapper of `run_benchmark_async` (uses ``asyncio.run``).

    >>> report = run_benchmark("http://127.0.0.1:30000", [parse_scenario("decode")])  # doctest: +SKIP
    >>> report.scenarios[0].main.mean  # doctest: +SKIP
    41.4
    """
    box: list[BenchmarkReport] = []

    async def main() -> None:
        # The report is handed back through `box`, not as the main task's result: on exit,
        # Python 3.11's asyncio.run formats the main task (result included) into an error message
        # it then discards, which costs ~0.4 s for a report holding 100k ITL samples.
        box.append(
            await run_benchmark_async(
                base_url,
                scenarios,
                transport=transport,
                model=model,
                progress=progress,
                api_key=api_key,
            )
        )

    asyncio.run(main())
    return box[0]
