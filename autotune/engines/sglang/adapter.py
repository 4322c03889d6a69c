"""SGLangAdapter: the EngineAdapter for SGLang 0.5.9 .. 0.5.23 (pure: no I/O, no state)."""

from __future__ import annotations

from collections.abc import Mapping

from autotune.engines.sglang import command, failures, logs
from autotune.engines.sglang.flags import SUPPORTED_VERSIONS, flag_names
from autotune.engines.sglang.metrics import METRICS, MetricSpec


class SGLangAdapter:
    """Launch argv/env by engine version, startup-log parsing and failure classification."""

    name = "sglang"
    supported_versions: tuple[str, ...] = SUPPORTED_VERSIONS
    metrics: Mapping[str, MetricSpec] = METRICS

    # The engine's own functions (pure), called as methods of the adapter.
    build_command = staticmethod(command.build_command)
    flag_names = staticmethod(flag_names)
    is_ready_line = staticmethod(logs.is_ready_line)
    parse_startup = staticmethod(logs.parse_startup)
    classify_failure = staticmethod(failures.classify_failure)

    def health_path(self) -> str:
        return "/health"

    def version_path(self) -> str | None:
        # 0.5.9 .. 0.5.23: {..., "version": __version__} (tests/engines/test_served_version)
        return "/server_info"
