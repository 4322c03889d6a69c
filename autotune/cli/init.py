"""`autotune init`: write a commented starter sweep spec for this GPU, a model and an engine."""

from __future__ import annotations

from pathlib import Path

import typer

from autotune.cli._common import JSON_OPTION, emit_json


def init(
    gpu: str = typer.Option(
        "auto",
        "--gpu",
        help="Catalog GPU name (autotune gpus), auto (detect through NVML), or cpu (llama.cpp).",
    ),
    model: str = typer.Option(
        ...,
        "--model",
        metavar="CARD_OR_DIR_OR_HUB_ID",
        help="Built-in card (autotune cards), a local Hugging Face folder, a hub id ORG/NAME "
        "(llama.cpp: a GGUF file).",
    ),
    engine: str = typer.Option(
        "sglang", "--engine", help="Engine to tune: sglang, vllm, llamacpp."
    ),
    engine_version: str | None = typer.Option(
        None,
        "--engine-version",
        metavar="V",
        help="Engine release the flags and rules follow (default: the one --engine-python has "
        "installed, else the engine's default).",
    ),
    engine_python: str | None = typer.Option(
        None,
        "--engine-python",
        metavar="PY",
        help="Interpreter of the engine's environment: its installed version is read (without "
        "importing the engine) and the spec launches the engine through it.",
    ),
    simulate: bool = typer.Option(
        False, "--simulate", help="Run the simulated engine (no GPU needed; sglang, vllm)."
    ),
    out: Path = typer.Option(
        Path("sweep.yaml"), "--out", metavar="FILE", help="Spec file to write."
    ),
    name: str | None = typer.Option(None, "--name", help="Sweep name (default from the target)."),
    max_trials: int | None = typer.Option(
        None, "--max-trials", min=1, help="budget.max_trials (default 60; simulated 20)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite FILE if it exists."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Write a commented starter sweep spec: the built-in space, the known-good configs that
    apply, a probe and a throughput scenario, an overnight budget."""
    from autotune.errors import ConfigError, StorageError
    from autotune.sweep.starter import render_starter

    if out.exists() and not force:
        raise ConfigError(f"{out} exists; pass --force to overwrite it", field="--out")
    starter = render_starter(
        engine=engine,
        model=model,
        gpu=gpu,
        engine_version=engine_version,
        engine_python=engine_python,
        simulate=simulate,
        name=name,
        max_trials=max_trials,
        out_name=str(out),
    )
    try:
        if out.parent != Path():
            out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(starter.text, encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"{out}: cannot write the spec: {exc.strerror or exc}") from None
    if json_out:
        emit_json({"ok": True, "file": str(out), **starter.to_json()})
        return
    typer.echo(
        f"wrote {out}: {starter.engine} {starter.engine_version} ({starter.version_source}), "
        f"{starter.model} on {starter.gpu}{' (simulated)' if starter.simulated else ''}"
    )
    if starter.known_good:
        typer.echo(
            f"known-good configurations seeded: {', '.join(k['id'] for k in starter.known_good)}"
        )
    for note in starter.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"next: autotune sweep {out}")


def register(app: typer.Typer) -> None:
    app.command("init")(init)
