"""The `autotune` command line. Each command lives in its own module and registers itself;
heavy imports happen inside the command functions so `autotune --help` stays instant."""

from __future__ import annotations

import importlib
import sys

import typer

from autotune.errors import AutotuneError

app = typer.Typer(
    name="autotune",
    help="Tune LLM serving engines (SGLang, vLLM, llama.cpp) and their Triton kernels, unattended.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

# Modules that define `register(app)`; a module that does not exist yet is skipped so the CLI
# keeps working while parts are built.
COMMAND_MODULES = (
    "catalog",
    "plan",
    "calibrate",
    "space",
    "inspect",
    "bench",
    "sim",
    "sweep",
    "report",
    "kernels",
    "demo",
    "engines",
    "completion",
    "init",
    "spec",
    "serve",  # last: it routes sweep/status/report to a service under --server
)


def package_version() -> str:
    """The installed distribution's version, else the source tree's `autotune.__version__`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("autotune")
    except PackageNotFoundError:
        from autotune import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"autotune {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    _version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the autotune version and exit.",
    ),
    server: str | None = typer.Option(
        None,
        "--server",
        envvar="AUTOTUNE_SERVER",
        metavar="URL",
        help="Run sweep, status and report against an `autotune serve` service at URL "
        "(token: $AUTOTUNE_TOKEN or $AUTOTUNE_TOKEN_FILE).",
    ),
) -> None:
    if server:
        from autotune.service.remote import use_server

        use_server(server, ctx)


for _name in COMMAND_MODULES:
    try:
        _mod = importlib.import_module(f"autotune.cli.{_name}")
    except ModuleNotFoundError as _exc:
        if _exc.name != f"autotune.cli.{_name}":
            raise
        continue
    _mod.register(app)


def main() -> None:
    """Console entry point: AutotuneError (and an OS error such as an unwritable file) ->
    message on stderr and its exit code, no traceback (set AUTOTUNE_DEBUG=1 for one). With
    --json, stdout gets one JSON error object too, so a script reading stdout always gets JSON."""
    import os

    json_mode = "--json" in sys.argv[1:]
    try:
        if not json_mode:
            app()
            return
        rv = app(standalone_mode=False)
        sys.exit(rv if isinstance(rv, int) else 0)
    except AutotuneError as exc:
        if os.environ.get("AUTOTUNE_DEBUG"):
            raise
        _fail(str(exc), exc.exit_code, type(exc).__name__, json_mode, exc)
    except OSError as exc:
        if os.environ.get("AUTOTUNE_DEBUG"):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(f"{where}{exc.strerror or exc}", 1, type(exc).__name__, json_mode, exc)
    except typer.Abort:
        _fail("aborted", 130, "Abort", json_mode, None)
    except _click_exception() as exc:  # only under --json (standalone_mode=False)
        exc.show()  # type: ignore[attr-defined]
        code = int(getattr(exc, "exit_code", 2))
        message = exc.format_message()  # type: ignore[attr-defined]
        _fail(message, code, type(exc).__name__, json_mode, exc, echo=False)


def _click_exception() -> type[Exception]:
    """click's ClickException (typer may vendor click: found through BadParameter's bases)."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException":
            return cls
    return typer.BadParameter


def _fail(
    message: str,
    code: int,
    kind: str,
    json_mode: bool,
    exc: BaseException | None,
    *,
    echo: bool = True,
) -> None:
    import json

    if echo:
        typer.echo(f"autotune: error: {message}", err=True)
    if json_mode:
        error: dict[str, object] = {"type": kind, "message": message, "exit_code": code}
        for attr in ("field", "source"):
            if getattr(exc, attr, None):
                error[attr] = getattr(exc, attr)
        typer.echo(json.dumps({"error": error}, indent=2))
    sys.exit(code)
