"""The argv and environment that launch one vLLM OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.engines._command import launch_prefix
from autotune.engines.base import LaunchCommand
from autotune.engines.vllm.flags import build_flags

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
        version: vLLM release the flags must follow ("0.10.0" .. "0.34.0").
        launcher: argv prefix replacing `vllm serve`.

    Raises:
        ConfigError, UnknownNameError, UnsupportedFlagError: bad field, value or version.
    """
    prefix = launch_prefix(
        launcher,
        DEFAULT_LAUNCHER,
        model=model,
        model_field="model",
        port=port,
        host=host,
        check_host=True,
    )
    flags, env = build_flags(config, version)
    model_args = [model] if prefix[-1] == "serve" else ["--model", model]
    argv = [*prefix, *model_args, "--host", host, "--port", str(port), *flags]
    return LaunchCommand(argv=argv, env=env)
