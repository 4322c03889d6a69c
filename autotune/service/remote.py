"""`autotune --server URL sweep|status|report ...`: the same commands against a service.

The root callback (autotune/cli/__init__.py) records `--server` (or $AUTOTUNE_SERVER) with
`use_server`. `route_remote_commands(app)`, called when the `serve` module registers, wraps the
callbacks of the already registered sweep/status/report commands: with no server they run as
before (same function, same options); with one, the remote version below runs with the same
parsed options. Options that only make sense locally (--db, --out for sweep, --ray-address)
are refused with a message saying what to do instead.
"""

from __future__ import annotations

import functools
import json
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import typer

from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.service.client import (
        JobJSON,
        OverrideValue,
        ServiceClient,
        SubmitJSON,
        SweepListJSON,
        SweepStatusJSON,
    )

P = ParamSpec("P")
R = TypeVar("R")

REMOTE_COMMANDS = ("sweep", "status", "report")
_server: list[str] = []


def use_server(url: str | None, ctx: typer.Context | None = None) -> None:
    """Called by the root callback: sweep/status/report go to `url` (None: run locally).

    Another command given `--server` on the command line is refused (it would silently run
    locally); $AUTOTUNE_SERVER is simply not used by the commands that run locally only."""
    _server.clear()
    if not url:
        return
    command = ctx.invoked_subcommand if ctx is not None else None
    if command is not None and command not in REMOTE_COMMANDS:
        source = ctx.get_parameter_source("server") if ctx is not None else None
        explicit = getattr(source, "name", None) == "COMMANDLINE"
        if explicit:
            raise ConfigError(
                f"`{command}` runs locally; --server works with "
                f"{', '.join(REMOTE_COMMANDS)} (the service's API has POST /v1/plan and "
                "/v1/inspect)",
                field="--server",
            )
        return
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"expected an http(s) URL, got {url!r}", field="--server")
    _server.append(url)


def active_server() -> str | None:
    return _server[0] if _server else None


def route_remote_commands(app: typer.Typer) -> None:
    impls: dict[str, Callable[..., None]] = {
        "sweep": remote_sweep,
        "status": remote_status,
        "report": remote_report,
    }
    for info in app.registered_commands:
        name = info.name
        if name in impls and info.callback is not None:
            info.callback = _routed(info.callback, impls[name])


def _routed(local: Callable[P, R], remote: Callable[..., None]) -> Callable[P, R | None]:
    @functools.wraps(local)  # typer reads the options from the wrapped function's signature
    def command(*args: P.args, **kwargs: P.kwargs) -> R | None:
        url = active_server()
        if url is None:
            return local(*args, **kwargs)
        remote(url, **kwargs)
        return None

    return command


def _client(url: str) -> ServiceClient:
    from autotune.extras import SERVICE_CLIENT, require
    from autotune.service.client import ServiceClient

    require("service", "--server", SERVICE_CLIENT)

    return ServiceClient(url)


def _refuse(option: str, value: object, hint: str) -> None:
    if value not in (None, False, [], ()):
        raise ConfigError(f"not available with --server: {hint}", field=option)


def _refuse_unknown(kwargs: Mapping[str, object], known: set[str]) -> None:
    for key, value in kwargs.items():
        if key not in known:
            _refuse(f"--{key.replace('_', '-')}", value, "this option runs locally only")


# -- sweep -----------------------------------------------------------------------------------


# The options of `autotune sweep` that remote_sweep knows (the others are refused when given).
SWEEP_OPTIONS = {
    "spec_file",
    "resume",
    "db",
    "until",
    "max_trials",
    "wall_clock",
    "executor",
    "workers",
    "ray_address",
    "out",
    "json_out",
}


