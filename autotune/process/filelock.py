"""One cross-process lock helper: an exclusive ``flock`` on a lock file, held for a block.

Used for read-modify-write of files several processes share (the PID registry, the service's
job table). The kernel drops an flock when its file is closed, so a holder that dies (SIGKILL
included) leaves no stale lock. Each call opens the file anew, so two blocks in one process (two
threads, or a nested call) exclude each other too: a caller that nests needs its own re-entrant
thread lock in front.

The per-GPU locks (autotune.process.gpulock) are a different kind: polled without blocking,
holder info written into the file, descriptors handed on to a watchdog.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(path: Path | str) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (created if missing; its folder must exist) for the
    block, waiting while another process holds it."""
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
