"""`autotune report NAME`: write the morning-after report of a sweep from the database."""

from __future__ import annotations

from pathlib import Path

import typer

from autotune.cli._common import JSON_OPTION, emit_json

DB_HELP = "Database: an SQLAlchemy URL or an SQLite file (default: $AUTOTUNE_DB or ./autotune.db)."


def report(
    name: str = typer.Argument(
        ..., help="Sweep name (as in the spec; `autotune status` lists them)."
    ),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    out: Path | None = typer.Option(None, "--out", help="Output folder (default reports/NAME/)."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the PNG plots."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Write report.md, launch.sh, a systemd unit, winner.json and plots for sweep NAME."""
    from autotune.report import write_report
    from autotune.store.db import Store

    store = Store() if db is None else (Store(url=db) if "://" in db else Store(path=Path(db)))
    try:
        paths = write_report(store, name, out, plots=not no_plots)
    finally:
        store.close()
    if json_out:
        emit_json(paths)
        return
    typer.echo(f"report of sweep {name}: {paths.report_md}")
    if paths.simulated:
        typer.echo("  SIMULATED: figures come from the simulated engine, not a real GPU")
    if paths.launch_sh:
        typer.echo(f"  launch:  {paths.launch_sh}")
        typer.echo(f"  systemd: {paths.systemd_unit}")
    typer.echo(f"  winner:  {paths.winner_json}")
    for plot in paths.plots.values():
        typer.echo(f"  plot:    {plot}")
    for note in paths.notes:
        typer.echo(f"  note: {note}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
