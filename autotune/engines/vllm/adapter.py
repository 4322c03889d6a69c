"""VLLMAdapter: the EngineAdapter for vLLM 0.10.0 .. 0.34.0 (pure: no I/O, no state)."""

from __future__ import annotations

from collections.abc import Mapping

from autotune.engines.vllm import command, failures, logs
from autotune.engines.vllm.flags import flag_names, supported_versions
from autotune.engines.vllm.metrics import METRICS, MetricSpec, metrics_for


class VLLMAdapter:
    """Launch argv/env by engine version, startup-log parsing and failure classification."""

    name = "vllm"
    supported_versions: tuple[str, ...] = supported_versions()
    metrics: Mapping[str, MetricSpec] = METRICS

    # The engine's own functions (pure), called as methods of the adapter.
    build_command = staticmethod(command.build_command)
    flag_names = staticmethod(flag_names)
    is_ready_line = staticmethod(logs.is_ready_line)
    parse_startup = staticmethod(logs.parse_startup)
    classify_failure = staticmethod(failures.classify_failure)
    metrics_for = staticmethod(metrics_for)

    def health_path(self) -> str:
        return "/health"

    def version_path(self) -> str | None:
        return "/version"  # {"version": VLLM_VERSION}: 0.10.0 .. 0.34.0 (test_served_version)
