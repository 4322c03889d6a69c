"""Two processes opening a new database at once (a sweep and `autotune status`) both see it
empty; the one that loses the race to create the tables or the schema row used to fail
(`table ... already exists`, `UNIQUE constraint failed: at_meta.key`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

OPEN = (
    "import sys; from pathlib import Path; from autotune.store.db import Store; "
    "Store(path=Path(sys.argv[1])).close()"
)


def test_concurrent_first_opens_all_succeed(tmp_path: Path) -> None:
    # Plain subprocesses, not multiprocessing: its spawn context leaves a resource tracker
    # running as this process's child, which later tests count as a leftover.
    root = Path(__file__).resolve().parents[2]
    failed = []
    for i in range(12):
        db = str(tmp_path / f"{i}.db")
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPEN, db],
                cwd=root,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for p in procs:
            _, err = p.communicate(timeout=60)
            if p.returncode:
                failed.append(err.strip().splitlines()[-1:])
    assert failed == []
