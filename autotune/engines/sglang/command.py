"""The argv and environment that launch one SGLang server for a config and engine version."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.engines.base import LaunchCommand
from autotune.engines.sglang.flags import build_flags
from autotune.errors import ConfigError

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
    if not model:
        raise ConfigError("model path must not be empty", field="--model-path")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"expects a TCP port 1..65535, got {port!r}", field="--port")
    prefix = list(DEFAULT_LAUNCHER if launcher is None else launcher)
    if not prefix or not all(isinstance(p, str) and p for p in prefix):
        raise ConfigError(f"launcher must be non-empty strings, got {launcher!r}")
    flags, env = build_flags(config, version)
    argv = [*prefix, "--model-path", model, "--host", host, "--port", str(port), *flags]
    return LaunchCommand(argv=argv, env=env)
