"""`autotune space check|show|schema`: validate and describe search-space YAML files."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer

from autotune.cli._common import JSON_OPTION, emit_json

if TYPE_CHECKING:
    from autotune.space import SearchSpace

space_app = typer.Typer(
    help="Search spaces: validate a YAML file, show its parameters and rules, export the schema.",
    no_args_is_help=True,
)

FILE_ARG = typer.Argument(
    ..., metavar="FILE", help="search-space YAML file, or an engine name for the built-in space"
)


def _load(file: str) -> SearchSpace:
    from pathlib import Path

    from autotune.space import builtin_space, builtin_spaces, load_space

    if not Path(file).exists() and "/" not in file and file in builtin_spaces():
        return builtin_space(file)
    return load_space(file)


def _summary(file: str, space: SearchSpace) -> dict[str, Any]:
    from autotune.errors import ConfigError

    try:
        size: int | None = space.size()
    except ConfigError:
        size = None  # a continuous float without step or grid
    return {
        "ok": True,
        "file": file,
        "engine": space.engine,
        "parameters": list(space.parameters),
        "conditional": [n for n, p in space.parameters.items() if p.condition],
        "fixed": space.fixed,
        "rules": len(space.rules),
        "constraints": sum(r.kind == "constraint" for r in space.rules),
        "grid_size": size,
    }


def check(file: str = FILE_ARG, json_out: bool = JSON_OPTION) -> None:
    """Validate a search-space file; errors name the field path, the line and valid values."""
    from autotune.errors import ConfigError

    try:
        space = _load(file)
    except ConfigError as exc:
        if not json_out:
            raise
        emit_json({"ok": False, "file": file, "error": str(exc)})
        raise typer.Exit(exc.exit_code) from None
    s = _summary(file, space)
    if json_out:
        emit_json(s)
        return
    grid = f"{s['grid_size']:,}" if s["grid_size"] is not None else "continuous"
    typer.echo(
        f"{file}: OK: engine {s['engine']}, {len(s['parameters'])} parameters "
        f"({len(s['conditional'])} conditional), {len(s['fixed'])} fixed, {s['rules']} rules "
        f"({s['constraints']} constraints), grid {grid} configurations"
    )


VERSION_OPTION = typer.Option(
    None,
    "--engine-version",
    help="narrow to this engine release: its flags and values only (as a sweep does)",
)
GPU_OPTION = typer.Option(
    None, "--gpu", help="with --model: also drop what the space's rules forbid on this GPU"
)
MODEL_OPTION = typer.Option(None, "--model", help="model card or folder, with --gpu")
TP_OPTION = typer.Option(1, "--tp", min=1, help="tensor-parallel size, with --gpu")


def _narrowed(
    space: SearchSpace, version: str | None, gpu: str | None, model: str | None, tp: int
) -> tuple[SearchSpace, list[str]]:
    """The space as a sweep on that target searches it, and what was left out."""
    from autotune.errors import ConfigError
    from autotune.sweep.narrowing import narrow_to_target

    if version is None:
        if gpu or model:
            raise ConfigError("--gpu and --model narrow a space only with --engine-version")
        return space, []
    context, unknown = None, frozenset[str]()
    if gpu or model:
        if not (gpu and model):
            raise ConfigError("give --gpu and --model together (the rules test both)")
        from autotune.planner.dispatch import load_target_model, resolve_target_gpu, target_facts

        card = load_target_model(space.engine, model)
        spec = resolve_target_gpu(space.engine, gpu, field="--gpu")
        context, unknown = target_facts(space.engine, card, spec, version, tp)
    narrowed, notes = narrow_to_target(space, version=version, context=context, unknown=unknown)
    return narrowed, [n.text() for n in notes]


def show(
    file: str = FILE_ARG,
    engine_version: str | None = VERSION_OPTION,
    gpu: str | None = GPU_OPTION,
    model: str | None = MODEL_OPTION,
    tp: int = TP_OPTION,
    json_out: bool = JSON_OPTION,
) -> None:
    """Print the parameters (domain, default, condition), fixed fields and rules of a space;
    with --engine-version (and --gpu --model) as a sweep on that target narrows it."""
    space, left_out = _narrowed(_load(file), engine_version, gpu, model, tp)
    if json_out:
        emit_json({**space.to_dict(), **({"left_out": left_out} if engine_version else {})})
        return
    typer.echo(f"engine: {space.engine}")
    if space.description:
        typer.echo(space.description)
    typer.echo("\nparameters:")
    for name, p in space.parameters.items():
        default = "engine" if p.default is None else json.dumps(p.default)
        typer.echo(f"  {name:30s} {p.domain()}  [default: {default}]")
        if p.condition:
            typer.echo(f"  {'':30s} only when {p.condition_text()}")
    if space.fixed:
        typer.echo("\nfixed:")
        for name, value in space.fixed.items():
            typer.echo(f"  {name:30s} {json.dumps(value)}")
    if space.rules:
        typer.echo("\nrules:")
        for r in space.rules:
            typer.echo(f"  {r.id:26s} {r.kind:10s} {r.reason}  [{r.source}]")
    if left_out:
        typer.echo("\nleft out for this target:")
        for line in left_out:
            typer.echo(f"  {line}")


def schema() -> None:
    """Print the JSON Schema of search-space files (generated from the pydantic models)."""
    from autotune.space import SearchSpace

    typer.echo(json.dumps(SearchSpace.model_json_schema(by_alias=True), indent=2))


def register(app: typer.Typer) -> None:
    space_app.command("check")(check)
    space_app.command("show")(show)
    space_app.command("schema")(schema)
    app.add_typer(space_app, name="space")
