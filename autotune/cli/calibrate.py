"""`autotune calibrate LOG...`: read real SGLang or vLLM startup logs, plan each launch again
with the configuration it logged, and keep what the machine did differently (free memory before
the weights, the weights, the KV pool) for the sweeps on that (engine, GPU, model)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Literal

import typer

from autotune.cli._common import JSON_OPTION, emit_json, parse_sets
from autotune.cli.plan import coerce_value
from autotune.cli.sweep import DB_HELP, open_store


def calibrate(
    logs: list[Path] = typer.Argument(..., help="Startup logs of real launches (one per file)."),
    model: str = typer.Option(
        ..., "--model", help="The model the launches ran: built-in card, HF id or folder."
    ),
    gpu: str = typer.Option(..., "--gpu", help="Catalog GPU name (autotune gpus) or auto."),
    engine: Literal["sglang", "vllm"] | None = typer.Option(
        None, "--engine", help="sglang or vllm (default: told by the log's lines)."
    ),
    engine_version: str | None = typer.Option(
        None, "--engine-version", help="Engine version (vLLM logs name it; SGLang's do not)."
    ),
    tp: int | None = typer.Option(None, "--tp", min=1, help="TP size (default: from the log)."),
    sets: list[str] | None = typer.Option(
        None, "--set", help="Engine field=value the log does not record (repeatable)."
    ),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Compare only; store nothing."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Compare each log with the planner and store the machine's calibration."""
    from autotune.calibration.calibrate import calibrate_log

    overrides = {k: coerce_value(v) for k, v in parse_sets(sets).items()}
    found = [
        calibrate_log(
            p,
            model=model,
            gpu=gpu,
            engine=engine,
            version=engine_version,
            tp=tp,
            overrides=overrides,
        )
        for p in logs
    ]
    if not dry_run:
        with open_store(db) as store:
            for c in found:
                store.add_calibration(**asdict(c))
    if json_out:
        emit_json([{**asdict(c), "kv_ratio": round(c.kv_ratio, 4)} for c in found])
        return
    for c in found:
        typer.echo(
            f"{c.source}: {c.engine} {c.engine_version}, {c.model} on {c.gpu} TP{c.tp}: KV pool "
            f"{c.logged_kv:,} logged, {c.predicted_kv:,} planned (x{c.kv_ratio:.4f})"
        )
        for label, v in (
            ("free memory before weights", c.free_shift_gib),
            ("weights", c.weights_shift_gib),
            ("available KV memory", c.kv_memory_shift_gib),
        ):
            if v is not None:
                typer.echo(f"  {label:28s} {v:+.3f} GiB against the plan")
    if not dry_run:
        typer.echo(f"stored {len(found)} calibration(s); sweeps on this target start from them")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
