"""Reports of a sweep: report.md, launch.sh, a systemd unit, winner.json and PNG plots.

    write_report(store, "night-1")            # -> ReportPaths, into reports/night-1/

Heavy imports (jinja2, matplotlib, optuna, sqlmodel) happen when a report is written, not when
this package is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.report.writer import ReportPaths
    from autotune.store.db import Store

__all__ = ["ReportPaths", "write_report"]


def write_report(
    store: Store, sweep_name: str, out_dir: Path | str | None = None, *, plots: bool = True
) -> ReportPaths:
    """Write the report of sweep `sweep_name` (default folder reports/<sweep-name>/)."""
    from autotune.report.writer import write_report as _write

    return _write(store, sweep_name, out_dir, plots=plots)


def __getattr__(name: str) -> object:
    if name == "ReportPaths":
        from autotune.report.writer import ReportPaths

        return ReportPaths
    raise AttributeError(f"module 'autotune.report' has no attribute {name!r}")
