"""llama.cpp engine adapter (llama-server): flags by llama-cpp-python sdist version, startup-log
parsing, failure classes, and finding/building the binary (binary.py, the only module that does
I/O). See flags.py for the version table and logs.py for the log formats.
"""

from __future__ import annotations

from autotune.engines.llamacpp.adapter import LlamaCppAdapter
from autotune.engines.llamacpp.command import DEFAULT_LAUNCHER, build_command
from autotune.engines.llamacpp.failures import classify_failure
from autotune.engines.llamacpp.flags import (
    FIELDS,
    build_flags,
    canonical_field,
    catalog_version,
    field_flag,
    flag_names,
    known_fields,
    llama_cpp_commit,
    option_spec,
    supported_versions,
    value_set,
    version_index,
)
from autotune.engines.llamacpp.logs import (
    LlamaStartup,
    is_ready_line,
    parse_startup,
    parse_startup_details,
)
from autotune.engines.llamacpp.metrics import METRICS

__all__ = [
    "DEFAULT_LAUNCHER",
    "FIELDS",
    "METRICS",
    "LlamaCppAdapter",
    "LlamaStartup",
    "build_command",
    "build_flags",
    "canonical_field",
    "catalog_version",
    "classify_failure",
    "field_flag",
    "flag_names",
    "is_ready_line",
    "known_fields",
    "llama_cpp_commit",
    "option_spec",
    "parse_startup",
    "parse_startup_details",
    "supported_versions",
    "value_set",
    "version_index",
]
