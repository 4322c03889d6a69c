"""`autotune sim [SGLang flags] --sim-gpu GPU [--sim-time-scale S] ...`: run the simulated
SGLang engine in the foreground (the same entry as `python -m autotune.sim`)."""

from __future__ import annotations

import typer


def sim(ctx: typer.Context) -> None:
    """Run the simulated SGLang engine: SGLang's flags plus --sim-gpu, --sim-engine-version,
    --sim-time-scale, --sim-seed, --sim-model (see `autotune sim --help`)."""
    from autotune.sim.server import main

    raise typer.Exit(main(list(ctx.args)))


def register(app: typer.Typer) -> None:
    app.command(
        "sim",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )(sim)
