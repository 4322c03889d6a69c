"""What every engine's command builder checks first: the launcher's own arguments (model, host,
port, the argv prefix that replaces the engine's default launcher)."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.errors import ConfigError


def launch_prefix(
    launcher: Sequence[str] | None,
    default: Sequence[str],
    *,
    model: str,
    model_field: str,
    port: int,
    host: str = "",
    check_host: bool = False,
) -> list[str]:
    """The argv prefix (`launcher`, else the engine's `default`), once the model, the host (with
    `check_host`: vLLM checks it) and the port are valid.

    Raises:
        ConfigError: an empty model (naming `model_field`) or host, a port outside 1..65535, or
            a launcher that is not a non-empty list of non-empty strings.
    """
    if not model:
        raise ConfigError("model path must not be empty", field=model_field)
    if check_host and not host:
        raise ConfigError("host must not be empty", field="--host")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError(f"expects a TCP port 1..65535, got {port!r}", field="--port")
    prefix = list(default if launcher is None else launcher)
    if not prefix or not all(isinstance(p, str) and p for p in prefix):
        raise ConfigError(f"launcher must be non-empty strings, got {launcher!r}")
    return prefix
