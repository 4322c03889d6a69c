"""A tiny stand-in engine server for process-manager tests (a real process, real HTTP).

Usage: python fake_engine.py --port P [--ready-delay S] [--never-ready] [--exit-code N]
       [--ignore-term] [--spawn-child] [--child-ignores-term] [--child-setsid] [--leader-exits]
       [--gpu-mib N]   (hold N MiB on CUDA device 0 through the driver API, no torch needed)
"""

from __future__ import annotations

import argparse
import ctypes
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

READY_LINE = "The server is fired up and ready to roll!"

CHILD = """
import signal, sys, time
if sys.argv[1] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("child up", flush=True)
time.sleep(600)
"""


def hold_gpu_memory(mib: int) -> None:
    """cuInit, a context on device 0 and one cuMemAlloc; held until the process dies."""
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for name, call in (
        ("cuInit", lambda: cuda.cuInit(0)),
        ("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(dev), 0)),
        ("cuCtxCreate", lambda: cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)),
        ("cuMemAlloc", lambda: cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib << 20))),
    ):
        rc = call()
        if rc != 0:
            print(f"{name} failed with CUresult {rc}", flush=True)
            sys.exit(2)
    print(f"holding {mib} MiB on cuda:0", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ready-delay", type=float, default=0.0)
    ap.add_argument("--never-ready", action="store_true")
    ap.add_argument("--exit-code", type=int, default=None)
    ap.add_argument("--ignore-term", action="store_true")
    ap.add_argument("--spawn-child", action="store_true")
    ap.add_argument("--child-ignores-term", action="store_true")
    ap.add_argument("--child-setsid", action="store_true")
    ap.add_argument("--leader-exits", action="store_true")
    ap.add_argument("--gpu-mib", type=int, default=0)
    a = ap.parse_args()

    print("starting fake engine", flush=True)
    if a.exit_code is not None:
        print("ValueError: fake engine told to fail at start", flush=True)
        sys.exit(a.exit_code)
    if a.gpu_mib:
        hold_gpu_memory(a.gpu_mib)
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if a.spawn_child:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, "1" if a.child_ignores_term else "0"],
            start_new_session=a.child_setsid,
        )
        print(f"child pid {child.pid}", flush=True)
        if a.leader_exits:
            time.sleep(0.3)  # let the child install its handler before we go
            sys.exit(0)

    ready = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/health" and ready.is_set()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print(f"listening on 127.0.0.1:{a.port}", flush=True)

    def become_ready() -> None:
        time.sleep(a.ready_delay)
        if not a.never_ready:
            ready.set()
            print(READY_LINE, flush=True)

    threading.Thread(target=become_ready, daemon=True).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()
