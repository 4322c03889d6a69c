"""LlamaCppAdapter: the EngineAdapter for llama.cpp's llama-server (pure apart from choosing the
default binary once, at construction)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune.engines._metrics import MetricSpec
from autotune.engines.base import LaunchCommand
from autotune.engines.llamacpp import command, failures, logs
from autotune.engines.llamacpp.flags import flag_names, supported_versions
from autotune.engines.llamacpp.metrics import METRICS


class LlamaCppAdapter:
    """Launch argv by llama-cpp-python sdist version, startup-log parsing, failure classes.

    `binary`: the llama-server to launch when build_command gets no launcher. Default: found
    once here by binary.find_binary() ($AUTOTUNE_LLAMA_SERVER, the build cache, PATH), else the
    bare name `llama-server`. After construction every method is pure.
    """

    name = "llamacpp"
    metrics: Mapping[str, MetricSpec] = METRICS

    def __init__(self, binary: str | Path | None = None) -> None:
        if binary is None:
            from autotune.engines.llamacpp.binary import find_binary

            found = find_binary()
            binary = found if found is not None else command.DEFAULT_LAUNCHER[0]
        self.binary = str(binary)
        self.supported_versions: tuple[str, ...] = supported_versions()

    def build_command(
        self,
        config: Mapping[str, Any],
        *,
        model: str,
        version: str,
        host: str = "127.0.0.1",
        port: int = 8080,
        launcher: Sequence[str] | None = None,
    ) -> LaunchCommand:
        return command.build_command(
            config,
            model=model,
            version=version,
            host=host,
            port=port,
            launcher=[self.binary] if launcher is None else launcher,
        )

    # The engine's own functions (pure), called as methods of the adapter.
    flag_names = staticmethod(flag_names)
    is_ready_line = staticmethod(logs.is_ready_line)
    parse_startup = staticmethod(logs.parse_startup)
    classify_failure = staticmethod(failures.classify_failure)

    def health_path(self) -> str:
        return "/health"  # 503 while the model loads, 200 when ready

    def version_path(self) -> str | None:
        return None  # /props states a build number, not a release autotune catalogues
