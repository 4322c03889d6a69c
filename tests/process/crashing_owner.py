"""Start the fake engine through EngineProcess with a PidRegistry and no watchdog, then die
without stopping it (os._exit skips __exit__ and atexit): what a crashed sweep leaves behind
when its engine's watchdog is gone too.

Usage: python crashing_owner.py REGISTRY_PATH LOG_PATH -- ENGINE_ARGV...
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from autotune.process import EngineProcess, PidRegistry


def main() -> None:
    registry, log = Path(sys.argv[1]), Path(sys.argv[2])
    argv = sys.argv[sys.argv.index("--") + 1 :]
    # No watchdog: it would stop the engine at once. The registry is the fallback for when the
    # guard is gone as well (OOM-killed, or killed together with the sweep).
    eng = EngineProcess(label="crashed-trial", registry=PidRegistry(registry), watchdog=False)
    pid = eng.start(argv, {}, log)
    deadline = time.monotonic() + 10
    while "child up" not in eng.log_tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(pid, flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
