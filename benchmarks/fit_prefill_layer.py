"""Fit perf.PREFILL_LAYER_S, an eager SGLang prefill forward's cost per decoder layer, on the
public figures fidelity_speed.FITTED names for it (a concurrency-1 TTFT record).

    .venv/bin/python benchmarks/fit_prefill_layer.py

Solves for the value at which those figures' geometric-mean ratio (predicted / measured) is 1.
Every other prefill figure in tests/data/real_speeds is the evidence (benchmarks/
fidelity_speed.py). Prints the value to put in the code; it changes nothing itself.
"""

from __future__ import annotations

import math

from fidelity_speed import FITTED, RECORDS, fitted  # benchmarks/ is this script's folder

from autotune.calibration.speed_records import SpeedRecord, load_speed_records
from autotune.calibration.speed_replay import replay_speeds
from autotune.planner import perf

CONSTANT = "perf.PREFILL_LAYER_S"


def _fitted_records() -> list[SpeedRecord]:
    names = {name for name, entry in FITTED.items() if entry[0] == CONSTANT}
    records = [rec for rec in load_speed_records(RECORDS) if rec.name in names]
    if not records:
        raise SystemExit(f"no record in {RECORDS} is marked as fitting {CONSTANT}")
    return records


def _geomean_ratio(records: list[SpeedRecord], value: float) -> float:
    perf.PREFILL_LAYER_S = value
    ratios = [
        f.ratio
        for rec in records
        for f in replay_speeds(rec)
        if fitted(f) == CONSTANT and f.ratio is not None
    ]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def main() -> None:
    records = _fitted_records()
    lo, hi = 0.0, 10e-3
    if _geomean_ratio(records, lo) > 1:
        raise SystemExit("the roofline alone is already slower than the fitted figures")
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _geomean_ratio(records, mid) < 1 else (lo, mid)
    print(f"PREFILL_LAYER_S = {(lo + hi) / 2 * 1e3:.2f}e-3")


if __name__ == "__main__":
    main()
