"""Probe: does a wider space than the tuner's (kernels_tuning/engine_space.py) bring SGLang's own
block-FP8 kernel closer to cuBLAS at decode sizes? Every config of the wider grid is gated and
timed once on the release's kernel, then the best, the shipped entry, the default and cuBLAS
per-tensor FP8 are timed side by side (kernels_tuning.compare).

    python3 benchmarks/engine_kernels_probe.py --out $OUT --version 0.5.23 \
        --nk 14336,5120 --ms 1,8 --configs kernels_tuning/configs

Wider than the tuner: SPLIT_K up to 64, stages 2-7, BLOCK_SIZE_K 64 and 128.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def wide_grid() -> list[Any]:
    from kernels_tuning.space import KernelConfig

    out = []
    for bn, bk, w, s, sk in itertools.product(
        (64, 128, 256), (64, 128), (4, 8), range(2, 8), (1, 2, 4, 8, 16, 32, 64)
    ):
        out.append(KernelConfig(16, bn, bk, 1, w, s, SPLIT_K=sk, SWAP_AB=1))
        if bn <= 128:
            out.append(KernelConfig(16, bn, bk, 1, w, s, SPLIT_K=sk))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--nk", default="14336,5120")
    ap.add_argument("--ms", default="1,8")
    ap.add_argument("--configs", type=Path, default=Path("kernels_tuning/configs"))
    args = ap.parse_args()

    from kernels_tuning import bench, output
    from kernels_tuning.compare import compare_item
    from kernels_tuning.compile import precompile_engine
    from kernels_tuning.engine_kernel import load_engine_kernel
    from kernels_tuning.engine_space import EngineTarget, m_class
    from kernels_tuning.runner import ItemResult, WorkItem
    from kernels_tuning.space import DeviceLimits, KernelConfig

    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    limits = DeviceLimits.from_torch()
    target = EngineTarget("sglang", args.version)
    n, k = (int(x) for x in args.nk.split(","))
    ms = [int(x) for x in args.ms.split(",")]
    cands = [c for c in wide_grid() if target.legality(c, limits, n, k) is None]
    by_shape = {(m_class(m), n, k): cands for m in ms}
    rep = precompile_engine(target.tag, by_shape, arch=limits.arch)
    print(
        f"[{time.monotonic() - t0:.0f}s] {len(cands)} configs x {len(by_shape)} classes: "
        f"{rep.compiled} compiled, {len(rep.failed)} failed in {rep.wall_s:.0f}s",
        flush=True,
    )
    engine = load_engine_kernel(target.engine, target.version)
    facts = target.facts()
    shipped_path = (
        args.configs / "sglang" / args.version / facts.file_name_for(n, k, "NVIDIA_H200")
    )
    shipped = output.read_config_file(shipped_path) if shipped_path.is_file() else {}
    rows = []
    for m in ms:
        item = WorkItem("fp8", n, k, m, engine=target.tag)
        p = bench.make_problem("fp8", m, n, k, engine=engine, engine_arch=limits.arch)
        ev = bench.Evaluator(p, reject_ratio=None)
        timed = sorted(((meas.cost, c) for c in cands for meas in [ev(c)]), key=lambda x: x[0])
        best_us, best = timed[0]
        ship = KernelConfig.from_dict(output.nearest(shipped, m)) if shipped else None
        res = ItemResult(item, best, best_us, best, best_us, len(cands), len(cands), 0.0)
        row = compare_item(
            res, rounds=3, extra={"shipped": ship}, engine=engine, engine_arch=limits.arch
        )
        row["top5"] = [(round(us, 2), c.key()) for us, c in timed[:5]]
        rows.append(row)
        print(
            f"[{time.monotonic() - t0:.0f}s] M={m}: {json.dumps(row['times_us'])} "
            f"best {best.key()}",
            flush=True,
        )
    (args.out / "probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
