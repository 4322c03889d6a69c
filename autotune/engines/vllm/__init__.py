"""vLLM engine adapter: flags by release, startup-log parsing and rendering, failure classes,
metrics.

Pure functions and data; `autotune.process` runs the processes. See flags.py for the version
table (_catalog.py, generated from the PyPI wheels by tests/engines/regen_vllm_catalog.py; read
by releases.py) and logs.py / logformat.py / failure_lines.py for the log formats.
"""

from __future__ import annotations

from autotune.engines.vllm.adapter import VLLMAdapter
from autotune.engines.vllm.command import API_SERVER_LAUNCHER, DEFAULT_LAUNCHER, build_command
from autotune.engines.vllm.failure_lines import FAILURE_KINDS, format_failure
from autotune.engines.vllm.failures import classify_failure
from autotune.engines.vllm.flags import (
    FIELDS,
    SPECULATIVE_FIELDS,
    at_least,
    build_flags,
    canonical_field,
    compilation_keys,
    field_flag,
    flag_names,
    flag_spec,
    parse_version,
    speculative_config,
    speculative_methods,
    supported_versions,
)
from autotune.engines.vllm.logformat import format_startup_lines
from autotune.engines.vllm.logs import (
    READY_TEXT,
    SIMULATED_MARKER,
    VLLMLaunchReport,
    is_ready_line,
    parse_startup,
    split_prefix,
    strip_prefix,
)
from autotune.engines.vllm.metrics import METRICS, MetricSpec, metrics_for

__all__ = [
    "API_SERVER_LAUNCHER",
    "DEFAULT_LAUNCHER",
    "FAILURE_KINDS",
    "FIELDS",
    "METRICS",
    "READY_TEXT",
    "SIMULATED_MARKER",
    "SPECULATIVE_FIELDS",
    "MetricSpec",
    "VLLMAdapter",
    "VLLMLaunchReport",
    "at_least",
    "build_command",
    "build_flags",
    "canonical_field",
    "classify_failure",
    "field_flag",
    "flag_names",
    "flag_spec",
    "format_failure",
    "format_startup_lines",
    "is_ready_line",
    "metrics_for",
    "parse_startup",
    "parse_version",
    "speculative_config",
    "compilation_keys",
    "speculative_methods",
    "split_prefix",
    "strip_prefix",
    "supported_versions",
]
