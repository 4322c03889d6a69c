"""A stand-in sweep driver: start one engine through EngineProcess (watchdog on), wait until
the engine has forked a child in its group and a grandchild that left it with setsid, print
what the test needs as one JSON line, then wait to be SIGKILLed.

Usage: python dying_driver.py LOG_PATH MARK [--child-ignores-term] [--gpu-lock N]
MARK is planted in the engine's environment: the test finds every engine process by it.
--gpu-lock N: hold GPU N's host-wide lock for the engine, as a trial does.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from autotune.process import EngineProcess
from autotune.process.gpulock import GpuLocks

ENGINE = """
import os, signal, subprocess, sys, time
ignore = sys.argv[1] == "1"
stay = "import signal, sys, time\\nif sys.argv[1] == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\nprint('child up', flush=True)\\ntime.sleep(600)"
leave = "import os, time\\nos.setsid()\\nprint('setsid child up', os.getpid(), flush=True)\\ntime.sleep(600)"
subprocess.Popen([sys.executable, "-c", stay, "1" if ignore else "0"])
subprocess.Popen([sys.executable, "-c", leave])
time.sleep(600)
"""


def main() -> None:
    log, mark = Path(sys.argv[1]), sys.argv[2]
    ignore = "--child-ignores-term" in sys.argv
    locks = GpuLocks(
        [int(sys.argv[sys.argv.index("--gpu-lock") + 1])] if "--gpu-lock" in sys.argv else []
    )
    assert locks.acquire(timeout_s=10)
    eng = EngineProcess(label="doomed-trial", hold_fds=locks.fds)
    argv = [sys.executable, "-c", ENGINE, "1" if ignore else "0"]
    pid = eng.start(argv, {"DYING_DRIVER_MARK": mark}, log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        tail = eng.log_tail()
        if "setsid child up" in tail and tail.count("child up") >= 2:
            break
        time.sleep(0.05)
    print(json.dumps({"pid": pid, "watchdog": eng.watchdog_pid}), flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
