"""`autotune bench` end to end against a MockTransport server."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import autotune.bench
from autotune.cli import app
from tests.bench.fakes import FakeServer


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    srv = FakeServer(tokens_per_chunk=2)
    real = autotune.bench.run_benchmark
    monkeypatch.setattr(
        autotune.bench, "run_benchmark", functools.partial(real, transport=srv.transport())
    )
    return srv


def test_json_output(server: FakeServer) -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            "http://test:30000",
            "--scenario",
            "decode:num_requests=2,output_len=6",
            "--scenario",
            "throughput:concurrency=3,output_len=4,num_requests=6",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [s["name"] for s in data["scenarios"]] == ["decode", "throughput"]
    thr = data["scenarios"][1]
    assert thr["stats"]["completed"] == 6 and thr["stats"]["output_tokens"] == 24
    assert thr["stats"]["tokens_per_chunk"] == 2.0
    assert "requests" not in thr  # only with --per-request
    assert server.max_in_flight <= 3


def test_table_output_and_out_file(server: FakeServer, tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("- kind: prefill\n  prompt_lens: [32, 64]\n  num_requests: 1\n")
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--url", "http://test", "--scenarios-file", str(spec), "--out", str(out)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "prompt_len=32" in result.stdout and "prefill tok/s" in result.stdout
    assert "no /metrics" in result.stdout  # notes are printed under the table
    saved = json.loads(out.read_text())
    assert len(saved["scenarios"][0]["requests"]) == 2


def test_bad_scenario_exits_2_with_the_flag_named(server: FakeServer) -> None:
    result = CliRunner().invoke(app, ["bench", "--url", "http://test", "-s", "decod"])
    assert result.exit_code != 0
    assert isinstance(result.exception, autotune.errors.ConfigError)
    assert "did you mean 'decode'" in str(result.exception)
    assert result.exception.exit_code == 2


def test_no_scenario_is_an_error(server: FakeServer) -> None:
    result = CliRunner().invoke(app, ["bench", "--url", "http://test"])
    assert isinstance(result.exception, autotune.errors.ConfigError)
    assert "--scenario" in str(result.exception)


def test_cli_module_imports_no_benchmark_machinery() -> None:
    # `autotune --help` stays instant: httpx, numpy and the bench package load on first use.
    code = (
        "import sys, autotune.cli.bench; "
        "print(sorted(m for m in ('httpx', 'numpy', 'autotune.bench') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_api_key_is_sent_as_a_bearer_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server started with --api-key refuses requests without it (issue 19 item 8)."""
    import httpx

    srv = FakeServer()
    inner = srv.transport()
    seen: list[str | None] = []

    class Recording(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(request.headers.get("authorization"))
            return await inner.handle_async_request(request)

    real = autotune.bench.run_benchmark
    monkeypatch.setattr(
        autotune.bench, "run_benchmark", functools.partial(real, transport=Recording())
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-bench-key")
    args = ["bench", "--url", "http://test:30000", "-s", "decode:num_requests=1,output_len=2"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert seen and set(seen) == {"Bearer sk-bench-key"}
    assert "sk-bench-key" not in result.stdout
