"""`autotune sim [SGLang flags] --sim-gpu GPU [--sim-time-scale S] ...`: run the simulated
SGLang engine in the foreground (the same entry as `python -m autotune.sim`); with
`--sim-engine vllm` it takes `vllm serve`'s options and speaks vLLM's API instead."""

from __future__ import annotations

import typer


def sim(ctx: typer.Context) -> None:
    """Run the simulated SGLang engine: SGLang's flags plus --sim-gpu, --sim-engine-version,
    --sim-time-scale, --sim-seed, --sim-model (see `autotune sim --help`); --sim-engine vllm
    impersonates `vllm serve` (its options, log lines, API and metrics)."""
    from autotune.sim.main import main

    raise typer.Exit(main(list(ctx.args)))


def register(app: typer.Typer) -> None:
    app.command(
        "sim",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,
    )(sim)
