"""Helpers shared by CLI commands: JSON vs human output."""

from __future__ import annotations

import json
from typing import Any, Literal

import typer
from pydantic import BaseModel

JSON_OPTION = typer.Option(False, "--json", help="Print one JSON object on stdout.")

# `--progress` of the long-running commands (sweep, kernels tune); None = auto
# (autotune.sweep.progress.resolve_progress).
ProgressChoice = Literal["auto", "rich", "json", "none"]
PROGRESS_OPTION = typer.Option(
    None,
    "--progress",
    help="Progress on stderr: rich (a bar), json (one JSON event a line), none; default auto "
    "= rich when stderr is a terminal, else none (also with --json).",
)


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, list):
        return [to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    return obj


def emit_json(obj: Any) -> None:
    typer.echo(json.dumps(to_jsonable(obj), indent=2, sort_keys=False))


def parse_sets(items: list[str] | None, flag: str = "--set") -> dict[str, str]:
    """`--set field=value` pairs -> dict (values stay strings; the consumer coerces them)."""
    from autotune.errors import ConfigError

    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected field=value, got {item!r}", field=flag)
        out[key.strip()] = value.strip()
    return out
