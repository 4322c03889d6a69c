"""The real llama-server runs in the fidelity table: what the llama.cpp planner predicted for each
launch of a stored sweep against what that launch's log said (reports/llamacpp-h200: llama-server
0.3.36 built for sm_90 on one H200, the random-weight 1B GGUF).

    .venv/bin/python benchmarks/fidelity_llamacpp.py [--db reports/llamacpp-h200/autotune.db]

One row per distinct (K cache, V cache, context, slots) launched: the KV cache size (llama.cpp
logs its K and V buffers) and the weights its model buffers hold, host and device. The planner's
weights are the device and host shares it stored for the launch (planner/llamacpp.weights_split);
the run's own `weights_gib` was the file's tensor bytes, which a tied output duplicated onto the
GPU exceeds (fixed since). No constant of the llama.cpp planner was fitted on these runs, so every
row is evidence.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

DB = Path(__file__).resolve().parents[1] / "reports" / "llamacpp-h200" / "autotune.db"
GIB = 2**30


class LlamaRow(NamedTuple):
    cache: str  # "K/V"
    context: int
    slots: int
    launches: int
    kv_planned_gib: float
    kv_logged_gib: float
    weights_planned_gib: float
    weights_logged_gib: float


def rows(db: Path = DB) -> Iterator[LlamaRow]:
    """Distinct launched configurations of every sweep in `db`, planned vs logged."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    seen: dict[tuple[str, int, int], list[LlamaRow]] = {}
    for pred, launch in con.execute(
        "select prediction, launch from at_trials where launch is not null order by number"
    ):
        plan = json.loads(pred or "{}").get("plan") or {}
        report = (json.loads(launch) or {}).get("report") or {}
        if not plan or report.get("kv_k_gib") is None:
            continue
        key = (
            str(plan["kv_dtype"]),
            int(plan["kv_pool_tokens"]),
            int(report["max_running_requests"]),
        )
        seen.setdefault(key, []).append(
            LlamaRow(
                key[0],
                key[1],
                key[2],
                1,
                plan["kv_cell_bytes"] * plan["kv_pool_tokens"] / GIB,
                float(report["kv_k_gib"]) + float(report["kv_v_gib"] or 0.0),
                float(plan["weights_device_gib"]) + float(plan["weights_host_gib"]),
                float(report["weights_gib"]),
            )
        )
    con.close()
    for group in seen.values():
        yield group[0]._replace(launches=len(group))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, default=DB)
    args = ap.parse_args(argv)
    print(
        "| KV cache (K/V) | context | slots | launches | KV planned GiB | KV logged GiB | ratio "
        "| weights planned GiB | weights logged GiB | ratio |"
    )
    print("|" + "---|" * 10)
    for r in rows(args.db):
        print(
            f"| {r.cache} | {r.context:,} | {r.slots} | {r.launches} | {r.kv_planned_gib:.4f} "
            f"| {r.kv_logged_gib:.4f} | {r.kv_planned_gib / r.kv_logged_gib:.3f} "
            f"| {r.weights_planned_gib:.3f} | {r.weights_logged_gib:.3f} "
            f"| {r.weights_planned_gib / r.weights_logged_gib:.3f} |"
        )


if __name__ == "__main__":
    main()
