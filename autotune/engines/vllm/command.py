"""The argv and environment that launch one vLLM OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.engines.base import LaunchCommand
from autotune.engines.vllm.flags import build_flags
from autotune.errors import ConfigError

# `vllm serve MODEL` (the CLI, all catalogued releases); the older module entry point takes the
# model as `--model`: ("python3", "-m", "vllm.entrypoints.openai.api_server").
DEFAULT_LAUNCHER: tuple[str, ...] = ("vllm", "serve")
API_SERVER_LAUNCHER: tuple[str, ...] = ("python3", "-m", "vllm.entrypoints.openai.api_server")


def build_command(
    config: Mapping[str, Any],
    *,
    model: str,
    version: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    launcher: Sequence[str] | None = None,
) -> LaunchCommand:
    """`vllm serve MODEL --host HOST --port PORT <flags>` plus the env the config needs.

    A launcher whose last word is `serve` (`vllm serve`, `/venv/bin/vllm serve`) gets the model
    as its positional argument; any other launcher (the api_server module, the simulator)
    gets `--model MODEL`, which every catalogued release accepts.

    Args:
        config: vLLM field names (plus the search space's speculative fields) -> values
            (None = let the engine decide).
        model: local folder or hub id.
        version: vLLM release the flags must follow ("0.10.0" .. "0.33.0").
        launcher: argv prefix replacing `vllm serve`.

    Raises:
        ConfigError, UnknownNameError, UnsupportedFlagError: bad field, value or version.
    """
    if not model:
        raise ConfigError("model path must not be empty", field="model")
    if not host:
        raise ConfigError("host must not be empty", field="--host")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"expects a TCP port 1..65535, got {port!r}", field="--port")
    prefix = list(DEFAULT_LAUNCHER if launcher is None else launcher)
    if not prefix or not all(isinstance(p, str) and p for p in prefix):
        raise ConfigError(f"launcher must be non-empty strings, got {launcher!r}")
    flags, env = build_flags(config, version)
    model_args = [model] if prefix[-1] == "serve" else ["--model", model]
    argv = [*prefix, *model_args, "--host", host, "--port", str(port), *flags]
    return LaunchCommand(argv=argv, env=env)
