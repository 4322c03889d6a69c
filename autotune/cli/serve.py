"""`autotune serve` (the HTTP jobs API) and `autotune mcp` (the same operations as MCP tools
over stdio). Registering also lets `autotune --server URL sweep/status/report` run those
commands against a service (autotune.service.remote)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer

DB_HELP = (
    "Database: an SQLAlchemy URL or an SQLite file (default: $AUTOTUNE_DB, else "
    "STATE/autotune.db)."
)
STATE_HELP = (
    "State folder: token, config.yaml (allowed paths and engines), job table, logs, reports "
    "(default: $AUTOTUNE_STATE_DIR or ~/.local/state/autotune)."
)


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback default)."),
    port: int = typer.Option(8321, "--port", min=1, max=65535, help="TCP port."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    state_dir: Path | None = typer.Option(None, "--state-dir", help=STATE_HELP),
    no_recover: bool = typer.Option(
        False, "--no-recover", help="Do not resume sweeps whose job died while they ran."
    ),
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = typer.Option(
        "info", "--log-level", help="uvicorn log level."
    ),
) -> None:
    """Serve the jobs API over HTTP (bearer token in STATE/token; OpenAPI at /openapi.json)."""
    from autotune.extras import SERVICE_HTTP, require

    require("service", "autotune serve", SERVICE_HTTP)
    import uvicorn

    from autotune.service.app import create_app
    from autotune.service.auth import ensure_token
    from autotune.service.core import Service
    from autotune.service.state import StateDir, hold_serve_lock

    state = StateDir.open(state_dir)
    with hold_serve_lock(state):
        token = ensure_token(state.token)
        service = Service.open(state.root, db)
        if host not in ("127.0.0.1", "localhost", "::1"):
            typer.echo(
                f"autotune serve: warning: binding {host}: the token travels in clear text "
                "without TLS; put the service behind a TLS proxy or an SSH tunnel",
                err=True,
            )
        typer.echo(
            f"autotune serve: http://{host}:{port} (token in {state.token}; database "
            f"{service.store.display_url}; config {state.config})",
            err=True,
        )
        app = create_app(service, token=token, recover=not no_recover)
        try:
            uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
        finally:
            service.store.close()


def mcp(
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    state_dir: Path | None = typer.Option(None, "--state-dir", help=STATE_HELP),
    no_recover: bool = typer.Option(
        False, "--no-recover", help="Do not resume sweeps whose job died while they ran."
    ),
) -> None:
    """Serve the MCP tools (plan, inspect_checkpoint, start_sweep, sweep_status, stop_sweep,
    get_report, tune_kernels, ...) over stdio, for agents."""
    from autotune.extras import SERVICE_MCP, require

    require("service", "autotune mcp", SERVICE_MCP)
    from autotune.service.core import Service
    from autotune.service.mcp_server import run_stdio

    run_stdio(Service.open(state_dir, db), recover=not no_recover)


def register(app: typer.Typer) -> None:
    from autotune.service.remote import route_remote_commands

    app.command("serve")(serve)
    app.command("mcp")(mcp)
    route_remote_commands(app)
