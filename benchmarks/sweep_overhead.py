"""Sweep overhead and scaling on the simulated engine: the median time per trial spent outside
engine start and benchmark (goal <= 1 s), and trials per hour with 1 and 2 workers (goal:
2 workers >= 1.8x one).

A benchmark script, not a test. Runs the demo's target (Qwen3.8-27B AWQ-INT4 on a simulated
RTX 4080 SUPER 32G) twice, with the in-process executor: N trials on 1 worker, then N trials
on 2 workers. Probe pruning and finalists are off so every trial does the same work.

    .venv/bin/python benchmarks/sweep_overhead.py              # 12 trials per run
    .venv/bin/python benchmarks/sweep_overhead.py --trials 20 --time-scale 10

Per trial (from the timings the sweep stores with it):
    start    spawn -> ready (the simulator's imports and its simulated startup)
    bench    the workload scenarios
    stop     SIGTERM -> process group gone, port free
    driver   ask + planner gate + database before dispatch, and store + tell after
    overhead wall (ask -> result stored) - start - bench: everything the sweep adds
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.cli.demo import DEMO_SPEC  # noqa: E402
from autotune.store.db import Store  # noqa: E402
from autotune.sweep.orchestrator import run_sweep  # noqa: E402
from autotune.sweep.spec import parse_spec  # noqa: E402


def run(workers: int, trials: int, time_scale: float, tmp: Path) -> dict[str, Any]:
    data = yaml.safe_load(DEMO_SPEC)
    data["name"] = f"overhead-w{workers}"
    data["budget"] = {"max_trials": trials}
    data["finalists"] = {"top_k": 0}
    data["workload"]["prune_below"] = 0
    data["simulate"]["time_scale"] = time_scale
    data["search"]["known_good"] = False
    spec = parse_spec(data)
    store = Store(path=tmp / f"w{workers}.db")
    t0 = time.monotonic()
    out = run_sweep(
        spec, store=store, out_dir=tmp / spec.name, workers=workers, install_signals=False
    )
    elapsed = time.monotonic() - t0
    rows = [r for r in store.get_trials(out.sweep_id) if r.launch is not None]
    store.close()
    tm = [(r.launch or {}).get("timings") or {} for r in rows]

    def med(key: str) -> float:
        vals = [t[key] for t in tm if t.get(key) is not None]
        return statistics.median(vals) if vals else float("nan")

    # steady state: from the first trial's start to the last one's end (the sweep's fixed
    # start-up cost, ~2 s to open the study and reap orphans, is paid once per night)
    first = min(r.started_at for r in rows if r.started_at is not None)
    last = max(r.finished_at for r in rows if r.finished_at is not None)
    steady = (last - first).total_seconds()
    overhead = [
        t["wall_s"] - t.get("start_s", 0.0) - t.get("bench_s", 0.0) for t in tm if "wall_s" in t
    ]
    driver = [t.get("driver_pre_s", 0.0) + t.get("driver_post_s", 0.0) for t in tm]
    return {
        "workers": workers,
        "trials": len(rows),
        "failed": sum(1 for r in rows if r.status != "complete"),
        "elapsed_s": elapsed,
        "per_hour": len(rows) / elapsed * 3600,
        "steady_per_hour": len(rows) / steady * 3600,
        "start_s": med("start_s"),
        "bench_s": med("bench_s"),
        "stop_s": med("stop_s"),
        "driver_s": statistics.median(driver),
        "overhead_s": statistics.median(overhead),
        "overhead_p90_s": sorted(overhead)[int(0.9 * (len(overhead) - 1))],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--time-scale", type=float, default=10.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [run(w, a.trials, a.time_scale, Path(tmp)) for w in (1, 2)]
    print(f"simulated engine, time scale {a.time_scale:g}, {a.trials} trials per run")
    print(
        "workers  trials  failed  elapsed  trials/h (steady)   start   bench    stop  driver  "
        "overhead (p50 / p90)"
    )
    for r in results:
        print(
            f"{r['workers']:7d}  {r['trials']:6d}  {r['failed']:6d}  {r['elapsed_s']:6.0f} s"
            f"  {r['per_hour']:8.0f} ({r['steady_per_hour']:5.0f})  {r['start_s']:5.2f}  "
            f"{r['bench_s']:6.2f}  "
            f"{r['stop_s']:6.2f}  {r['driver_s']:6.2f}  {r['overhead_s']:5.2f} / "
            f"{r['overhead_p90_s']:.2f} s"
        )
    speedup = results[1]["per_hour"] / results[0]["per_hour"]
    steady = results[1]["steady_per_hour"] / results[0]["steady_per_hour"]
    print(
        f"2 workers / 1 worker: {speedup:.2f}x trials per hour end to end, {steady:.2f}x in "
        "steady state (goal >= 1.8x)"
    )
    worst = max(r["overhead_s"] for r in results)
    print(f"median overhead per trial: {worst:.2f} s (goal <= 1 s)")


if __name__ == "__main__":
    main()
