"""`autotune init`: write a commented starter sweep spec for this GPU, a model and an engine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from autotune.cli._common import JSON_OPTION, emit_json

if TYPE_CHECKING:
    from autotune.sweep.starter_text import Starter


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
    starter = _render(
        out,
        force=force,
        engine=engine,
        model=model,
        gpu=gpu,
        engine_version=engine_version,
        engine_python=engine_python,
        simulate=simulate,
        name=name,
        max_trials=max_trials,
    )
    _write_spec(out, starter.text)
    _report(starter, out, json_out=json_out)


def _render(
    out: Path,
    *,
    force: bool,
    engine: str,
    model: str,
    gpu: str,
    engine_version: str | None,
    engine_python: str | None,
    simulate: bool,
    name: str | None,
    max_trials: int | None,
) -> Starter:
    """The starter spec for `init`'s options; an existing FILE is kept unless --force."""
    from autotune.errors import ConfigError
    from autotune.sweep.starter import render_starter

    if out.exists() and not force:
        raise ConfigError(f"{out} exists; pass --force to overwrite it", field="--out")
    if not out.parent.is_dir():  # a mistyped folder is not made up (mkdir it first)
        raise ConfigError(
            f"{out.parent} is not a folder; create it first or name a file in an existing folder",
            field="--out",
        )
    return render_starter(
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


def _write_spec(out: Path, text: str) -> None:
    """Write the spec to FILE (its folder exists: _render checked).

    Raises:
        StorageError: FILE cannot be written.
    """
    from autotune.errors import StorageError

    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"{out}: cannot write the spec: {exc.strerror or exc}") from None


def _report(starter: Starter, out: Path, *, json_out: bool) -> None:
    """What `init` wrote: one JSON object, or a summary (notes on stderr) and the next step."""
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
