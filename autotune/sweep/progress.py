"""The progress display of a sweep: a rich bar (trials done of the budget, best so far, ETA) on
stderr, and one line per finished trial above it. Silent in --json mode."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def fmt_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


def eta_seconds(
    *,
    done: int,
    total: int | None,
    elapsed_s: float,
    deadline_s: float | None,
) -> float | None:
    """Time to the end of the budget: remaining trials at the pace so far, or the deadline,
    whichever comes first (None when neither is known)."""
    by_trials = None
    if total is not None and done > 0:
        by_trials = max(total - done, 0) * elapsed_s / done
    options = [x for x in (by_trials, deadline_s) if x is not None]
    return min(options) if options else None


class SweepProgress:
    """Context manager; `update()` after each trial, `note()` for a line above the bar."""

    def __init__(self, name: str, *, enabled: bool = True, metric: str = "objective"):
        self.name = name
        self.enabled = enabled
        self.metric = metric
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._console: Console | None = None
        self.t0 = time.monotonic()

    def __enter__(self) -> SweepProgress:
        if not self.enabled:
            return self
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("best {task.fields[best]}"),
            TextColumn("running {task.fields[running]}"),
            TextColumn("ETA {task.fields[eta]}"),
            console=self._console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(
            f"sweep {self.name}", total=None, best="-", running=0, eta="?"
        )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(
        self,
        *,
        done: int,
        total: int | None,
        best: float | None,
        running: int,
        deadline_s: float | None,
    ) -> None:
        if self._progress is None or self._task is None:
            return
        eta = eta_seconds(
            done=done, total=total, elapsed_s=time.monotonic() - self.t0, deadline_s=deadline_s
        )
        self._progress.update(
            self._task,
            completed=done,
            total=total,
            best=fmt_value(best),
            running=running,
            eta=fmt_duration(eta),
        )

    def note(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, highlight=False, markup=False)
