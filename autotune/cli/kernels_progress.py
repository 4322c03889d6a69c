"""`autotune kernels tune --progress`: the tuner's lines as a rich bar, JSON events, or plain
lines (TuneProgress)."""

from __future__ import annotations

import math
import re
import time
from typing import Any

import typer

_ITEM_LINE = re.compile(
    r"^(?P<item>\S+)\s+best\s+(?P<us>\S+) us .*\sevals (?P<evals>\d+)/(?P<space>\d+)\s+"
    r"(?P<wall>[\d.]+)s$"
)


class TuneProgress:
    """`kernels tune` progress on stderr (`--progress`): a rich bar of items done (with the
    tuner's lines above it), JSON events, or nothing; without either, the tuner's lines go to
    stdout unless --json.

    JSON events: `start`, `item` (an item finished: `item`, `best_us`, `evals`), `log` (another
    line of the tuner), `end` (the final state from the run's summary). Each carries the
    counters `done` (items finished), `total`, `failed` (items with no valid config),
    `evaluations` and `eta_s`.
    """

    def __init__(self, total: int, *, mode: str, echo: bool) -> None:
        self.total, self.mode, self.echo = total, mode, echo
        self.done: set[str] = set()
        self.failed: set[str] = set()
        self.evaluations = 0
        self.t0 = time.monotonic()
        self._events: Any = None
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> TuneProgress:
        self.t0 = time.monotonic()
        if self.mode == "json":
            from autotune.sweep.progress import ProgressEvents

            self._events = ProgressEvents(command="kernels tune")
            self._events.emit("start", **self.counters())
        elif self.mode == "rich":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._progress = Progress(
                TextColumn("[bold]kernels tune"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("evals {task.fields[evals]}"),
                TextColumn("failed {task.fields[failed]}"),
                TextColumn("ETA {task.fields[eta]}"),
                console=Console(stderr=True),
            )
            self._progress.start()
            self._task = self._progress.add_task("", total=self.total, evals=0, failed=0, eta="?")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def counters(self, *, eta: float | None = None) -> dict[str, Any]:
        return {
            "done": len(self.done),
            "total": self.total,
            "failed": len(self.failed),
            "evaluations": self.evaluations,
            "eta_s": None if eta is None else round(eta, 1),
        }

    def eta(self) -> float | None:
        from autotune.sweep.progress import eta_seconds

        return eta_seconds(
            done=len(self.done),
            total=self.total,
            elapsed_s=time.monotonic() - self.t0,
            deadline_s=None,
        )

    def log(self, line: str) -> None:
        """The tuner's `log` callback: one line per finished item, and notes."""
        m = _ITEM_LINE.match(line.strip())
        if m is not None:
            key, us = m["item"], float(m["us"])
            if key not in self.done:
                self.evaluations += int(m["evals"])
            self.done.add(key)
            if us != us or us == float("inf"):
                self.failed.add(key)
            else:
                self.failed.discard(key)
        if self._events is not None:
            if m is None:
                self._events.emit("log", text=line, **self.counters(eta=self.eta()))
            else:
                self._events.emit(
                    "item",
                    item=m["item"],
                    best_us=float(m["us"]) if math.isfinite(float(m["us"])) else None,
                    evals=int(m["evals"]),
                    **self.counters(eta=self.eta()),
                )
            return
        if self._progress is not None:
            from autotune.sweep.progress import fmt_duration

            self._progress.console.print(line, highlight=False, markup=False)
            self._progress.update(
                self._task,
                completed=len(self.done),
                evals=self.evaluations,
                failed=len(self.failed),
                eta=fmt_duration(self.eta()),
            )
        elif self.echo:
            typer.echo(line)

    def finish(self, summary: Any) -> None:
        """The final state from the run's summary (items served from the cache included)."""
        self.evaluations = summary.evaluations
        self.done = {str(k) for k in summary.results}
        self.failed = {
            k for k, r in summary.results.items() if not math.isfinite(float(r.best_us))
        }
        if self._events is not None:
            self._events.emit(
                "end",
                items=len(summary.results),
                skipped=len(summary.skipped),
                wall_s=round(summary.wall_s, 1),
                files=len(summary.files),
                **self.counters(eta=0.0),
            )
        elif self._progress is not None:
            self._progress.update(
                self._task,
                completed=len(self.done),
                evals=self.evaluations,
                failed=len(self.failed),
                eta="0:00",
            )
