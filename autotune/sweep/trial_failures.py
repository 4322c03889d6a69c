"""What went wrong in a trial, as a Failure. The engine adapter classifies the engine's log and
exit status; the trial adds the classes only it can see: a benchmark refused by the server's API
key check, a port in use, processes that survived the stop.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.engines.base import Failure, FailureClass
from autotune.store.models import TrialStatus

if TYPE_CHECKING:
    from autotune.engines.base import EngineAdapter
    from autotune.process import EngineProcess

LOG_TAIL_LINES = 60
MAX_STARTUP_LOG_BYTES = 4 * 2**20

# (status, failure, log tail) of one launch
Outcome = tuple[TrialStatus, Failure | None, str]


def port_in_use(port: int, host: str) -> Failure:
    return Failure(cls=FailureClass.PORT_IN_USE, reason=f"port {port} on {host} is already in use")


def survived_stop(leftovers: list[int]) -> Failure:
    return Failure(
        cls=FailureClass.CRASH,
        reason=f"processes {leftovers} survived SIGKILL after the trial",
    )


def died(
    adapter: EngineAdapter, eng: EngineProcess, log_path: Path
) -> tuple[TrialStatus, Failure, str]:
    # Give the process a moment to be reaped so the exit status is known.
    for _ in range(20):
        if eng.returncode is not None:
            break
        time.sleep(0.05)
    failure = adapter.classify_failure(read_log(log_path), eng.returncode, was_ready=True)
    return TrialStatus.FAILED, failure, eng.log_tail(LOG_TAIL_LINES)


def read_log(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_STARTUP_LOG_BYTES)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


AUTH_STATUS = re.compile(r"\bHTTP 40[13]\b")


def benchmark_failure(reason: str) -> Failure:
    """A benchmark error while the engine runs: refused by the server's API key check (the
    same for every configuration) or any other benchmark error."""
    cls = (
        FailureClass.AUTH_REJECTED if AUTH_STATUS.search(reason) else FailureClass.BENCHMARK_ERROR
    )
    return Failure(cls=cls, reason=reason)