def remote_sweep(url: str, **kw: Any) -> None:
    """Submit (or resume) the sweep on the service, then follow its events to the end."""
    _refuse_local_sweep_options(kw)
    spec_file: Path | None = kw.get("spec_file")
    resume: str | None = kw.get("resume")
    overrides: dict[str, OverrideValue] = {
        "max_trials": kw.get("max_trials"),
        "wall_clock_s": kw.get("wall_clock"),
        "until": kw.get("until"),
        "workers": kw.get("workers"),
        "executor": kw.get("executor"),
    }
    json_out = bool(kw.get("json_out"))
    with _client(url) as c:
        started = _start_sweep(c, spec_file, resume, overrides)
        name = started["name"]
        if not json_out:
            _echo_submitted(url, name, started["job"])
        final = _follow_or_detach(c, url, name, quiet=json_out)
    if json_out:
        typer.echo(json.dumps(final, indent=2))
    else:
        _print_status(final)
    raise typer.Exit(_exit_code(final))


def _refuse_local_sweep_options(kw: Mapping[str, object]) -> None:
    _refuse("--db", kw.get("db"), "the service uses its own database")
    _refuse("--out", kw.get("out"), "the service writes into its state folder")
    _refuse(
        "--ray-address",
        kw.get("ray_address"),
        "set execution.ray_address in the spec (the service checks it against its config)",
    )
    _refuse_unknown(kw, SWEEP_OPTIONS)


def _start_sweep(
    c: ServiceClient,
    spec_file: Path | None,
    resume: str | None,
    overrides: Mapping[str, OverrideValue],
) -> SubmitJSON:
    """Resume the stored sweep `resume`, or submit the spec in `spec_file` (exactly one)."""
    if resume is not None:
        if spec_file is not None:
            raise ConfigError(
                "with --server, --resume continues the stored spec; give no spec file",
                field="SPEC",
            )
        return c.resume_sweep(resume, **overrides)
    if spec_file is not None:
        try:
            text = spec_file.read_text()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the sweep spec: {exc.strerror or exc}", source=str(spec_file)
            ) from None
        return c.submit_sweep(text, **overrides)
    raise ConfigError("give a spec file, or --resume NAME", field="SPEC")


def _echo_submitted(url: str, name: str, job: JobJSON) -> None:
    where = (
        f"queued at position {job.get('queue_position')} behind jobs on the same GPUs"
        if job.get("state") == "queued"
        else f"job pid {job['pid']}"
    )
    typer.echo(f"sweep {name} submitted to {url} ({where})", err=True)


def _follow_or_detach(c: ServiceClient, url: str, name: str, *, quiet: bool) -> SweepStatusJSON:
    """The sweep's final status; Ctrl-C detaches (exit 130), the sweep keeps running."""
    try:
        return _follow(c, name, quiet=quiet)
    except KeyboardInterrupt:
        typer.echo(
            f"\ndetached: sweep {name} keeps running on the service; "
            f"`autotune --server {url} status {name}`",
            err=True,
        )
        raise typer.Exit(130) from None


def _follow(c: ServiceClient, name: str, *, quiet: bool) -> SweepStatusJSON:
    final: SweepStatusJSON | None = None
    for event, data in c.events(name):
        if event == "end":
            final = data
        elif event == "trial" and not quiet and data["status"] not in ("queued", "running"):
            value = "-" if data.get("value") is None else f"{data['value']:,.2f}"
            typer.echo(f"trial #{data['number']}: {data['status']} {value}", err=True)
        elif event == "best" and not quiet:
            typer.echo(f"best so far: #{data['number']} {data['value']:,.2f}", err=True)
    return final if final is not None else c.sweep_status(name)


def _exit_code(status: SweepStatusJSON) -> int:
    state = status.get("state")
    if state in ("failed", "failed_to_start", "interrupted", "cancelled"):
        return 1
    job = status.get("job")
    stop = job.get("stop_requested") if job else None
    if state == "stopped" and stop:
        return 128 + int(signal.Signals[stop])
    return 0


# -- status ----------------------------------------------------------------------------------


