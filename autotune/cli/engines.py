"""`autotune engines build llama-server`: build llama.cpp's server from the pinned
llama-cpp-python sdist into the cache the llama.cpp adapter reads (autotune.engines.llamacpp.build;
scripts/build-llama-server is a wrapper around this command)."""

from __future__ import annotations

from pathlib import Path

import typer

from autotune.cli._common import JSON_OPTION, emit_json

engines_app = typer.Typer(help="Engine binaries: build them from source.", no_args_is_help=True)
build_app = typer.Typer(
    help="Build an engine from source into autotune's cache.", no_args_is_help=True
)


@build_app.command("llama-server")
def llama_server(
    cuda: bool = typer.Option(
        False, "--cuda", help="CUDA build (nvcc needed; arch: $AUTOTUNE_LLAMA_CUDA_ARCH, 90)."
    ),
    sdist: Path | None = typer.Option(
        None,
        "--sdist",
        metavar="FILE",
        help="A llama_cpp_python-X.Y.Z.tar.gz (or a --slim-sdist copy) instead of downloading it.",
    ),
    version: str | None = typer.Option(
        None,
        "--version",
        metavar="X.Y.Z",
        help="llama-cpp-python sdist version (default: pinned).",
    ),
    cache_dir: Path | None = typer.Option(
        None,
        "--cache-dir",
        metavar="DIR",
        help="Cache root (default: $AUTOTUNE_LLAMA_CACHE or ~/.cache/autotune/llama-server).",
    ),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, help="Parallel compile jobs."),
    force: bool = typer.Option(False, "--force", help="Rebuild although the cache is current."),
    slim_sdist: Path | None = typer.Option(
        None,
        "--slim-sdist",
        metavar="OUT",
        help="Only write a slim copy of the sdist (about 15 MB) to OUT, for a host without PyPI.",
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Build llama-server (CPU, or --cuda) from the llama.cpp that the pinned llama-cpp-python
    sdist vendors; reuses the cached build when it is current. Prints the binary's path on
    stdout (progress on stderr)."""
    from autotune.engines.llamacpp import build as b
    from autotune.errors import AutotuneError, ConfigError

    ver = version or b.PINNED_VERSION
    try:
        if slim_sdist is not None:
            path = b.slim_sdist(slim_sdist, version=ver, sdist=sdist)
            if json_out:
                emit_json({"slim_sdist": str(path)})
            else:
                typer.echo(str(path))
            return
        res = b.build_llama_server(
            version=ver, cuda=cuda, cache_dir=cache_dir, jobs=jobs, force=force, sdist=sdist
        )
    except b.BuildError as exc:
        if exc.exit_code == 2:
            raise ConfigError(str(exc)) from None
        raise AutotuneError(f"building llama-server {ver}: {exc}") from None
    if json_out:
        emit_json(res.to_json())
    else:
        typer.echo(str(res.binary))


def register(app: typer.Typer) -> None:
    engines_app.add_typer(build_app, name="build")
    app.add_typer(engines_app, name="engines")
