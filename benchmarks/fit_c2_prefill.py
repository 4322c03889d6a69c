"""Refit the roofline's linear-layer prefill efficiency on FIELD-NOTES C2's prefill rows.

    .venv/bin/python benchmarks/fit_c2_prefill.py

perf.EFF_PREFILL_MAX (the share of the GPU's rate the linear layers reach at large chunks) is
the constant that absorbs whatever else a prefill forward spends on C2's card, so a cost the
model adds there (the GDN layers' measured recurrence, GDN_TOKEN_HEAD_S) is taken back out of
it: it is solved so that C2's pp8.5k / pp34k / pp68k (benchmarks/calibration.py, the rows
marked fitted), where the linear layers dominate, have the least squared log ratio, with every
other constant as it stands (PREFILL_HALF_CHUNK and REQUEST_OVERHEAD_S, which pp512 sets, and
EFF_ATTENTION are kept). On the model before the GDN term this gives 0.944, the 0.942 it had.
Prints the value to put in the code; it changes nothing itself.
"""

from __future__ import annotations

import math

from calibration import rows  # benchmarks/ is this script's folder

from autotune.planner import perf


def _loss(eff: float) -> float:
    perf.EFF_PREFILL_MAX = eff
    return sum(
        math.log(r.predicted / r.measured) ** 2
        for r in rows()
        if r.name.startswith("C2 prefill") and r.predicted is not None and "pp512" not in r.name
    )


def fit() -> float:
    """EFF_PREFILL_MAX with the least loss (golden-section search on 0.5 .. 1.5)."""
    start = perf.EFF_PREFILL_MAX
    g = (math.sqrt(5) - 1) / 2
    lo, hi = 0.5, 1.5
    try:
        while hi - lo > 1e-6:
            a, b = hi - g * (hi - lo), lo + g * (hi - lo)
            lo, hi = (lo, b) if _loss(a) < _loss(b) else (a, hi)
    finally:
        perf.EFF_PREFILL_MAX = start  # leave the module as it was
    return (lo + hi) / 2


def main() -> None:
    print(f"EFF_PREFILL_MAX = {fit():.3f}")


if __name__ == "__main__":
    main()