def remote_status(url: str, **kw: Any) -> None:
    _refuse("--db", kw.get("db"), "the service uses its own database")
    _refuse_unknown(kw, {"name", "db", "json_out"})
    name: str | None = kw.get("name")
    status: SweepStatusJSON | None = None
    listing: SweepListJSON | None = None
    with _client(url) as c:
        if name:
            status = c.sweep_status(name)
        else:
            listing = c.list_sweeps()
    if kw.get("json_out"):
        typer.echo(json.dumps(status if name else listing, indent=2))
        return
    if status is not None:
        _print_status(status)
    elif listing is not None:
        _print_list(url, listing)


def _print_list(url: str, data: SweepListJSON) -> None:
    if not data["sweeps"]:
        typer.echo(f"no sweeps on {url}")
    for r in data["sweeps"]:
        best = "-" if r["best_value"] is None else f"{r['best_value']:,.2f}"
        typer.echo(
            f"{r['name']:28s} {r['state']:15s} {r['trials']:4d} trials  best {best:>10s}  "
            f"updated {r['updated_at'] or '-'}"
        )


def _print_status(s: SweepStatusJSON) -> None:
    p = s["progress"]
    total = p["max_trials"] if p["max_trials"] is not None else "?"
    typer.echo(f"sweep {s['name']}: {s['state']} (database: {s['status'] or '-'})")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(s["counts"].items())) or "none"
    typer.echo(f"trials: {counts}; launched {p['launched']} of {total}")
    best = s.get("best")
    if best and best.get("value") is not None:
        cfg = " ".join(f"{k}={v}" for k, v in best["config"].items())
        typer.echo(f"best: #{best['number']} {best['value']:,.2f}  {cfg}")
    if s["failures_by_class"]:
        typer.echo("failures: " + ", ".join(f"{k} {v}" for k, v in s["failures_by_class"].items()))
    if s.get("stop_reason"):
        typer.echo(f"stop reason: {s['stop_reason']}")
    if s.get("error"):
        typer.echo(f"error: {s['error']}")
    job = s.get("job")
    log_tail = job.get("log_tail") if job else None
    if log_tail:
        typer.echo("job log (end):\n" + log_tail.rstrip()[-2000:])
    for step in s.get("next_steps") or []:
        typer.echo(f"next: {step}")


# -- report ----------------------------------------------------------------------------------


def remote_report(url: str, **kw: Any) -> None:
    """Fetch report.md, launch.sh and winner.json into --out (default reports/NAME/)."""
    _refuse("--db", kw.get("db"), "the service uses its own database")
    _refuse_unknown(kw, {"name", "db", "out", "no_plots", "json_out"})
    name: str = kw["name"]
    out = Path(kw.get("out") or Path("reports") / name)
    with _client(url) as c:
        report_md = c.report_md(name)
        launch_sh = c.launch_sh(name)
        winner = c.winner_json(name)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text(report_md)
        (out / "winner.json").write_text(json.dumps(winner, indent=2) + "\n")
        if launch_sh is not None:
            (out / "launch.sh").write_text(launch_sh)
            (out / "launch.sh").chmod(0o755)
    except OSError as exc:
        raise ConfigError(f"cannot write the report: {exc}", source=str(out)) from None
    paths = {
        "out_dir": str(out.resolve()),
        "report_md": str((out / "report.md").resolve()),
        "winner_json": str((out / "winner.json").resolve()),
        "launch_sh": str((out / "launch.sh").resolve()) if launch_sh is not None else None,
        "simulated": bool(winner.get("simulated")),
        "notes": list(winner.get("notes") or [])
        + ["plots stay on the service (fetched: report.md, launch.sh, winner.json)"],
    }
    if kw.get("json_out"):
        typer.echo(json.dumps(paths, indent=2))
        return
    typer.echo(f"report of sweep {name} (from {url}): {paths['report_md']}")
    if paths["simulated"]:
        typer.echo("  SIMULATED: figures come from the simulated engine, not a real GPU")
    if paths["launch_sh"]:
        typer.echo(f"  launch:  {paths['launch_sh']}")
    typer.echo(f"  winner:  {paths['winner_json']}")
