"""`autotune spec schema`: the JSON Schema of sweep spec files (from the pydantic models)."""

from __future__ import annotations

from pathlib import Path

import typer

spec_app = typer.Typer(
    help="Sweep specs: export the JSON Schema (field reference: docs/spec.md).",
    no_args_is_help=True,
)


def schema(
    out: Path | None = typer.Option(
        None, "--out", metavar="FILE", help="Write the schema to FILE instead of stdout."
    ),
) -> None:
    """Print the JSON Schema of sweep spec files, keys sorted (stable from run to run)."""
    from autotune.errors import StorageError
    from autotune.sweep.spec_docs import dumps_schema

    text = dumps_schema() + "\n"
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"{out}: cannot write the schema: {exc.strerror or exc}") from None
    typer.echo(f"wrote {out}", err=True)


def register(app: typer.Typer) -> None:
    spec_app.command("schema")(schema)
    app.add_typer(spec_app, name="spec")
