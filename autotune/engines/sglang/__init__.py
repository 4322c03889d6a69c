"""SGLang engine adapter: flags by version, startup-log parsing and rendering, failure classes.

Pure functions and data; `autotune.process` runs the processes. See flags.py for the version
table (FIELD-NOTES P13) and logs.py / logformat.py for the log formats (reference §3).
"""

from __future__ import annotations

from autotune.engines.sglang.adapter import SGLangAdapter
from autotune.engines.sglang.command import DEFAULT_LAUNCHER, build_command
from autotune.engines.sglang.failures import classify_failure
from autotune.engines.sglang.flags import (
    FIELDS,
    SUPPORTED_VERSIONS,
    build_flags,
    canonical_field,
    field_flag,
    flag_names,
    flag_spec,
    parse_version,
)
from autotune.engines.sglang.logformat import (
    FAILURE_KINDS,
    format_failure,
    format_startup_lines,
    torch_oom_message,
)
from autotune.engines.sglang.logs import (
    READY_TEXT,
    SIMULATED_MARKER,
    BatchLine,
    is_ready_line,
    parse_batch_line,
    parse_startup,
    split_prefix,
    strip_prefix,
)
from autotune.engines.sglang.metrics import METRICS, MetricSpec

__all__ = [
    "DEFAULT_LAUNCHER",
    "FAILURE_KINDS",
    "FIELDS",
    "METRICS",
    "READY_TEXT",
    "SIMULATED_MARKER",
    "SUPPORTED_VERSIONS",
    "BatchLine",
    "MetricSpec",
    "SGLangAdapter",
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
    "parse_batch_line",
    "parse_startup",
    "parse_version",
    "split_prefix",
    "strip_prefix",
    "torch_oom_message",
]
