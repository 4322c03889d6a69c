"""Fit the AMD (RDNA 3, ROCm SGLang, Triton backend) speed constants on FIELD-NOTES C5.

    .venv/bin/python benchmarks/fit_c5.py

Four constants, each on one C5 point (benchmarks/calibration.py marks those rows as fitted):
perf.VENDOR_EFF['rdna'] = (decode, prefill) on the depth-0 decode and the 4K prefill, where
attention is a small share; attention.KERNELS['rdna']['triton'] = Kernel(decode, prefill) on the
131K decode and the 130K prefill, where attention dominates. They interact, so the four are
solved in turns until they settle. The other C5 rows (16K to 65K, streams) are the evidence.
Prints the values to put in the code; it changes nothing itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from calibration import C5_DECODE, C5_PREFILL, c5_model  # benchmarks/ is this script's folder

from autotune.planner import attention, perf


def _solve(f: Callable[[float], float], target: float, lo: float = 0.05, hi: float = 4.0) -> float:
    """x in [lo, hi] with f(x) = target, f increasing (bisection on the log scale)."""
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return math.sqrt(lo * hi)


def main() -> None:
    kernel = attention.KERNELS["rdna"]["triton"]
    vd, vp, kd, kp = 1.0, 1.0, kernel.decode, kernel.prefill

    def set_constants(vd: float, vp: float, kd: float, kp: float) -> None:
        perf.VENDOR_EFF["rdna"] = (vd, vp)
        attention.KERNELS["rdna"]["triton"] = replace(kernel, decode=kd, prefill=kp)

    deep, long = max(C5_DECODE), max(C5_PREFILL)
    short = min(C5_PREFILL)

    def decode(depth: int, **c: float) -> float:
        set_constants(**{"vd": vd, "vp": vp, "kd": kd, "kp": kp, **c})
        return c5_model().decode_tok_s(1, max(depth, 256))

    def prefill(n: int, **c: float) -> float:
        set_constants(**{"vd": vd, "vp": vp, "kd": kd, "kp": kp, **c})
        return c5_model().prefill_tok_s(n)

    for _ in range(8):
        vd = _solve(lambda x: decode(0, vd=x), C5_DECODE[0])
        kd = _solve(lambda x: decode(deep, kd=x), C5_DECODE[deep])
        vp = _solve(lambda x: prefill(short, vp=x), C5_PREFILL[short])
        kp = _solve(lambda x: prefill(long, kp=x), C5_PREFILL[long])
    print(f"VENDOR_EFF['rdna'] = ({vd:.3f}, {vp:.3f})")
    print(f"KERNELS['rdna']['triton'] = Kernel(decode={kd:.3f}, prefill={kp:.3f}, split_kv=True)")


if __name__ == "__main__":
    main()
