"""VLLMAdapter: the EngineAdapter for vLLM 0.10.0 .. 0.33.0 (pure: no I/O, no state)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.engines.base import Failure, LaunchCommand
from autotune.engines.vllm import command, failures, logs
from autotune.engines.vllm.flags import flag_names, supported_versions
from autotune.engines.vllm.metrics import METRICS, MetricSpec, metrics_for


class VLLMAdapter:
    """Launch argv/env by engine version, startup-log parsing and failure classification."""

    name = "vllm"
    supported_versions: tuple[str, ...] = supported_versions()
    metrics: Mapping[str, MetricSpec] = METRICS

    def build_command(
        self,
        config: Mapping[str, Any],
        *,
        model: str,
        version: str,
        host: str = "127.0.0.1",
        port: int = 8000,
        launcher: Sequence[str] | None = None,
    ) -> LaunchCommand:
        return command.build_command(
            config, model=model, version=version, host=host, port=port, launcher=launcher
        )

    def flag_names(self, version: str) -> set[str]:
        return flag_names(version)

    def metrics_for(self, version: str) -> dict[str, MetricSpec]:
        return metrics_for(version)

    def health_path(self) -> str:
        return "/health"

    def is_ready_line(self, line: str) -> bool:
        return logs.is_ready_line(line)

    def parse_startup(self, log_text: str) -> logs.VLLMLaunchReport:
        return logs.parse_startup(log_text)

    def classify_failure(
        self,
        log_text: str,
        returncode: int | None,
        *,
        was_ready: bool,
        timed_out: bool = False,
    ) -> Failure:
        return failures.classify_failure(
            log_text, returncode, was_ready=was_ready, timed_out=timed_out
        )
