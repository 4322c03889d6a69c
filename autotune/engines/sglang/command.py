"""The argv and environment that launch one SGLang server for a config and engine version."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.engines._command import launch_prefix
from autotune.engines.base import LaunchCommand
from autotune.engines.sglang.flags import build_flags

DEFAULT_LAUNCHER: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")


def build_command(
    config: Mapping[str, Any],
    *,
    model: str,
    version: str,
    host: str = "127.0.0.1",
    port: int = 30000,
    launcher: Sequence[str] | None = None,
) -> LaunchCommand:
    """`launcher --model-path MODEL --host HOST --port PORT <flags>` plus the env the config needs.

    Args:
        config: engine field names -> values (None = let the engine decide).
        model: local folder or hub id passed to --model-path.
        version: SGLang version the flags must follow ("0.5.9" .. "0.5.23").
        launcher: argv prefix replacing `python3 -m sglang.launch_server` (the simulator passes
            its own module; a venv passes its interpreter).

    Raises:
        ConfigError, UnknownNameError, UnsupportedFlagError: bad field, value or version.
    """
    prefix = launch_prefix(
        launcher,
        DEFAULT_LAUNCHER,
        model=model,
        model_field="--model-path",
        port=port,
    )
    flags, env = build_flags(config, version)
    argv = [*prefix, "--model-path", model, "--host", host, "--port", str(port), *flags]
    return LaunchCommand(argv=argv, env=env)
