"""`autotune sweep SPEC.yaml` runs (or `--resume NAME` continues) an engine sweep;
`autotune status [NAME]` reads the database, also while a sweep runs in another process."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer

from autotune.cli._common import JSON_OPTION, PROGRESS_OPTION, ProgressChoice, emit_json

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.sweep.orchestrator import SweepOutcome

DB_HELP = "Database: an SQLAlchemy URL or an SQLite file (default: $AUTOTUNE_DB or ./autotune.db)."


def open_store(db: str | None, *, create: bool = True) -> Store:
    """`create=False` for commands that only read: a missing SQLite file is an error."""
    from autotune.store.db import Store

    if db is None:
        return Store(create=create)
    return Store(url=db) if "://" in db else Store(path=Path(db), create=create)


def sweep(
    spec_file: Path | None = typer.Argument(
        None, help="Sweep spec (YAML); optional with --resume (the stored spec is used)."
    ),
    resume: str | None = typer.Option(None, "--resume", help="Continue the sweep called NAME."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    until: str | None = typer.Option(None, "--until", help="Stop at HH:MM (next occurrence)."),
    max_trials: int | None = typer.Option(None, "--max-trials", min=1, help="Launched trials."),
    wall_clock: float | None = typer.Option(
        None, "--wall-clock", min=1, help="Seconds from now after which the sweep stops."
    ),
    executor: Literal["inprocess", "ray"] | None = typer.Option(
        None, "--executor", help="inprocess (threads) or ray (actors; multi-machine)."
    ),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Trials at once."),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        help="Join this Ray cluster: the HOST:PORT `ray start --head` printed, or auto. A head "
        "with token authentication gets this machine's token (RAY_AUTH_TOKEN, "
        "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token).",
    ),
    out: Path | None = typer.Option(None, "--out", help="Output folder (default reports/NAME)."),
    no_report: bool = typer.Option(False, "--no-report", help="Skip report.md and plots."),
    json_out: bool = JSON_OPTION,
    progress: ProgressChoice | None = PROGRESS_OPTION,
) -> None:
    """Search engine launch configurations for the best throughput that fits, unattended."""
    from autotune.errors import ConfigError
    from autotune.sweep.orchestrator import run_sweep

    if executor is not None and executor not in ("inprocess", "ray"):
        raise ConfigError(
            f"unknown executor {executor!r}; valid: inprocess, ray", field="--executor"
        )
    if spec_file is None and resume is None:
        raise ConfigError("give a spec file, or --resume NAME", field="SPEC")
    store = open_store(db)
    spec, text = load_for(store, spec_file, resume)
    outcome = run_sweep(
        spec,
        store=store,
        spec_yaml=text,
        resume=resume is not None,
        out_dir=out,
        executor_kind=executor,
        workers=workers,
        ray_address=ray_address,
        max_trials=max_trials,
        wall_clock_s=wall_clock,
        until=until,
        progress=progress or "auto",
        spec_dir=spec_file.parent.resolve() if spec_file is not None else None,
    )
    report = (
        None if no_report else write_report_if_available(store, spec.name, Path(outcome.out_dir))
    )
    if json_out:
        emit_json({**outcome.model_dump(mode="json"), "report": str(report) if report else None})
    else:
        print_summary(outcome)
        if report:
            typer.echo(f"report: {report}")
    raise typer.Exit(outcome.exit_code)


def write_report_if_available(store: object, sweep_name: str, out_dir: Path) -> Path | None:
    """`autotune.report.write_report(store, sweep_name, out_dir)` once the report module
    exists (its result is path-like: report.md); None until then, and the summary table is
    all the user gets."""
    import importlib

    try:
        module = importlib.import_module("autotune.report")
    except ModuleNotFoundError as exc:
        if exc.name != "autotune.report":
            raise
        return None
    write = getattr(module, "write_report", None)
    if write is None:
        return None
    result = write(store, sweep_name, out_dir)
    return Path(result) if result is not None else out_dir / "report.md"


def load_for(store: Store, spec_file: Path | None, resume: str | None) -> tuple[Any, str]:
    """The spec to run: the file, or for --resume without one the text stored with the sweep."""
    from autotune.errors import ConfigError
    from autotune.sweep.spec import load_spec, spec_from_yaml

    if spec_file is not None:
        spec, text = load_spec(spec_file)
        if resume is not None and spec.name != resume:
            raise ConfigError(
                f"the spec names sweep {spec.name!r}, not {resume!r}; resume with the same spec "
                "or without one (the stored spec is used)",
                source=str(spec_file),
                field="name",
            )
        return spec, text
    assert resume is not None
    row = store.get_sweep(resume)
    base = (row.notes or {}).get("spec_dir")
    spec = spec_from_yaml(
        row.spec_yaml,
        source=f"sweep {resume} (stored spec)",
        base_dir=Path(base) if base else None,
    )
    return spec, row.spec_yaml


def print_summary(outcome: SweepOutcome) -> None:
    """Best configuration, baseline vs best, finalists and failures by class (rich tables)."""
    from rich.console import Console
    from rich.table import Table

    con = Console()
    metric = outcome.finalists[0]["metric"] if outcome.finalists else "objective"
    con.print(
        f"[bold]sweep {outcome.name}[/bold]: {outcome.status} ({outcome.stop_reason}); "
        f"{outcome.launched} trials launched in {outcome.elapsed_s:.0f} s; db {outcome.db_display}"
    )
    counts = ", ".join(f"{k} {v}" for k, v in sorted(outcome.counts.items()))
    con.print(f"trials: {counts or 'none'}")
    if outcome.infeasible:
        con.print("[bold red]no trial met the constraints (or nothing fit): no winner[/bold red]")
    t = Table(title="baseline vs best", show_lines=False)
    t.add_column("")
    t.add_column("trial")
    t.add_column("value", justify="right")
    t.add_column("configuration")
    for label, row in (("baseline", outcome.baseline), ("best", outcome.best)):
        if row is None:
            t.add_row(label, "-", "-", "-")
            continue
        value = "-" if row.get("value") is None else f"{row['value']:,.2f}"
        cfg = " ".join(f"{k}={v}" for k, v in row["config"].items())
        t.add_row(label, f"#{row['number']} ({row['status']})", value, cfg)
    con.print(t)
    base = (outcome.baseline or {}).get("value")
    best = (outcome.best or {}).get("value")
    if base and best:
        con.print(f"best / baseline: {best / base:.2f}x")
    if outcome.finalists:
        f = Table(title=f"finalists ({metric}, mean over runs)")
        for col in ("trial", "runs", "mean", "stdev", "min", "max"):
            f.add_column(col, justify="right")
        for row in outcome.finalists:
            f.add_row(
                *(
                    str(row.get(k) if row.get(k) is not None else "-")
                    for k in ("number", "runs", "mean", "stdev", "min", "max")
                )
            )
        con.print(f)
    fails = Table(title="failures by class")
    fails.add_column("class")
    fails.add_column("trials", justify="right")
    for cls, n in outcome.failures_by_class.items():
        fails.add_row(cls, str(n))
    if outcome.failures_by_class:
        con.print(fails)
    if outcome.pareto:
        con.print(f"Pareto front (feasible trials): {', '.join(f'#{n}' for n in outcome.pareto)}")
    corr = outcome.planner_correction
    if corr.get("launches"):
        curve = corr.get("curve") or []
        after = f"; corrected error of the last launch {curve[-1]:.2%}" if len(curve) > 1 else ""
        con.print(
            f"planner KV correction: actual/predicted {corr['kv_ratio']} over "
            f"{corr['launches']} launches ({corr.get('model') or 'ratio'} model{after})"
        )


def status(
    name: str | None = typer.Argument(None, help="Sweep name (default: list the sweeps)."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    json_out: bool = JSON_OPTION,
) -> None:
    """Show sweeps and their progress from the database (safe while a sweep runs).

    A sweep marked running whose driver process is gone (killed) shows as "running (driver
    dead)" (JSON: "driver": "dead"); continue it with `autotune sweep --resume NAME`.
    """
    from autotune.sweep.status import DRIVER_DEAD, sweep_status, sweeps_overview

    store = open_store(db, create=False)
    if name is None:
        rows = sweeps_overview(store)
        if json_out:
            emit_json({"sweeps": rows})
            return
        if not rows:
            typer.echo(f"no sweeps in {store.display_url}")
        for r in rows:
            best = "-" if r["best_value"] is None else f"{r['best_value']:,.2f}"
            dead = "  (driver dead: resume it)" if r.get("driver") == DRIVER_DEAD else ""
            typer.echo(
                f"{r['name']:28s} {r['status']:9s} {r['trials']:4d} trials  best {best:>10s}  "
                f"updated {r['updated_at']}{dead}"
            )
        return
    info = sweep_status(store, name)
    if json_out:
        emit_json(info)
        return
    typer.echo(f"sweep {info['name']}: {info['status']} (updated {info['updated_at']})")
    if info.get("driver") == DRIVER_DEAD:
        typer.echo(
            f"driver: dead (pid {info['driver_pid']} on {info['driver_host']} is gone: the "
            "sweep was killed; its running trials were cut off); continue it with "
            f"`autotune sweep --resume {info['name']}`"
        )
    typer.echo(
        "trials: "
        + ", ".join(f"{k} {v}" for k, v in sorted(info["counts"].items()))
        + f"; launched {info['launched']}"
    )
    best = info["best"]
    if best:
        cfg = " ".join(f"{k}={v}" for k, v in best["config"].items())
        typer.echo(f"best: #{best['number']} {best['value']:,.2f}  {cfg}")
    for r in info["running"]:
        typer.echo(f"running: #{r['number']} on {r['worker'] or '?'} since {r['started_at']}")
    if info["failures_by_class"]:
        typer.echo(
            "failures: " + ", ".join(f"{k} {v}" for k, v in info["failures_by_class"].items())
        )
    if info.get("stop_reason"):
        typer.echo(f"stop reason: {info['stop_reason']}")


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
    app.command("status")(status)
