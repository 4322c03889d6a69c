"""How each process of a vLLM release prefixes its log lines, and vLLM's GiB figures; shared by
the startup and the failure lines (autotune.engines.vllm.logformat, .failure_lines).

Process prefixes: `(EngineCore_0 pid=N)` up to 0.10.1.1, `(EngineCore_DP0 pid=N)` after; TP
workers `(VllmWorker rank=R ...)` 0.10.0, `(VllmWorker TPR ...)` 0.10.1.x, `(Worker_TPR ...)`
from 0.10.2; the API server `(APIServer pid=N)` from 0.10.1.
"""

from __future__ import annotations

from autotune.engines.vllm.releases import at_least

DEFAULT_TIMESTAMP = "03-01 12:00:00"
API = "APIServer"


def format_gib(gib: float) -> str:
    """vLLM's format_gib: `f"{round(b / GiB_bytes, 2)}"` (so 16.80 prints as 16.8)."""
    return f"{round(gib, 2)}"


def gib_text(version: str, x: float) -> str:
    """A GiB figure in a memory message: format_gib from 0.14.0, `%.2f` before."""
    return format_gib(x) if at_least(version, "0.14.0") else f"{x:.2f}"


class Printer:
    """Prefixes lines the way each process of a vLLM release does."""

    def __init__(self, version: str, timestamp: str, pid: int) -> None:
        self.version, self.ts, self.pid = version, timestamp, pid

    def core_name(self) -> str:
        return "EngineCore_DP0" if at_least(self.version, "0.10.2") else "EngineCore_0"

    def worker_name(self, rank: int, tp: int) -> str:
        if tp <= 1:
            return self.core_name()  # single GPU: the worker runs inside the engine core
        if not at_least(self.version, "0.10.1"):
            return f"VllmWorker rank={rank}"
        if not at_least(self.version, "0.10.2"):
            return f"VllmWorker TP{rank}"
        return f"Worker_TP{rank}"

    def line(self, proc: str | None, src: str, msg: str, level: str = "INFO") -> str:
        if proc == API and not at_least(self.version, "0.10.1"):
            proc = None  # 0.10.0's API server did not decorate its logs
        head = f"({proc} pid={self.pid}) " if proc else ""
        return f"{head}{level} {self.ts} [{src}] {msg}"
