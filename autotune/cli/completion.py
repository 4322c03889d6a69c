"""`autotune completion bash|zsh|fish|powershell`: print the shell completion script (the root
`--install-completion` installs it for the current shell; `--show-completion` prints it for the
shell it detects)."""

from __future__ import annotations

from typing import Literal

import typer


def completion(
    shell: Literal["bash", "zsh", "fish", "powershell"] = typer.Argument(
        ..., help="The shell to complete in."
    ),
) -> None:
    """Print the completion script for SHELL, e.g. `autotune completion bash >>
    ~/.bash_completion` or `eval "$(autotune completion zsh)"`."""
    from typer._completion_shared import get_completion_script

    typer.echo(
        get_completion_script(prog_name="autotune", complete_var="_AUTOTUNE_COMPLETE", shell=shell)
    )


def register(app: typer.Typer) -> None:
    app.command("completion")(completion)
