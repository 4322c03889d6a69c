"""On a machine with an NVIDIA GPU: a sweep driver that is SIGKILLed while its engine holds GPU
memory leaves nothing behind. Each run starts a stand-in driver (one EngineProcess on GPU 0
under the host-wide GPU lock, its engine holding --mib MiB through the CUDA driver API and
forking a child), SIGKILLs the driver, and times until (a) no engine process is left, (b) NVML
shows the memory back at its baseline, (c) a second sweep can take GPU 0's lock. It also shows
that a second driver waits for the lock while the first one's engine runs.

    python benchmarks/orphan_gpu_check.py [--runs 3] [--mib 4096]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.process import gpu  # noqa: E402
from autotune.process.gpulock import GpuLocks  # noqa: E402

FAKE_ENGINE = ROOT / "tests" / "process" / "fake_engine.py"
MARK_ENV = "ORPHAN_GPU_CHECK_MARK"

DRIVER = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from autotune.process import EngineProcess
from autotune.process.gpulock import GpuLocks
from autotune.process.ports import free_port
locks = GpuLocks([0], label="orphan-check")
t0 = time.monotonic()
assert locks.acquire(timeout_s=120)
waited = time.monotonic() - t0
port = free_port()
eng = EngineProcess(port=port, label="orphan-check", gpu_indices=[0], hold_fds=locks.fds)
pid = eng.start([sys.executable, sys.argv[2], "--port", str(port), "--gpu-mib", sys.argv[3],
                 "--spawn-child"], {sys.argv[5]: sys.argv[4]}, Path(sys.argv[4]) / "server.log")
deadline = time.monotonic() + 60
while sys.argv[3] != "0" and time.monotonic() < deadline and "holding" not in eng.log_tail():
    time.sleep(0.05)
print(json.dumps({"pid": pid, "watchdog": eng.watchdog_pid, "waited_s": waited}), flush=True)
time.sleep(600)
"""


def procs_with(mark: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARK_ENV) == mark and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def start_driver(work: Path, mib: int) -> subprocess.Popen[str]:
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(ROOT), str(FAKE_ENGINE), str(mib), str(work), MARK_ENV],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def one_run(work: Path, mib: int) -> dict[str, float | int | bool]:
    base = (gpu.gpu_memory_used([0]) or {0: 0})[0]
    drv = start_driver(work / "a", mib)
    info = json.loads(drv.stdout.readline() if drv.stdout else "{}")
    used = (gpu.gpu_memory_used([0]) or {0: 0})[0]
    # a second sweep wants the same GPU: it must wait while the first one's engine runs
    second = start_driver(work / "b", 0)  # no CUDA context: the baseline check stays clean
    time.sleep(3)
    second_waiting = second.poll() is None and not procs_with(str(work / "b"))
    mark = str(work / "a")
    before = len(procs_with(mark))
    t0 = time.monotonic()
    os.kill(drv.pid, signal.SIGKILL)
    drv.wait()
    gone_s = freed_s = None
    while time.monotonic() - t0 < 30 and (gone_s is None or freed_s is None):
        now = time.monotonic() - t0
        if gone_s is None and not procs_with(mark):
            gone_s = now
        if freed_s is None:
            cur = (gpu.gpu_memory_used([0]) or {0: 0})[0]
            if cur - base < gpu.DEFAULT_TOLERANCE_BYTES:
                freed_s = now
        time.sleep(0.05)
    # the second driver takes the lock once the first engine is dead, then is stopped
    line = second.stdout.readline() if second.stdout else ""
    second_info = json.loads(line or "{}")
    second_took_s = float(second_info.get("waited_s", -1))
    os.killpg(second.pid, signal.SIGKILL)
    second.wait()
    deadline = time.monotonic() + 15
    while procs_with(str(work / "b")) and time.monotonic() < deadline:
        time.sleep(0.1)
    with GpuLocks([0], label="probe") as probe:
        lock_free = probe.acquire(timeout_s=15)
    return {
        "engine_mib": round((used - base) / 2**20),
        "processes_before": before,
        "gone_s": round(gone_s, 2) if gone_s is not None else -1,
        "memory_freed_s": round(freed_s, 2) if freed_s is not None else -1,
        "second_waited_while_engine_ran": second_waiting,
        "second_driver_waited_s": round(second_took_s, 2),
        "lock_free_after": lock_free,
        "watchdog_pid": int(info.get("watchdog") or 0),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", type=int, default=4096)
    a = ap.parse_args()
    if not gpu.gpu_memory_used([0]):
        print("needs an NVIDIA GPU and driver (NVML)")
        return 2
    os.environ.setdefault("AUTOTUNE_GPU_LOCK_DIR", tempfile.mkdtemp(prefix="gpu-locks-"))
    rows = []
    for i in range(a.runs):
        with tempfile.TemporaryDirectory() as d:
            row = one_run(Path(d), a.mib)
        rows.append(row)
        print(json.dumps({"run": i + 1, **row}), flush=True)
    ok = all(
        0 <= r["gone_s"] <= 10
        and 0 <= r["memory_freed_s"] <= 10
        and r["second_waited_while_engine_ran"]
        and r["lock_free_after"]
        for r in rows
    )
    print(
        f"{a.runs} runs: engine gone in {[r['gone_s'] for r in rows]} s, GPU memory freed in "
        f"{[r['memory_freed_s'] for r in rows]} s after the driver's SIGKILL; a second sweep "
        f"waited for GPU 0 each time: {all(r['second_waited_while_engine_ran'] for r in rows)}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
