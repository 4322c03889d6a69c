"""The argv that launches one llama-server for a config and version."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.engines._command import launch_prefix
from autotune.engines.base import LaunchCommand
from autotune.engines.llamacpp.flags import build_flags

DEFAULT_LAUNCHER: tuple[str, ...] = ("llama-server",)


def build_command(
    config: Mapping[str, Any],
    *,
    model: str,
    version: str,
    host: str = "127.0.0.1",
    port: int = 8080,
    launcher: Sequence[str] | None = None,
) -> LaunchCommand:
    """`launcher --model MODEL --host HOST --port PORT <flags>`.

    Args:
        config: llama-server field names -> values (None = let the engine decide).
        model: path of the GGUF file passed to --model.
        version: llama-cpp-python sdist version whose llama.cpp the binary was built from.
        launcher: argv prefix, normally `[path/to/llama-server]` (binary.find_binary()).

    Raises:
        ConfigError, UnknownNameError, UnsupportedFlagError: bad field, value or version.
    """
    prefix = launch_prefix(
        launcher,
        DEFAULT_LAUNCHER,
        model=model,
        model_field="--model",
        port=port,
    )
    flags = build_flags(config, version)
    argv = [*prefix, "--model", model, "--host", host, "--port", str(port), *flags]
    # Log colours default to auto (off on a pipe), so the log parses as plain text.
    return LaunchCommand(argv=argv)
