"""The progress display of a sweep on stderr, in one of three modes (`--progress`):

- `rich`: a bar (trials done of the budget, best so far, ETA) and one line per finished trial
  above it;
- `json`: machine-readable events, one JSON object a line (see `ProgressEvents`);
- `none`: nothing.

`auto` (the CLI default) is `rich` when stderr is a terminal, else `none`; `--json` (the result
on stdout) does not change it.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

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


ProgressMode = Literal["rich", "json", "none"]
PROGRESS_CHOICES = ("auto", "rich", "json", "none")


def resolve_progress(choice: str | None) -> ProgressMode:
    """`--progress` -> the mode to run (`auto`/None: rich on a terminal, else none)."""
    if choice in (None, "auto"):
        isatty = getattr(sys.stderr, "isatty", None)
        return "rich" if isatty is not None and isatty() else "none"
    if choice == "rich":
        return "rich"
    if choice == "json":
        return "json"
    if choice == "none":
        return "none"
    from autotune.errors import ConfigError

    raise ConfigError(
        f"unknown progress mode {choice!r}; valid: {', '.join(PROGRESS_CHOICES)}",
        field="--progress",
    )


class ProgressEvents:
    """JSON-lines progress events on stderr: each line one object with `event` (its kind),
    `time` (ISO 8601, UTC), `elapsed_s` and the fields the caller gives (counters)."""

    def __init__(self, **common: Any) -> None:
        self.common = common
        self.t0 = time.monotonic()

    def emit(self, event: str, **fields: Any) -> None:
        obj = {
            "event": event,
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "elapsed_s": round(time.monotonic() - self.t0, 3),
            **self.common,
            **fields,
        }
        stream = sys.stderr
        stream.write(json.dumps(obj, default=str) + "\n")
        stream.flush()


class SweepProgress:
    """Context manager; `update()` after each poll, `trial()` per finished trial, `note()` for
    a line above the bar, `finish()` with the final state (the last line shows it).

    JSON events: `start`, `trial` (one per finished trial), `progress` (when the counters
    change), `note`, `end` (the final state). Each carries the counters: `done` (trials
    finished), `running`, `launched` (done + running), `failed`, `total` (the trial budget, or
    null), `best` (best objective so far, or null), `metric`, `eta_s`.
    """

    def __init__(
        self,
        name: str,
        *,
        enabled: bool = True,
        metric: str = "objective",
        mode: ProgressMode | None = None,
        total: int | None = None,
    ):
        self.name = name
        self.mode: ProgressMode = mode if mode is not None else ("rich" if enabled else "none")
        self.enabled = self.mode != "none"
        self.metric = metric
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._console: Console | None = None
        self._events: ProgressEvents | None = None
        self._last: tuple[Any, ...] | None = None
        self.t0 = time.monotonic()
        self.done = 0
        self.running = 0
        self.failed = 0
        self.total = total
        self.best: float | None = None
        self.deadline_s: float | None = None

    def __enter__(self) -> SweepProgress:
        self.t0 = time.monotonic()
        if self.mode == "json":
            self._events = ProgressEvents(sweep=self.name, metric=self.metric)
            self._events.emit("start", **self.counters())
            return self
        if self.mode != "rich":
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
            f"sweep {self.name}", total=self.total, best="-", running=0, eta="?"
        )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def eta(self) -> float | None:
        return eta_seconds(
            done=self.done,
            total=self.total,
            elapsed_s=time.monotonic() - self.t0,
            deadline_s=self.deadline_s,
        )

    def counters(self, *, eta: float | None = None) -> dict[str, Any]:
        return {
            "done": self.done,
            "running": self.running,
            "launched": self.done + self.running,
            "failed": self.failed,
            "total": self.total,
            "best": self.best,
            "eta_s": None if eta is None else round(eta, 1),
        }

    def update(
        self,
        *,
        done: int,
        total: int | None,
        best: float | None,
        running: int,
        deadline_s: float | None,
    ) -> None:
        self.done, self.total, self.best, self.running = done, total, best, running
        self.deadline_s = deadline_s
        eta = self.eta()
        if self._events is not None:
            state = (done, total, best, running)
            if state != self._last:
                self._last = state
                self._events.emit("progress", **self.counters(eta=eta))
            return
        if self._progress is None or self._task is None:
            return
        self._progress.update(
            self._task,
            completed=done,
            total=total,
            best=fmt_value(best),
            running=running,
            eta=fmt_duration(eta),
        )

    def trial(
        self,
        number: int,
        status: str,
        line: str,
        *,
        done: int | None = None,
        running: int | None = None,
        best: float | None = None,
    ) -> None:
        """A trial finished with `status` (`line`: its one-line summary); `done`, `running`
        and `best`: the counters after it (else those of the last update)."""
        if status == "failed":
            self.failed += 1
        if done is not None:
            self.done = done
        if running is not None:
            self.running = running
        if best is not None:
            self.best = best
        if self._events is not None:
            self._events.emit(
                "trial", number=number, status=status, text=line, **self.counters(eta=self.eta())
            )
            return
        self.note(line)
        if self._progress is not None and self._task is not None:
            self._progress.update(
                self._task,
                completed=self.done,
                best=fmt_value(self.best),
                running=self.running,
                eta=fmt_duration(self.eta()),
            )

    def note(self, text: str) -> None:
        if self._events is not None:
            self._events.emit("note", text=text)
        elif self._progress is not None:
            self._progress.console.print(text, highlight=False, markup=False)

    def finish(
        self, *, done: int, best: float | None, status: str, stop_reason: str | None = None
    ) -> None:
        """The final state: nothing running, nothing left; the bar's (or the events') last
        line shows it, not the state of the previous poll."""
        self.done, self.best, self.running = done, best, 0
        if self._events is not None:
            self._events.emit(
                "end", status=status, stop_reason=stop_reason, **self.counters(eta=0.0)
            )
            return
        if self._progress is None or self._task is None:
            return
        self._progress.update(
            self._task,
            completed=done,
            total=self.total if self.total is not None else done,
            best=fmt_value(best),
            running=0,
            eta=fmt_duration(0),
        )
