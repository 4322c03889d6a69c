"""Warm starts (search.warm_start) on the search suite's landscapes: a second sweep on the same
target after a first one of FIRST launches, with another seed (sampler and launch luck), at
SECOND launches, warm (the first sweep is in its database) against cold (a fresh database).

A benchmark script, not a test. Scored as benchmarks/search_landscapes.py scores: captured
share = (true value of the returned winner - defaults) / (optimum - defaults), noise-free; a
winner that breaks a constraint scores 0. Median, 10th percentile and worst over the seeds.

    .venv/bin/python benchmarks/warm_starts.py --only agents-hicache-tp2 --seeds 10 --jobs 2
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_landscapes import LANDS, prepare, share, summary  # noqa: E402
from search_suite.landscapes import LANDSCAPES  # noqa: E402
from search_suite.runner import run_ours  # noqa: E402

OTHER_SEED = 1000  # the second sweep's seed: seed + this


def task(args: tuple[str, int, int, int]) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name, seed, first_n, second_n = args
    land = LANDS[name]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "warm.db"
        first = run_ours(land, seed, first_n, store_path=db, name=f"{name}-first-{seed}")
        warm = run_ours(land, seed + OTHER_SEED, second_n, store_path=db, name=f"{name}-warm")
    cold = run_ours(land, seed + OTHER_SEED, second_n)
    return {
        "landscape": name,
        "seed": seed,
        "first": share(name, first.winner),
        "warm": share(name, warm.winner),
        "cold": share(name, cold.winner),
        "warm_launches": warm.by_source.get("warm", 0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(LANDSCAPES))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first", type=int, default=40, help="launches of the first sweep")
    ap.add_argument("--second", type=int, default=8, help="launches of the second sweep")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    names = a.only or list(LANDSCAPES)
    for name in names:
        prepare(name, a.jobs)
    tasks = [(n, s, a.first, a.second) for n in names for s in range(a.seeds)]
    t0 = time.monotonic()
    with mp.get_context("fork").Pool(a.jobs) as pool:
        rows = list(pool.imap_unordered(task, tasks))
    for name in names:
        mine = [r for r in rows if r["landscape"] == name]
        print(f"== {name}: {len(mine)} seeds, second sweep at {a.second} launches")
        for key, what in (
            ("first", f"first sweep ({a.first} launches)"),
            ("cold", f"second sweep, cold ({a.second})"),
            ("warm", f"second sweep, warm ({a.second})"),
        ):
            s = summary([r[key] for r in mine])
            print(
                f"   {what:34s} captured share median {s['median']:.3f}, "
                f"p10 {s['p10']:.3f}, worst {s['worst']:.3f}, mean {s['mean']:.3f}"
            )
        launches = sorted(r["warm_launches"] for r in mine)
        print(f"   warm launches per warm sweep: {launches}")
    print(f"({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
