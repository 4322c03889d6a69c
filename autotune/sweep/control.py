"""What bounds a running sweep, shared by `run_sweep` and the loop: the budget (trials, wall
clock, a deadline), the stop requests that signals and the clock make, and the poll that waits
on running trials."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

POLL_S = 0.25  # how long one wait on running trials lasts before the loop looks around


@dataclass
class Budget:
    max_trials: int | None = None
    wall_clock_s: float | None = None
    deadline: datetime | None = None  # absolute (from --until)
    max_idle_asks: int = 200
    t0: float = field(default_factory=time.monotonic)

    def seconds_left(self) -> float | None:
        left: list[float] = []
        if self.wall_clock_s is not None:
            left.append(self.wall_clock_s - (time.monotonic() - self.t0))
        if self.deadline is not None:
            left.append((self.deadline - datetime.now().astimezone()).total_seconds())
        return min(left) if left else None


class StopController:
    """Signals -> stop requests. `graceful`: start no new trial; `hard`: stop running ones."""

    def __init__(self) -> None:
        self.graceful = threading.Event()
        self.hard = threading.Event()
        self.reason = ""
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def request(self, reason: str, *, hard: bool = False) -> None:
        if not self.reason or (hard and not self.hard.is_set()):
            self.reason = reason
        self.graceful.set()
        if hard:
            self.hard.set()

    def _handler(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        self.signum = signum
        if signum == signal.SIGINT and not self.graceful.is_set():
            self.request(f"{name}: finishing running trials (send again to stop them now)")
        else:
            self.request(f"{name}: running trials stopped and marked interrupted", hard=True)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


def check_deadline(budget: Budget, stop: StopController) -> None:
    """Past the wall clock or the deadline: a hard stop (running trials are stopped too)."""
    left = budget.seconds_left()
    if left is not None and left <= 0 and not stop.hard.is_set():
        stop.request("budget: wall clock or deadline reached", hard=True)


def wait_any(futures: list[Future[Any]], timeout_s: float) -> set[Future[Any]]:
    if not futures:
        time.sleep(min(timeout_s, 0.05))
        return set()
    done, _ = wait(futures, timeout=timeout_s, return_when=FIRST_COMPLETED)
    return set(done)
