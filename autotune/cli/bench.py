"""`autotune bench`: run benchmark scenarios against an OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from autotune.cli._common import JSON_OPTION

if TYPE_CHECKING:
    from autotune.bench.results import BenchmarkReport, LatencyStats, ScenarioResult, Spread

SCENARIO_HELP = (
    "KIND[:key=value,...], repeatable. Kinds: prefill, decode, throughput, agent, long_context. "
    "Lists use '/': prefill:prompt_lens=512/2048/8192. "
    "E.g. throughput:concurrency=8,output_len=256,repeats=3."
)


_FIGURE_LABELS = {
    "prefill_tok_s": "prefill tok/s",
    "decode_tok_s": "decode tok/s",
    "output_tok_s": "out tok/s",
    "ttft_s": "TTFT s",
}


def _ms(stats: LatencyStats | None, field: str) -> str:
    return f"{1000 * getattr(stats, field):.1f}" if stats is not None else "-"


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return format(value, fmt) if value is not None else "-"


def _fmt(sp: Spread) -> str:
    return ".3f" if sp.figure == "ttft_s" else ",.1f"


def _main(sp: Spread) -> str:
    if sp.mean is None:
        return "-"
    return f"{format(sp.mean, _fmt(sp))} {_FIGURE_LABELS.get(sp.figure, sp.figure)}"


def _spread(sp: Spread) -> str:
    if sp.stdev is None or sp.min is None or sp.max is None:
        return ""
    f = _fmt(sp)
    return f"±{format(sp.stdev, f)} ({format(sp.min, f)}-{format(sp.max, f)})"


def print_table(report: BenchmarkReport) -> None:
    """One row per scenario and per point (prompt length, agent turn); columns that no
    scenario fills (spread, cache hits, acceptance) are left out."""
    from rich.console import Console
    from rich.table import Table

    rows: list[tuple[str, Any, Spread, ScenarioResult | None]] = []
    for res in report.scenarios:
        rows.append((res.name, res.stats, res.main, res))
        rows.extend((f"  {p.key}", p.stats, p.main, None) for p in res.points)
    with_spread = any(_spread(sp) for _, _, sp, _ in rows)
    with_cache = any(r.metrics.cache_hit_rate is not None for r in report.scenarios)
    with_spec = any(r.metrics.spec_accept_length is not None for r in report.scenarios)

    table = Table(title=f"{report.base_url}  model {report.model or '-'}", title_justify="left")
    table.add_column("scenario")
    table.add_column("ok", justify="right")
    table.add_column("main figure", justify="right")
    if with_spread:
        table.add_column("over repeats", justify="right")
    for col in ("TTFT p50/p99 ms", "TPOT p50 ms", "ITL p99 ms", "in tok/s", "out tok/s"):
        table.add_column(col, justify="right")
    if with_cache:
        table.add_column("cache hit", justify="right")
    if with_spec:
        table.add_column("accept len", justify="right")
    for label, st, sp, owner in rows:
        cells = [label, f"{st.completed}/{st.requests}", _main(sp)]
        if with_spread:
            cells.append(_spread(sp))
        cells += [
            f"{_ms(st.ttft, 'p50')}/{_ms(st.ttft, 'p99')}",
            _ms(st.tpot, "p50"),
            _ms(st.itl, "p99"),
            _num(st.input_tok_s),
            _num(st.output_tok_s),
        ]
        if with_cache:
            cells.append(_num(owner.metrics.cache_hit_rate, ".1%") if owner else "")
        if with_spec:
            cells.append(_num(owner.metrics.spec_accept_length, ".2f") if owner else "")
        table.add_row(*cells)

    console = Console()
    console.print(table)
    for res in report.scenarios:
        for err in res.stats.error_examples:
            console.print(f"[red]{res.name}: error[/red] {err}", highlight=False)
        for w in res.warnings:
            console.print(f"[yellow]{res.name}: note[/yellow] {w}", highlight=False)


def bench(
    url: str = typer.Option(
        ..., "--url", help="Server base URL, e.g. http://127.0.0.1:30000 (a /v1 suffix is fine)."
    ),
    scenario: list[str] | None = typer.Option(None, "--scenario", "-s", help=SCENARIO_HELP),
    scenarios_file: Path | None = typer.Option(
        None, "--scenarios-file", help="YAML list of scenario mappings (each with a 'kind')."
    ),
    model: str | None = typer.Option(
        None, "--model", help="Model name to request (default: the first of /v1/models)."
    ),
    per_request: bool = typer.Option(
        False, "--per-request", help="Keep every request (with ITL samples) in the JSON."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Also write the JSON report (with every request) to this file."
    ),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="OPENAI_API_KEY",
        show_envvar=True,
        help="Bearer token for a server started with --api-key (prefer the variable: a flag "
        "value shows in the process list).",
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Benchmark a running server: TTFT, ITL, TPOT, tok/s, cache hits and spec acceptance."""
    from autotune.bench import load_scenarios_file, parse_scenario, run_benchmark
    from autotune.errors import ConfigError

    scenarios = [parse_scenario(s) for s in scenario or []]
    if scenarios_file is not None:
        scenarios += load_scenarios_file(scenarios_file)
    if not scenarios:
        raise ConfigError(
            "give at least one --scenario or a --scenarios-file; " + SCENARIO_HELP,
            field="--scenario",
        )

    def progress(message: str) -> None:
        typer.echo(f"autotune bench: {message}", err=True)

    report = run_benchmark(url, scenarios, model=model, progress=progress, api_key=api_key)
    if out is not None:
        out.write_text(report.model_dump_json(indent=1))
    if json_out:
        exclude: Any = None if per_request else {"scenarios": {"__all__": {"requests"}}}
        typer.echo(json.dumps(report.model_dump(mode="json", exclude=exclude), indent=2))
    else:
        print_table(report)


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
