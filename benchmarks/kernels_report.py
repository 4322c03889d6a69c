"""Render reports/kernels/README.md from the data of the H200 runs (reports/kernels/data/).

    .venv/bin/python benchmarks/kernels_report.py [--data reports/kernels/data]

No GPU needed: it reads compare.jsonl (side-by-side timings, each row from the last call that
measured its item: FP8 call 23, INT4 call 32; the rows they replaced are in call16/ and call25/
as previous_compare.jsonl), exhaustive.jsonl (budgeted vs exhaustive), cache.jsonl.gz (every evaluation of
calls 1-4, 6, 9, 12 and 13; calls 7, 10 and 11 added nothing to it), small_m.json (call 5's
SWAP_AB A/B), env.json (the kernel fingerprints of the call that last wrote the files), the
progress logs and pytest-gpu.log, the experiments' folders (call8/, call9/, call11/, call12/,
call13/: its Nsight Compute and INT4 probes and the rows it replaced; call16/: calls 16-24;
call25/: calls 25-32, the INT4 probes and re-tunes; call38/: calls 38-45, the split-K sum in a
thread-block cluster, Nsight Compute of the INT4 plane kernel, FP8 with deeper pipelines),
checks that every config
in the shipped files (kernels_tuning/configs/) passed the correctness gate, and computes the
issue's goal figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels_tuning.kernels.int4_awq_planes import uses_planes  # noqa: E402
from kernels_tuning.output import PROVENANCE_SUFFIX, kernel_source_sha256  # noqa: E402
from kernels_tuning.space import GRID, SPLIT_K_VALUES, KernelConfig  # noqa: E402

TP1 = {(14336, 5120), (5120, 6144), (16384, 5120), (34816, 5120), (5120, 17408)}
FILE_RE = re.compile(r"N=(\d+),K=(\d+),device_name=[^,]+,dtype=(fp8_w8a8|int4_w4a16)")
PACKING_RE = re.compile(r"packing=(awq|gptq)")
# The device call of each `retune` record in the cache, in order: call 4 (SWAP_AB in the space,
# FP8 and INT4 at M <= 32), call 6 (INT4 at M <= 32 with the PTX plane kernel), call 9 (all FP8
# items with FOLD_SCALES in our own search) and call 13, twice (SPLIT_K 3, 6 and 12 in the space:
# first INT4 at M <= 32, then FP8 at M <= 64, one record per kind).
RETUNE_CALLS = (4, 6, 9, 13, 13, 21, 22, 23, 26, 32)
# Calls 21-23 re-tuned all 200 FP8 items with TMA in our own space (call 22 with a larger
# refinement budget, call 23 with the refinement started from the engine winner's group in the
# space); call 23's rows and files are shipped. The sections on calls 1-15 describe the rows as
# they were before call 21 (data/call16/previous_compare.jsonl).
CALLS16 = (21, 22, 23)
# Calls 26 and 32 re-tuned all 200 INT4 items: call 26 with the kernel as it was (its M >= 48
# rows were call 3's, from before the SWAP_AB change to the kernel), call 32 with ATOMIC_REDUCE in
# the space; call 32's rows and files are shipped. The sections on calls 1-24 describe the INT4
# rows before call 26 (data/call25/previous_compare.jsonl).
CALLS25 = (26, 32)
# The call whose comparison rows are shipped for the items each re-tune covered: call 7 re-gated
# and re-measured call 6's INT4 configs; call 12 polished call 9's FP8 results (two timings per
# config, plus the winners from before the re-tune) and re-measured them; call 13 compared its
# own results. Other items: call 3.
ROWS_OF = {4: 4, 6: 7, 9: 12, 13: 13}
# What split-K values call 13 added to the space (the others are powers of two).
NEW_SPLITS = tuple(v for v in SPLIT_K_VALUES if v & (v - 1))


def shipped_rows(rows: list[dict[str, Any]], call: int) -> list[dict[str, Any]]:
    """The comparison rows of the call whose files are shipped, marked with TP and that call."""
    for r in rows:
        it = r["item"]
        r["tp"] = 1 if (it["n"], it["k"]) in TP1 else 2
        r["call"] = r["rows_of"] = call
    return rows


def gm(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def cfg_short(d: dict[str, int] | None, packing: str | None = None) -> str:
    """BM/BN/BK g w s [skN] [atomic] [swap] [fold] [tma]; for INT4 (`packing` given) ` planes`
    where `int4_w4a16.w4a16_matmul` dispatches the config to the PTX plane kernel."""
    if not d:
        return "-"
    c = KernelConfig.from_dict(d)
    sk = f" sk{c.SPLIT_K}" if c.SPLIT_K > 1 else ""
    sk += " atomic" if c.ATOMIC_REDUCE else ""
    swap = " swap" if c.SWAP_AB else ""
    fold = " fold" if c.FOLD_SCALES else ""
    tma = " tma" if c.TMA else ""
    planes = " planes" if packing is not None and uses_planes(c, packing) else ""
    return (
        f"{c.BLOCK_SIZE_M}/{c.BLOCK_SIZE_N}/{c.BLOCK_SIZE_K} g{c.GROUP_SIZE_M} "
        f"w{c.num_warps} s{c.num_stages}{sk}{swap}{fold}{tma}{planes}"
    )


def f1(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f}" if x < 1000 else f"{x:,.0f}")


def item_key(kind: str, n: int, k: int, m: int, packing: str = "awq") -> str:
    """The cache's item key (kernels_tuning.runner.WorkItem.key)."""
    return f"{kind}:N={n},K={k},M={m}" + (f",packing={packing}" if kind == "int4" else "")


def gate_check(cache: list[dict[str, Any]], config_root: Path) -> dict[str, Any]:
    """Every (file, M) entry of the shipped files against the cache: the config must have a
    passing gated evaluation of that item after the item's last `retune` marker (a re-tune
    searches afresh after a kernel change, so older evaluations do not count; a winner from
    before it that the polish re-timed counts, since that timing was gated again), and should be
    the latest result of the item (engine files: its engine-space winner; our files: its
    winner)."""
    ok_evals: dict[str, set[KernelConfig]] = defaultdict(set)
    latest: dict[str, dict[str, Any]] = {}
    for rec in cache:
        if rec["t"] == "retune":
            for key in rec["items"]:
                ok_evals.pop(key, None)
                latest.pop(key, None)
        elif rec["t"] == "eval" and rec.get("ok"):
            ok_evals[rec["item"]].add(KernelConfig.from_dict(rec["cfg"]))
        elif rec["t"] == "item":
            it = rec["item"]
            latest[item_key(it["kind"], it["n"], it["k"], it["m"], it["packing"])] = rec
    entries = files = swapped = split = split_new = folded = planes = tma = atomic = 0
    unchecked: list[str] = []
    stale: list[str] = []
    for path in sorted(config_root.glob("*/*.json")):
        if path.name.endswith(PROVENANCE_SUFFIX):
            continue
        m_name = FILE_RE.search(path.name)
        if m_name is None:
            continue
        files += 1
        n, k, dtype = int(m_name.group(1)), int(m_name.group(2)), m_name.group(3)
        kind = "fp8" if dtype == "fp8_w8a8" else "int4"
        m_pack = PACKING_RE.search(path.name)
        packing = m_pack.group(1) if m_pack else "awq"
        engine_file = path.parent.name in ("sglang", "vllm")
        for m_str, d in json.loads(path.read_text()).items():
            entries += 1
            cfg = KernelConfig.from_dict(d, source=str(path))
            swapped += cfg.SWAP_AB
            split += cfg.SPLIT_K > 1
            split_new += cfg.SPLIT_K in NEW_SPLITS
            folded += cfg.FOLD_SCALES
            tma += cfg.TMA
            atomic += cfg.ATOMIC_REDUCE
            planes += kind == "int4" and uses_planes(cfg, packing)
            key = item_key(kind, n, k, int(m_str), packing)
            where = f"{path.parent.name}/{path.name} M={m_str}"
            if cfg not in ok_evals[key]:
                unchecked.append(where)
            rec = latest.get(key, {})
            want = rec.get("engine_best" if engine_file else "best")
            if want is None or KernelConfig.from_dict(want) != cfg:
                stale.append(where)
    return {
        "files": files,
        "entries": entries,
        "swapped": swapped,
        "split": split,
        "split_new": split_new,
        "folded": folded,
        "tma": tma,
        "atomic": atomic,
        "planes": planes,
        "unchecked": unchecked,
        "stale": stale,
    }


def ms_of(keys: set[str]) -> list[int]:
    """The batch sizes M of a set of item keys."""
    return sorted({int(re.findall(r"M=(\d+)", key)[0]) for key in keys})


def kinds_of(keys: set[str]) -> list[str]:
    return sorted({key.split(":", 1)[0] for key in keys})


def seconds(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else float("nan")


def small_m_summary(small: dict[str, Any], config_root: Path) -> dict[str, Any]:
    """Call 5 (benchmarks/kernels_small_m.py): per kind, time / baseline of each variant."""
    base = {"fp8": "cublas_fp8", "int4": "bf16"}
    out: dict[str, Any] = {}
    for kind in ("fp8", "int4"):
        rs = [r for r in small["rows"] if r["kind"] == kind]
        if not rs:
            continue
        b = base[kind]
        ratios = {v: [r["us"][v] / r["us"][b] for r in rs] for v in ("plain", "swap", "shipped")}
        ratios["either"] = [min(r["us"]["plain"], r["us"]["swap"]) / r["us"][b] for r in rs]
        sp = [r["us"]["swap"] / r["us"]["plain"] for r in rs]
        by_m: dict[int, list[float]] = defaultdict(list)
        by_shape: dict[tuple[int, int], list[float]] = defaultdict(list)
        for r, x in zip(rs, sp, strict=True):
            by_m[r["m"]].append(x)
            by_shape[(r["n"], r["k"])].append(x)
        # Which files the `shipped` variant read: compare with the files committed now.
        same = 0
        for r in rs:
            name = (
                f"N={r['n']},K={r['k']},device_name={small['env']['device']},dtype=fp8_w8a8,"
                "block_shape=[128,128],split_k.json"
                if kind == "fp8"
                else f"N={r['n']},K={r['k']},device_name={small['env']['device']},"
                f"dtype=int4_w4a16,group_size=128,packing={small['env']['packing']}.json"
            )
            path = config_root / "autotune" / name
            now = json.loads(path.read_text()).get(str(r["m"])) if path.exists() else None
            same += now is not None and KernelConfig.from_dict(now) == KernelConfig.from_dict(
                r["variants"]["shipped"]["best"]
            )
        out[kind] = {
            "rows": len(rs),
            "base": b,
            "ratios": ratios,
            "swap_faster": sum(1 for x in sp if x < 1),
            "sp_lo": min(sp),
            "sp_hi": max(sp),
            "sp_gm": gm(sp),
            "swap_vs_shipped": [r["us"]["swap"] / r["us"]["shipped"] for r in rs],
            "by_m": {m: gm(v) for m, v in sorted(by_m.items())},
            "shapes_swap_wins": sorted(s for s, v in by_shape.items() if max(v) < 1),
            "shapes_swap_loses": sorted(s for s, v in by_shape.items() if min(v) > 1),
            "shipped_same": same,
            "ms": sorted(by_m),
        }
    return out


def m1_vs_m2(recs: list[dict[str, Any]]) -> dict[int, list[float]]:
    """FP8 (call 4's records): time at M=1 / time at M=2 of the same SPLIT_K=1 config, by
    SWAP_AB."""
    times: dict[tuple[str, KernelConfig, int], float] = {}
    for rec in recs:
        if rec["t"] != "eval" or not rec.get("ok") or not rec["item"].startswith("fp8:"):
            continue
        m = re.match(r"fp8:N=(\d+),K=(\d+),M=(\d+)$", rec["item"])
        if m is None or int(m.group(3)) not in (1, 2):
            continue
        cfg = KernelConfig.from_dict(rec["cfg"])
        if cfg.SPLIT_K != 1:
            continue
        key = (f"{m.group(1)}x{m.group(2)}", cfg, int(m.group(3)))
        times[key] = min(times.get(key, math.inf), float(rec["us"]))
    out: dict[int, list[float]] = defaultdict(list)
    for (shape, c, mm), us in times.items():
        if mm == 1 and (shape, c, 2) in times:
            out[c.SWAP_AB].append(us / times[(shape, c, 2)])
    return out


def latest_items(recs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """The last `item` record (search result) per item of `kind` among `recs`."""
    out: dict[str, dict[str, Any]] = {}
    for rec in recs:
        if rec["t"] == "item" and rec["item"]["kind"] == kind:
            it = rec["item"]
            out[item_key(kind, it["n"], it["k"], it["m"], it["packing"])] = rec
    return out


def split_after_evals(
    recs: list[dict[str, Any]], n: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`recs` cut after its n-th evaluation and the `item` records that follow it."""
    seen = 0
    for i, rec in enumerate(recs):
        seen += rec["t"] == "eval"
        if seen == n:
            j = i + 1
            while j < len(recs) and recs[j]["t"] != "eval":
                j += 1
            return recs[:j], recs[j:]
    return recs, []


def tuned_steps(log: str) -> dict[str, tuple[int, int, float]]:
    """`tuned KIND TPn` lines of a progress log: (items, evaluations, wall s)."""
    return {
        f"{m.group(1)} TP{m.group(2)}": (int(m.group(3)), int(m.group(4)), float(m.group(5)))
        for m in re.finditer(
            r"tuned (\w+) TP(\d+): (\d+)/\d+ items, (\d+) evaluations, ([\d.]+)s", log
        )
    }


def precompiles(log: str) -> dict[str, tuple[int, float]]:
    """`precompile KIND` lines of a progress log: (binaries built, wall s)."""
    return {
        m.group(1): (int(m.group(2)), float(m.group(3)))
        for m in re.finditer(r"precompile (\w+): (\d+) ok, \d+ failed, wall ([\d.]+)s", log)
    }


def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares y = a + b x: (a, b)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - b * mx, b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT / "reports/kernels/data")
    ap.add_argument("--configs", type=Path, default=ROOT / "kernels_tuning/configs")
    ap.add_argument("--out", type=Path, default=ROOT / "reports/kernels/README.md")
    args = ap.parse_args()
    d: Path = args.data
    rows_now = load_jsonl(d / "compare.jsonl")
    exh = load_jsonl(d / "exhaustive.jsonl")
    cache_all = load_jsonl(d / "cache.jsonl.gz")
    env = json.loads((d / "env.json").read_text())
    log1 = (d / "progress-run1.log").read_text()
    log2 = (d / "progress-run2.log").read_text()
    log3 = (d / "progress-run3.log").read_text()
    log4 = (d / "progress-run4.log").read_text()
    log6 = (d / "progress-run6.log").read_text()
    log9 = (d / "progress-run9.log").read_text()
    log12 = (d / "progress-run12.log").read_text()
    log13 = {kd: (d / f"progress-run13-{kd}.log").read_text() for kd in ("int4", "fp8")}
    logs16 = {c: (d / f"progress-run{c}.log").read_text() for c in (*CALLS16, 24)}
    small = json.loads((d / "small_m.json").read_text())
    pytest_log = (d / "pytest-gpu.log").read_text()

    # The items calls 4, 6, 9 and 13 re-tuned: their `retune` markers in the cache. An item's
    # comparison row is from the call ROWS_OF names for the last call that re-tuned it; the
    # other rows are call 3's.
    marks_all = [i for i, rec in enumerate(cache_all) if rec["t"] == "retune"]
    if len(marks_all) != len(RETUNE_CALLS):
        sys.exit(
            f"{d / 'cache.jsonl.gz'}: {len(marks_all)} `retune` records, expected "
            f"{len(RETUNE_CALLS)} (calls {RETUNE_CALLS}); update RETUNE_CALLS"
        )
    # Calls 1-15: the cache up to call 21's marker and the rows as they were before it.
    cache = cache_all[: marks_all[RETUNE_CALLS.index(CALLS16[0])]]
    marks = marks_all[: RETUNE_CALLS.index(CALLS16[0])]
    bounds_all = [*marks_all, len(cache_all)]
    span16 = {
        c: cache_all[bounds_all[i] + 1 : bounds_all[i + 1]]
        for i, c in enumerate(RETUNE_CALLS)
        if c in CALLS16
    }
    span25 = {
        c: cache_all[bounds_all[i] + 1 : bounds_all[i + 1]]
        for i, c in enumerate(RETUNE_CALLS)
        if c in CALLS25
    }
    # The items the last of calls 21-23 re-tuned: their rows are the shipped FP8 rows.
    retuned16 = set(cache_all[marks_all[RETUNE_CALLS.index(CALLS16[-1])]]["items"])
    prev16 = {row_key(r): r for r in load_jsonl(d / "call16" / "previous_compare.jsonl")}

    def ikey(r: dict[str, Any]) -> str:
        it = r["item"]
        return item_key(it["kind"], it["n"], it["k"], it["m"], it["packing"])

    rows16 = [r for r in rows_now if ikey(r) in retuned16]
    if set(prev16) != {row_key(r) for r in rows16} or len(rows16) != len(retuned16):
        sys.exit(
            f"{d / 'call16' / 'previous_compare.jsonl'}: {len(prev16)} rows, expected the "
            f"{len(retuned16)} items call {CALLS16[-1]} re-tuned, each with a row"
        )
    # INT4 likewise: the items call 32 re-tuned and the rows from before call 26.
    retuned25 = set(cache_all[marks_all[RETUNE_CALLS.index(CALLS25[-1])]]["items"])
    prev25 = {row_key(r): r for r in load_jsonl(d / "call25" / "previous_compare.jsonl")}
    rows25 = [r for r in rows_now if ikey(r) in retuned25]
    if set(prev25) != {row_key(r) for r in rows25} or len(rows25) != len(retuned25):
        sys.exit(
            f"{d / 'call25' / 'previous_compare.jsonl'}: {len(prev25)} rows, expected the "
            f"{len(retuned25)} items call {CALLS25[-1]} re-tuned, each with a row"
        )
    rows = [prev16.get(row_key(r)) or prev25.get(row_key(r)) or r for r in rows_now]
    calls_15 = RETUNE_CALLS[: len(marks)]
    bounds = [*marks, len(cache)]
    # A call's span: the records after its `retune` marker(s) up to the next marker; call 13's two
    # records (one per kind) also per kind in span13.
    span: dict[int, list[dict[str, Any]]] = defaultdict(list)
    span13: dict[str, list[dict[str, Any]]] = {}
    retuned13: dict[str, set[str]] = {}
    for i, c in enumerate(calls_15):
        recs = cache[bounds[i] + 1 : bounds[i + 1]]
        span[c] += recs
        if c == 13:
            kinds = {key.split(":", 1)[0] for key in cache[marks[i]]["items"]}
            if len(kinds) != 1 or (kd := kinds.pop()) in span13:
                sys.exit(f"{d / 'cache.jsonl.gz'}: call 13's `retune` records: one kind each")
            span13[kd] = recs
            retuned13[kd] = set(cache[marks[i]]["items"])
    # Each of call 13's spans: its search and its polish (two timings per config, like call
    # 12's), the counts its progress log gives.
    for kd, recs in span13.items():
        n_search = sum(int(x) for x in re.findall(r"items, (\d+) evaluations", log13[kd]))
        n_pol = int(seconds(r"polish: \d+ items cross-checked, (\d+) timings", log13[kd]))
        ev = [rec for rec in recs if rec["t"] == "eval"]
        n_ev_pol = sum(1 for rec in ev if rec.get("phase") == "polish")
        if len(ev) != n_search + 2 * n_pol or n_ev_pol != 2 * n_pol:
            sys.exit(
                f"{d / 'cache.jsonl.gz'}: call 13's {kd} span has {len(ev)} evaluations "
                f"({n_ev_pol} polish); progress-run13-{kd}.log: {n_search} in the search + "
                f"2 x {n_pol} polish timings"
            )
    # Call 12 resumed from call 9's cache without a `retune` record: the span after call 9's
    # marker holds call 9's search and polish (their counts are in its log), then call 12's
    # polish, which timed each config twice.
    n_ev9 = sum(int(x) for x in re.findall(r"items, (\d+) evaluations", log9)) + int(
        seconds(r"polish: \d+ items cross-checked, (\d+) timings", log9)
    )
    span[9], span[12] = split_after_evals(span[9], n_ev9)
    n12_cfgs = int(seconds(r"polish: \d+ items cross-checked, (\d+) timings", log12))
    n12_evals = sum(1 for rec in span[12] if rec["t"] == "eval")
    if n12_evals != 2 * n12_cfgs or any(
        rec.get("phase") != "polish" for rec in span[12] if rec["t"] == "eval"
    ):
        sys.exit(
            f"{d / 'cache.jsonl.gz'}: after call 9's {n_ev9} evaluations expected call 12's polish "
            f"only, 2 x {n12_cfgs} timings (progress-run12.log); found {n12_evals} evaluations"
        )
    retuned: dict[int, set[str]] = defaultdict(set)
    for c, i in zip(calls_15, marks, strict=True):
        retuned[c] |= set(cache[i]["items"])
    call_of: dict[str, int] = {}
    for c in calls_15:
        call_of |= dict.fromkeys(retuned[c], c)
    for r in rows:
        it = r["item"]
        r["tp"] = 1 if (it["n"], it["k"]) in TP1 else 2
        r["call"] = call_of.get(item_key(it["kind"], it["n"], it["k"], it["m"], it["packing"]), 3)
        r["rows_of"] = ROWS_OF.get(r["call"], 3)
    m_retuned = ms_of(retuned[4])
    m4_max = max(m_retuned) if m_retuned else 0
    m6_max = max(ms_of(retuned[6]), default=0)
    n6 = len(retuned[6])
    n9 = len(retuned[9])
    kinds9 = kinds_of(retuned[9])
    kinds6 = kinds_of(retuned[6])
    m13 = {kd: max(ms_of(keys)) for kd, keys in retuned13.items()}
    fp8 = [r for r in rows if r["item"]["kind"] == "fp8"]
    int4 = [r for r in rows if r["item"]["kind"] == "int4"]
    # The rows call 13 replaced (call 12's FP8 rows at M <= 64, call 7's INT4 rows at M <= 32):
    # the sections on calls 8-12 describe those calls' rows.
    prev13 = {row_key(r): r for r in load_jsonl(d / "call13" / "previous_compare.jsonl")}
    replaced = {row_key(r) for r in rows if r["call"] == 13}
    if set(prev13) != replaced:
        sys.exit(
            f"{d / 'call13' / 'previous_compare.jsonl'}: {len(prev13)} rows, expected the "
            f"{len(replaced)} items call 13 re-tuned"
        )
    fp8_c12 = [prev13.get(row_key(r), r) for r in fp8]
    int4_c7 = [prev13.get(row_key(r), r) for r in int4]
    # From here on `fp8` is what is shipped: call 23's rows (the sections on calls 8-15 take
    # fp8_c12 / fp8_c15 and `rows`, the rows before call 21).
    fp8_c15 = fp8
    fp8 = shipped_rows(rows16, CALLS16[-1])
    # And `int4` call 32's rows (the sections on calls 1-24 take int4_c24).
    int4_c24 = int4
    int4 = shipped_rows(rows25, CALLS25[-1])

    # ---- gate check of every shipped config -------------------------------------------------
    gate = gate_check(cache_all, args.configs)
    n_eval = sum(1 for rec in cache_all if rec["t"] == "eval")
    n_eval_call = {c: sum(1 for rec in recs if rec["t"] == "eval") for c, recs in span.items()}
    n_eval_call |= {c: sum(1 for rec in recs if rec["t"] == "eval") for c, recs in span16.items()}
    n_eval_call |= {c: sum(1 for rec in recs if rec["t"] == "eval") for c, recs in span25.items()}
    fail_kinds: dict[str, int] = defaultdict(int)
    for rec in cache:
        if rec["t"] == "eval" and not rec.get("ok"):
            fail_kinds[str(rec.get("error", ""))[:40]] += 1
    n_fail = sum(fail_kinds.values())

    # ---- goal figures -----------------------------------------------------------------------
    def t(r: dict[str, Any], name: str) -> float:
        return float(r["times_us"][name])

    def topt(r: dict[str, Any], name: str) -> float | None:
        v = r["times_us"].get(name)
        return float(v) if v else None

    def ours_fp8(r: dict[str, Any]) -> float:
        return min(x for x in (topt(r, "tuned"), topt(r, "tuned_splitk")) if x is not None)

    def shape(r: dict[str, Any]) -> str:
        return f"{r['item']['n']}x{r['item']['k']}"

    small_fp8 = [r for r in fp8 if r["item"]["m"] <= 128]
    g1_eng = gm([t(r, "default") / t(r, "tuned") for r in small_fp8])
    g1_own = gm([t(r, "default") / ours_fp8(r) for r in small_fp8])
    g1_min = min(t(r, "default") / t(r, "tuned") for r in small_fp8)
    tiny = [r for r in fp8 if r["item"]["m"] <= 16]
    by_shape: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in tiny:
        by_shape[(r["item"]["n"], r["item"]["k"])].append(r)
    g2_rows = []
    for (n, k), rs in sorted(by_shape.items(), key=lambda kv: -kv[0][0] * kv[0][1]):
        tb_e = [r["bytes"] / t(r, "tuned") / 1e6 for r in rs]
        tb_o = [r["bytes"] / ours_fp8(r) / 1e6 for r in rs]
        rat_e = [t(r, "tuned") / t(r, "cublas_fp8_per_tensor") for r in rs]
        rat_o = [ours_fp8(r) / t(r, "cublas_fp8_per_tensor") for r in rs]
        cub = [r["bytes"] / t(r, "cublas_fp8_per_tensor") / 1e6 for r in rs]
        g2_rows.append((n, k, rs[0]["tp"], min(tb_e), min(tb_o), min(cub), max(rat_e), max(rat_o)))
    worst_tb = min(x[4] for x in g2_rows)
    worst_rat = max(x[7] for x in g2_rows)
    n_tb = sum(1 for x in g2_rows if x[4] >= 3.2)
    n_rat = sum(1 for x in g2_rows if x[7] <= 1.1)
    # The shapes that miss 3.2 TB/s: their weight bytes (fp8: N*K) and times per call.
    miss_shapes = [(n, k) for n, k, _, _, tbo, *_ in g2_rows if tbo < 3.2]
    miss_rows = [r for r in tiny if (r["item"]["n"], r["item"]["k"]) in miss_shapes]
    hit_rows = [r for r in tiny if (r["item"]["n"], r["item"]["k"]) not in miss_shapes]
    eng_worst = min(tiny, key=lambda r: r["bytes"] / t(r, "tuned"))
    big = [r for r in fp8 if r["item"]["m"] >= 1024]
    # M >= 1024: our own files (FOLD_SCALES allowed since call 9) and the engine files.
    tf = [r["flops"] / ours_fp8(r) / 1e6 for r in big]
    tf_eng = [r["flops"] / t(r, "tuned") / 1e6 for r in big]
    under700 = sorted(
        ((r, r["flops"] / ours_fp8(r) / 1e6) for r in big if r["flops"] / ours_fp8(r) / 1e6 < 700),
        key=lambda x: x[1],
    )
    tf_cub = [r["flops"] / t(r, "cublas_fp8_per_tensor") / 1e6 for r in big]
    # The same at call 12 (before calls 21-23: FOLD_SCALES without TMA).
    tf12 = [r["flops"] / ours_fp8(r) / 1e6 for r in fp8_c15 if r["item"]["m"] >= 1024]
    n700_12 = sum(1 for x in tf12 if x >= 700)
    tf_bf16 = [r["flops"] / t(r, "bf16_matmul") / 1e6 for r in big]
    fold = fold_stats(d, fp8_c12)
    # The FP8 results a `retune` record of call 9 set aside (ResultCache.superseded), call 9's
    # own results (after its polish), then call 12's polish of them.
    prior = latest_items(cache[: marks[RETUNE_CALLS.index(9)]], "fp8")
    pol = polish_stats(d, fp8_c12, prior, latest_items(span[9], "fp8"), span[12])
    i11 = int4_pack2_stats(d / "call11", int4_c7)
    slower = [r for r in fp8 if t(r, "tuned") > 1.02 * t(r, "default")]
    i_tiny = [r for r in int4 if r["item"]["m"] <= 16]
    g4 = [t(r, "bf16_matmul") / t(r, "tuned") for r in i_tiny]
    g5 = [t(r, "vllm_awq_defaults") / t(r, "tuned") for r in i_tiny]
    g5_all = [t(r, "vllm_awq_defaults") / t(r, "tuned") for r in int4]
    below15 = [r for r in int4 if t(r, "vllm_awq_defaults") / t(r, "tuned") < 1.5]
    i_tb = [r["bytes"] / t(r, "tuned") / 1e6 for r in i_tiny]
    i_big = [r for r in int4 if r["item"]["m"] >= 1024]
    i_tf = [r["flops"] / t(r, "tuned") / 1e6 for r in i_big]
    i_tf_bf16 = [r["flops"] / t(r, "bf16_matmul") / 1e6 for r in i_big]
    # INT4 at M <= 16 per shape: worst x bf16, times; a line time = a + bytes / rate through all
    # rows for ours (all bytes) and for bf16 (its bf16 weights, activations and output).
    i_shapes: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in i_tiny:
        i_shapes[(r["item"]["n"], r["item"]["k"])].append(r)
    i_fit = line_fit([r["bytes"] / 1e6 for r in i_tiny], [t(r, "tuned") for r in i_tiny])

    def bf16_bytes(r: dict[str, Any]) -> float:
        n, k, m = r["item"]["n"], r["item"]["k"], r["item"]["m"]
        return float(2.0 * (n * k + m * k + m * n))

    b_fit = line_fit([bf16_bytes(r) / 1e6 for r in i_tiny], [t(r, "bf16_matmul") for r in i_tiny])
    i_best = [KernelConfig.from_dict(r["best"]) for r in i_tiny if r["best"]]
    i_small_shape = min(i_shapes, key=lambda s: s[0] * s[1])
    i_small_bf16 = statistics.median(t(r, "bf16_matmul") for r in i_shapes[i_small_shape])

    def x_bf16(r: dict[str, Any]) -> float:
        return t(r, "bf16_matmul") / t(r, "tuned")

    def int4_group(lo: float, hi: float) -> str:
        ss = [s for s, rs in i_shapes.items() if lo <= min(x_bf16(r) for r in rs) < hi]
        ss.sort(key=lambda s: -s[0] * s[1])
        if not ss:
            return "none"
        rs = [r for s in ss for r in i_shapes[s]]
        return (
            f"{', '.join(f'{n}x{k}' for n, k in ss)} "
            f"({rng([n * k / 2e6 for n, k in ss], '.0f')} MB of int4 weights, "
            f"{rng([t(r, 'tuned') for r in rs], '.0f')} us per call): "
            f"{rng([x_bf16(r) for r in rs])}x"
        )

    def split_k(rs: list[dict[str, Any]]) -> str:
        ks = sorted({KernelConfig.from_dict(r["best"]).SPLIT_K for r in rs if r["best"]})
        return "/".join(map(str, ks)) or "-"

    narrow = [r for r in i_tiny if r["item"]["n"] == 5120]
    wide = [r for r in i_tiny if r["item"]["n"] != 5120]
    # Call 6 vs call 4 on the same items: the search's winner time (same harness).
    i4_best = latest_items(span[4], "int4")
    i6_best = latest_items(span[6], "int4")
    i_gain = [
        i4_best[k]["best_us"] / i6_best[k]["best_us"]
        for k in i6_best
        if k in i4_best and i6_best[k]["item"]["m"] <= 16
    ]
    i_mid = [r for r in int4 if 16 < r["item"]["m"] <= 32]
    i_mid_vs16 = [
        t(r, "tuned") / statistics.median(t(q, "tuned") for q in i_shapes[s])
        for r in i_mid
        if (s := (r["item"]["n"], r["item"]["k"])) in i_shapes
    ]
    tb_own = [r["bytes"] / ours_fp8(r) / 1e6 for r in tiny]
    tb_eng = [r["bytes"] / t(r, "tuned") / 1e6 for r in tiny]
    tb_cub = [r["bytes"] / t(r, "cublas_fp8_per_tensor") / 1e6 for r in tiny]
    rat_own = [ours_fp8(r) / t(r, "cublas_fp8_per_tensor") for r in tiny]
    rat_eng = [t(r, "tuned") / t(r, "cublas_fp8_per_tensor") for r in tiny]
    ratios = [e["ratio"] for e in exh if e.get("ratio")]
    ev_b = sum(e["budgeted_evals"] for e in exh)
    ev_e = sum(e["exhaustive_evals"] for e in exh)
    pair_pct = [100 * e["budgeted_evals"] / e["exhaustive_evals"] for e in exh]
    # SWAP_AB in the winners of call 4's re-tune (its search results in the cache: calls 9/12
    # replaced its FP8 rows, call 6 its INT4 rows), and in the shipped FP8 rows at M <= 32.
    sw_fp8 = list(latest_items(span[4], "fp8").values())
    sw_int4 = list(latest_items(span[4], "int4").values())
    fp8_small = [r for r in fp8 if r["item"]["m"] <= m4_max]
    n_sw_now = sum(1 for r in fp8_small if (r["best"] or {}).get("SWAP_AB"))
    n_sw_fp8 = sum(1 for r in sw_fp8 if (r["best"] or {}).get("SWAP_AB"))
    n_sw_int4 = sum(1 for r in sw_int4 if (r["best"] or {}).get("SWAP_AB"))
    # Call 6's INT4 winners (its search results in the cache) and call 13's (its rows): SWAP_AB,
    # and which run the plane kernel.
    i6 = list(i6_best.values())
    i13 = [r for r in int4_c24 if r["call"] == 13]
    n_sw6 = sum(1 for r in i6 if (r["best"] or {}).get("SWAP_AB"))
    n_sw13 = sum(1 for r in i13 if (r["best"] or {}).get("SWAP_AB"))
    # INT4 rows not re-tuned since the plane kernel whose config it now takes (timed before it).
    old_planes = [
        f"{r['item']['n']}x{r['item']['k']} M={r['item']['m']}"
        for r in int4_c24
        if r["rows_of"] == 3
        and r["best"]
        and uses_planes(KernelConfig.from_dict(r["best"]), "awq")
    ]

    def n_planes(rs: list[dict[str, Any]]) -> int:
        return sum(
            1 for r in rs if r["best"] and uses_planes(KernelConfig.from_dict(r["best"]), "awq")
        )

    n_pl6, n_pl13 = n_planes(i6), n_planes(i13)
    ab = small_m_summary(small, args.configs)
    r13 = retune13_stats(rows, prev13)
    probe = probe_stats(d / "call13" / "int4_probe.json", env["int4"]["sm_count"])
    ncu = ncu_stats(d / "call13")
    stalls = ncu_stats(d / "call13", "ncu_stalls.txt")
    m12 = m1_vs_m2(span[4])

    # K tiles per program of the shipped INT4 winners at M <= 16 (K / (BK x SPLIT_K)).
    ktiles = [
        r["item"]["k"]
        / (
            KernelConfig.from_dict(r["best"]).BLOCK_SIZE_K
            * KernelConfig.from_dict(r["best"]).SPLIT_K
        )
        for r in i_tiny
        if r["best"]
    ]
    # FP8 (shape, M) at M >= 1024 under 700 TFLOP/s with our own files, by shape.
    by_shape_700: dict[str, list[str]] = defaultdict(list)
    for r, x in under700:
        by_shape_700[shape(r)].append(f"M={r['item']['m']} {x:.0f} ({x / 700 - 1:+.1%})")
    # Calls 16-23 at decode sizes, for the FP8 miss: stream-K's best (call 17) and TMA's re-tune.
    sk17_small = [
        r["shipped_us"] / r["best_new_us"]
        for r in json.loads((d / "call16" / "streamk_probe.json").read_text())
        if r["m"] <= 16
    ]
    prev_small = {row_key(r): r for r in fp8_c15 if r["item"]["m"] <= 16}
    tma_small = (
        [own_us(prev_small[row_key(r)]) / own_us(r) for r in fp8 if row_key(r) in prev_small],
        [
            t(prev_small[row_key(r)], "cublas_fp8_per_tensor") / t(r, "cublas_fp8_per_tensor")
            for r in fp8
            if row_key(r) in prev_small
        ],
    )
    under700_text = "; ".join(f"{s_} {', '.join(v)}" for s_, v in by_shape_700.items()) or "none"

    def rng(xs: list[float], fmt: str = ".2f") -> str:
        if not xs:
            return "-"
        lo, hi = f"{min(xs):{fmt}}", f"{max(xs):{fmt}}"
        return lo if lo == hi else f"{lo}-{hi}"

    def shapes_text(ss: list[tuple[int, int]]) -> str:
        return ", ".join(f"{n}x{k}" for n, k in ss) or "none"

    fa, ia = ab.get("fp8"), ab.get("int4")
    # FP8 M <= 16 shapes in three groups by their worst TB/s (own files): at 3.2, within 10%,
    # further off; per group the weight MB (fp8: N*K bytes), worst TB/s and worst time / cuBLAS.
    groups: dict[str, list[tuple[int, int, int, float, float, float, float, float]]] = {
        "hit": [x for x in g2_rows if x[4] >= 3.2],
        "near": [x for x in g2_rows if 0.9 * 3.2 <= x[4] < 3.2],
        "far": [x for x in g2_rows if x[4] < 0.9 * 3.2],
    }

    def group_text(g: str) -> str:
        xs = groups[g]
        if not xs:
            return "none"
        us = [
            ours_fp8(r) for r in tiny if any((r["item"]["n"], r["item"]["k"]) == x[:2] for x in xs)
        ]
        return (
            f"{', '.join(f'{x[0]}x{x[1]}' for x in xs)} "
            f"({rng([x[0] * x[1] / 1e6 for x in xs], '.0f')} MB of weights, {rng(us, '.0f')} us "
            f"per call): worst {rng([x[4] for x in xs])} TB/s and "
            f"{rng([x[7] for x in xs])}x cuBLAS's time; cuBLAS {rng([x[5] for x in xs])} TB/s"
        )

    new_splits = ", ".join(map(str, NEW_SPLITS))
    # Call 13 against the rows it replaced at M <= 16 (INT4: tuned; FP8: own files).
    b13 = {kd: v["bands"][0] for kd, v in r13.items()}
    # Nsight Compute, INT4 plane kernel against bf16 cuBLAS on the same shape, smallest first.
    ncu4 = sorted(
        (k for k in ncu if k["ours"] and k["kind"] == "int4"),
        key=lambda k: k["shape"][0] * k["shape"][1],
    )
    ncu_base = {k["shape"]: k for k in ncu if not k["ours"] and k["kind"] == "int4"}
    ncu_short = (
        "Nsight Compute (call 13, configs from before its re-tune) finds the plane kernel short "
        "of warps rather than of bandwidth: "
        + "; ".join(
            f"on {k['shape'][0]}x{k['shape'][1]} "
            f"{ncu_metric(k, 'Active Warps Per Scheduler'):.1f} active warps per scheduler and "
            f"{ncu_metric(k, 'DRAM Throughput'):.0f}% of DRAM"
            + (
                f" (bf16 cuBLAS: {ncu_metric(ncu_base[k['shape']], 'DRAM Throughput'):.0f}%)"
                if k["shape"] in ncu_base
                else ""
            )
            for k in ncu4
        )
        + " ([Nsight Compute](#where-the-int4-decode-kernels-time-goes-nsight-compute-call-13))."
        if ncu4
        else ""
    )
    bn512 = (
        (
            f"Call 13's probe timed BN 512 with 8 warps: never the fastest config of its (shape, "
            f"M) ({len(probe['rows'])} rows), {rng(probe['b512_rel'])}x the time of the config "
            "shipped then."
            if probe["n_512_fastest"] == 0
            else f"Call 13's probe timed BN 512 with 8 warps: the fastest config on "
            f"{probe['n_512_fastest']}/{len(probe['rows'])} rows."
        )
        if probe
        else ""
    )
    mid_cfgs = [KernelConfig.from_dict(r["best"]) for r in i_mid if r["best"]]
    # Calls 25-32 for the INT4 miss: the shipped rows against those before call 26, and where the
    # decode kernel's fixed cost goes (call 31: one K tile per program, N = 5120).
    prev_tiny = _int4_bands(int4_c24, int4)[0]
    fc31 = {
        (r["m"], r["split_k"]): r
        for r in json.loads((d / "call25" / "fixed_cost_probe-call31.json").read_text())
        if r["k_tiles_per_program"] == 1
    }
    ep35 = [
        r
        for r in json.loads((d / "call25" / "fp8_epilogue_probe-call35.json").read_text())
        if r["k"] == 3072
    ]
    fc33 = json.loads((d / "call25" / "fp8_fixed_cost_probe-call33.json").read_text())
    cl = _cluster_rows(d / "call38")
    deep = load_jsonl(d / "call38" / "deep_stages_probe-call45.jsonl")
    stats = {
        "deep_fp8": short_spread([r["shipped"] / r["deep"] for r in deep]),
        "cl_fp8": short_spread([r["shipped"] / r["cluster"] for r in cl["fp8"]]),
        "cl_int4": short_spread([r["shipped"] / r["cluster"] for r in cl["int4"]]),
        "fc_nosplit": rng([r["ours"] / r["cublas"] for r in fc33 if r["split_k"] == 1]),
        "ep_ordered": rng([r["ordered"] for r in ep35]),
        "ep_nosync": rng([r["no_sync"] for r in ep35]),
        "ep_cublas": rng([r["cublas"] for r in ep35]),
        "iprev_t": short_spread(prev_tiny["tuned"]),
        "iprev_c": short_spread(prev_tiny["bf16"]),
        "n_at_tiny": sum(1 for r in i_tiny if (r["best"] or {}).get("ATOMIC_REDUCE")),
        "n_pl_tiny": n_planes(i_tiny),
        "n_itiny": len(i_tiny),
        "fc_sk1": fc31[(1, 1)]["base"],
        "fc_at1": fc31[(1, 6)]["red"],
        "fc_at16": fc31[(16, 6)]["red"],
        "fc_empty": statistics.median(r["empty"] for r in fc31.values()),
        "new_splits": new_splits,
        "split_anchor": f"split-k-{'-'.join(map(str, NEW_SPLITS))}-call-13",
        "n_pl13": n_pl13,
        "n13i": len(i13),
        "m13i": m13["int4"],
        "n_sw13": n_sw13,
        "i13_gain": short_spread(b13["int4"]["own"]) if "int4" in b13 else "-",
        "i13_base": short_spread(b13["int4"]["base"]) if "int4" in b13 else "-",
        "f13_gain": short_spread(b13["fp8"]["own"]) if "fp8" in b13 else "-",
        "f13_base": short_spread(b13["fp8"]["base"]) if "fp8" in b13 else "-",
        "f13_split": sum(
            1
            for r in tiny
            if r["best"] and KernelConfig.from_dict(r["best"]).SPLIT_K in NEW_SPLITS
        ),
        "ncu_short": ncu_short,
        "bn512": bn512,
        "i_mid_tiles": (
            "the winners run two 16-token tiles that each dequantize the whole weight"
            if mid_cfgs and all(c.BLOCK_SIZE_M == 16 for c in mid_cfgs)
            else "winners use BM "
            + "/".join(str(b) for b in sorted({c.BLOCK_SIZE_M for c in mid_cfgs}))
        ),
        "own_cub": rng(rat_own),
        "eng_cub": rng(rat_eng),
        "tb_own": rng(tb_own),
        "tb_cub": rng(tb_cub),
        "n_shapes": len(g2_rows),
        "n_tb": n_tb,
        "n_rat": n_rat,
        "g_hit": group_text("hit"),
        "g_near": group_text("near"),
        "g_far": group_text("far"),
        "hit_shapes": shapes_text([(n, k) for n, k, *_ in g2_rows if (n, k) not in miss_shapes]),
        "hit_mb": rng(sorted({r["item"]["n"] * r["item"]["k"] / 1e6 for r in hit_rows}), ".0f"),
        "hit_tb": rng([r["bytes"] / ours_fp8(r) / 1e6 for r in hit_rows]),
        "hit_cub": rng([ours_fp8(r) / t(r, "cublas_fp8_per_tensor") for r in hit_rows]),
        "miss_mb": rng(sorted({r["item"]["n"] * r["item"]["k"] / 1e6 for r in miss_rows}), ".0f"),
        "miss_us": rng([ours_fp8(r) for r in miss_rows], ".0f"),
        "miss_cub": rng([ours_fp8(r) / t(r, "cublas_fp8_per_tensor") for r in miss_rows]),
        "tb_eng_lo": min(tb_eng),
        "eng_worst": f"{shape(eng_worst)} M={eng_worst['item']['m']}",
        "n_sw_fp8": n_sw_fp8,
        "n_sw_now": n_sw_now,
        "n_fp8_small": len(fp8_small),
        "n_fold_tiny": sum(1 for r in tiny if (r["best"] or {}).get("FOLD_SCALES")),
        "n_tiny": len(tiny),
        "fold_small": spread(fold["bands"][0]["own"]),
        "tf_eng": rng(tf_eng, ".0f"),
        "n700_eng": sum(1 for x in tf_eng if x >= 700),
        "under700": under700_text,
        "sk_small": f"{gm(sk17_small):.2f}x",
        "tma_small_own": f"{gm(tma_small[0]):.2f}x",
        "tma_small_cub": f"{gm(tma_small[1]):.2f}x",
        "i11_ins": (
            f"{i11['ins'][0]} -> {i11['ins'][1]} SASS instructions per K tile"
            if i11 and i11["ins"]
            else "fewer instructions"
        ),
        "i11_same": gm(i11["same"]) if i11 else math.nan,
        "i11_bf16": gm(i11["bf16"]) if i11 else math.nan,
        "ktiles": rng(ktiles, ".1f"),
        "n_fp8_4": len(sw_fp8),
        "n_sw_int4": n_sw_int4,
        "n_int4_4": len(sw_int4),
        "m4_max": m4_max,
        "m12_plain": (
            f"median {statistics.median(m12[0]):.2f}, range {rng(m12[0])} over {len(m12[0])} "
            "configs"
            if m12.get(0)
            else "not measured"
        ),
        "m12_swap": (
            f"median {statistics.median(m12[1]):.2f}, range {rng(m12[1])} over {len(m12[1])}"
            if m12.get(1)
            else "not measured"
        ),
        "g1_eng": g1_eng,
        "g1_own": g1_own,
        "short": (1.5 / g1_eng - 1) * 100,
        "n_slow": len(slower),
        "slow_ms": rng([float(r["item"]["m"]) for r in slower], ".0f"),
        "slow_pct": rng([(t(r, "tuned") / t(r, "default") - 1) * 100 for r in slower], ".0f"),
        "tf": rng(tf, ".0f"),
        "n700": sum(1 for x in tf if x >= 700),
        "n_big": len(tf),
        "cub_tf": rng(tf_cub, ".0f"),
        "bf_tf": rng(tf_bf16, ".0f"),
        "i_x": rng(g4),
        "i_gm": gm(g4),
        "i_hi": int4_group(1.5, math.inf),
        "i_lo": int4_group(0.0, 1.5),
        "i_a": i_fit[0],
        "i_bw": 1 / i_fit[1],
        "b_a": b_fit[0],
        "b_bw": 1 / b_fit[1],
        "i_small": f"{i_small_shape[0]}x{i_small_shape[1]}",
        "i_need": i_small_bf16 / 2,
        "i_gain": rng(i_gain),
        "i_gain_gm": gm(i_gain),
        "n_gain": len(i_gain),
        "n_pl6": n_pl6,
        "n6": n6,
        "m6_max": m6_max,
        "n_sw6": n_sw6,
        "i_bn": "/".join(str(b) for b in sorted({c.BLOCK_SIZE_N for c in i_best})),
        "i_bn_max": max(c.BLOCK_SIZE_N for c in i_best),
        "n_tiles": 5120 // max(c.BLOCK_SIZE_N for c in i_best),
        "fix_ratio": i_fit[0] / b_fit[0],
        "sms": env["int4"]["sm_count"],
        "grid_bn": max(GRID["BLOCK_SIZE_N"]),
        "i_lo_us": rng(
            [
                t(r, "tuned")
                for s, rs in i_shapes.items()
                if min(x_bf16(q) for q in rs) < 1.5
                for r in rs
            ],
            ".0f",
        ),
        "bw_ratio": b_fit[1] / i_fit[1],
        "n_i_best": len(i_best),
        "sk_narrow": split_k(narrow),
        "sk_wide": split_k(wide),
        "narrow_programs": ", ".join(
            f"{sk}: {5120 // max(c.BLOCK_SIZE_N for c in i_best) * sk} programs"
            for sk in sorted(
                {KernelConfig.from_dict(r["best"]).SPLIT_K for r in narrow if r["best"]}
            )
        ),
        "i_mid_x": rng([x_bf16(r) for r in i_mid]),
        "i_mid_vs16": rng(i_mid_vs16),
        "i_mid_ms": ", ".join(str(m) for m in sorted({r["item"]["m"] for r in i_mid})),
        "itb": rng(i_tb),
        "itf": rng(i_tf, ".0f"),
        "ibf": rng(i_tf_bf16, ".0f"),
        "v_lo": min(g5),
        "v_gm": gm(g5),
        "va": rng(g5_all),
        "n_below": len(below15),
        "below": ", ".join(f"{shape(r)} M={r['item']['m']}" for r in below15) or "none",
        "below_text": (
            "it holds on every M"
            if not below15
            else f"{len(below15)} items stay under 1.5x: "
            + ", ".join(f"{shape(r)} M={r['item']['m']}" for r in below15)
        ),
        "r_rng": rng(ratios, ".3f"),
        "pct": 100 * ev_b / ev_e,
        "pct_hi": max(pair_pct),
    }
    if fa is not None:
        stats |= {
            "fa_rows": fa["rows"],
            "fa_faster": fa["swap_faster"],
            "fa_sp": rng([fa["sp_lo"], fa["sp_hi"]]),
            "fa_sp_gm": fa["sp_gm"],
            "fa_plain": gm(fa["ratios"]["plain"]),
            "fa_swap": gm(fa["ratios"]["swap"]),
            "fa_either_hi": max(fa["ratios"]["either"]),
        }
    if ia is not None:
        stats |= {
            "ia_rows": ia["rows"],
            "ia_faster": ia["swap_faster"],
            "ia_sp": rng([ia["sp_lo"], ia["sp_hi"]]),
            "ia_sp_gm": ia["sp_gm"],
            "ia_by_m": ", ".join(f"M={m} {x:.2f}" for m, x in ia["by_m"].items()),
            "ia_lose": shapes_text(ia["shapes_swap_loses"]),
            "ia_vs_files": sum(1 for x in ia["swap_vs_shipped"] if x < 1),
            "ia_vs_files_gain": (1 - min(ia["swap_vs_shipped"])) * 100,
            "ia_rows_slower": ia["rows"] - ia["swap_faster"],
            "ia_plain_kept": len(sw_int4) - n_sw_int4,
            "ia_win": shapes_text(
                sorted(
                    {
                        (r["n"], r["k"])
                        for r in small["rows"]
                        if r["kind"] == "int4" and r["us"]["swap"] < r["us"]["plain"]
                    }
                )
            ),
        }

    # ---- calls 1-4: costs -------------------------------------------------------------------
    pre_fp8 = seconds(r"precompile fp8: .*wall ([\d.]+)s", log1)
    pre_int4 = seconds(r"precompile int4: .*wall ([\d.]+)s", log1)
    n_pre1 = {
        m.group(1): int(m.group(2)) for m in re.finditer(r"precompile (\w+): (\d+) ok", log1)
    }
    tune = {
        key: seconds(rf"tuned {key}: .*evaluations, ([\d.]+)s", log1)
        for key in ("fp8 TP1", "int4 TP1", "fp8 TP2", "int4 TP2")
    }
    evals = {key: int(seconds(rf"tuned {key}: .*items, (\d+) evaluations", log1)) for key in tune}
    retune = {key: seconds(rf"tuned {key}: .*evaluations, ([\d.]+)s", log2) for key in tune}
    polish_line = re.search(r"polish: .*", log3)

    tune4, tune6, tune9 = tuned_steps(log4), tuned_steps(log6), tuned_steps(log9)
    pre4, pre6, pre9, pre12 = (precompiles(x) for x in (log4, log6, log9, log12))
    polish4, polish6, polish9, polish12 = (
        re.search(r"polish: .*", x) for x in (log4, log6, log9, log12)
    )
    tune13 = {kd: tuned_steps(x) for kd, x in log13.items()}
    pre13 = {kd: precompiles(x) for kd, x in log13.items()}
    polish13 = {kd: re.search(r"polish: .*", x) for kd, x in log13.items()}
    compare13 = {kd: int(seconds(r"compare: (\d+) items", x)) for kd, x in log13.items()}
    compare4, compare6, compare9, compare12 = (
        int(seconds(r"compare: (\d+) items", x)) if "compare:" in x else 0
        for x in (log4, log6, log9, log12)
    )
    gpu_tests = re.search(r"(\d+) passed", pytest_log)
    gpu_tests20 = re.search(r"\d+ passed", (d / "call16" / "pytest-gpu-call20.log").read_text())
    gpu_tests32 = re.search(r"\d+ passed", (d / "call25" / "pytest-gpu-call32.log").read_text())
    gpu_tests36 = re.search(r"\d+ passed", (d / "call25" / "pytest-gpu-call36.log").read_text())
    gpu_tests37 = re.search(r"\d+ passed", (d / "call25" / "pytest-gpu-call37.log").read_text())
    gpu_tests10 = re.search(r"\d+ passed", (d / "call11" / "pytest-gpu-call10.log").read_text())
    prov = env["fp8"]
    # Every progress log's first line names the GPU, torch and CUDA of its call.
    headers = {
        f.relative_to(d).as_posix(): f.read_text().split("\n", 1)[0]
        for f in sorted([*d.glob("progress-run*.log"), *d.glob("call*/progress*.log")])
    }
    want = f"name='{prov['gpu_name']}'"
    odd = [
        k
        for k, h in headers.items()
        if want not in h or f"torch {prov['torch']} cuda {prov['cuda']}" not in h
    ]
    same_env = (
        f"All {len(headers)} progress logs (calls 1-4, 6-13, 21-24, 26 and 32) name the same GPU, torch "
        f"{prov['torch']} and CUDA {prov['cuda']}; driver and Triton as above (`data/env.json`, "
        "`data/nvidia-smi.txt`, call 13)."
        if not odd
        else f"These progress logs name another GPU, torch or CUDA: {', '.join(odd)}."
    )
    src_sha = {k: kernel_source_sha256(k) for k in ("fp8", "int4")}
    fingerprints = {k: env[k]["kernel_sha256"] == src_sha[k] for k in src_sha}
    # The shipped sidecars' fingerprints against the source (what test_shim.py checks).
    side_sha = {
        (q := json.loads(f.read_text()))["kernel"]: q["kernel_sha256"]
        for f in args.configs.glob("*/*" + PROVENANCE_SUFFIX)
    }
    sides_ok = all(v == src_sha.get(k) for k, v in side_sha.items())

    m12_lo = min((r["item"]["m"] for r in fp8 if r["rows_of"] == 12), default=0)
    m3_lo = min((r["item"]["m"] for r in int4_c24 if r["rows_of"] == 3), default=0)
    L: list[str] = []
    w = L.append
    w("# Triton GEMM kernel tuning on one NVIDIA H200: Qwen3.8-27B, FP8 W8A8 block and INT4 W4A16")
    w("")
    w(
        f"Machine: {prov['gpu_name']} ({prov['sm_count']} SMs, {prov['l2_bytes'] // 2**20} MiB L2), "
        f"driver {prov['driver']}, CUDA {prov['cuda']}, torch {prov['torch']}, Triton "
        f"{prov['triton']}. Forty-five device calls: (1) a full run (precompile, search of all 400 "
        "items, comparison, budgeted vs exhaustive); (2) a re-tune of the 120 items with "
        "M <= 16 after a timing fix; (3) a cross-check of every item against its neighbours' "
        "winners (`runner.polish`) and a new comparison table; (4) after SWAP_AB joined the "
        f"space, a re-tune of the {len(retuned[4])} items with M <= {m4_max} (M = "
        f"{', '.join(map(str, m_retuned))}), a cross-check and a new comparison of those "
        f"items; (5) an A/B of SWAP_AB at M <= {max(fa['ms']) if fa else '-'}; (6) after the "
        "INT4 PTX plane kernel (`kernels_tuning/kernels/int4_awq_planes.py`) was added, a "
        f"re-tune, cross-check and new comparison of the {len(retuned[6])} "
        f"{'/'.join(k.upper() for k in kinds6)} items with M <= {m6_max}; (7) after a device "
        "check joined the plane kernel's dispatch, a re-gate and new comparison of those items "
        "with call 6's configs, nothing searched (see Method); (8) an FP8 kernel experiment, "
        "the tile's weight-block scale folded into the token scales, re-tuned and compared; "
        "(9) after that fold joined our own FP8 space as FOLD_SCALES, a re-tune, cross-check "
        f"and new comparison of the {len(retuned[9])} {'/'.join(k.upper() for k in kinds9)} "
        "items; (10) an FP8 polish with one timing per config and an INT4 kernel experiment, "
        "whose output was lost (the device returns at most 8 files; only its FP8 polish log "
        "and GPU test log are kept, in `data/call11/`); (11) both again: the FP8 polish, "
        "discarded ([Polish](#polish-two-timings-and-the-winners-before-a-re-tune-calls-10-12)), "
        "and the INT4 experiment, not shipped ([INT4 plane kernel, pairs along K](#int4-plane-"
        "kernel-pairs-along-k-call-11-not-shipped)); (12) call 9's results polished with two "
        "timings per config and the winners from before the re-tune, and a new comparison of "
        f"the {n9} FP8 items ([FOLD_SCALES](#fold_scales-calls-8-9-12)); (13) two probes "
        "(Nsight Compute of the decode kernels; the INT4 plane kernel with BN 512 or SPLIT_K "
        f"{new_splits}), then, with SPLIT_K {new_splits} in the space (a runtime argument: no "
        "new binaries, kernel sources unchanged), a re-tune, cross-check (two timings per "
        f"config, with the winners from before) and new comparison of the {len(retuned13['int4'])} INT4 "
        f"items with M <= {m13['int4']} and of the {len(retuned13['fp8'])} FP8 items with "
        f"M <= {m13['fp8']} ([Split-K {new_splits}](#split-k-{'-'.join(map(str, NEW_SPLITS))}"
        "-call-13)); (14) Nsight Compute once more, with the warp stall reasons ([Where the "
        "warps wait](#where-the-warps-wait-nsight-compute-stall-reasons-call-14)); (15) an INT4 "
        "kernel experiment, not shipped ([Zero point and scale after the dot](#zero-point-and-"
        "scale-after-the-dot-call-15-not-shipped)); (16-18) FP8 probes, not shipped: "
        "stream-K twice and a register cap ([Stream-K, a register cap, prefetched scales]"
        "(#stream-k-a-register-cap-prefetched-scales-calls-16-18-24-not-shipped)); (19) an FP8 "
        "probe with TMA loads; (20) the GPU tests with TMA in the FP8 kernel; (21-23) with TMA "
        "in our own FP8 space, three re-tunes, cross-checks and new comparisons of the "
        f"{len(fp8)} FP8 items ([TMA](#tma-calls-19-23)); (24) an FP8 kernel experiment, not "
        "shipped; (25) two INT4 probes, not shipped (a register cap; the plane kernel with 32 "
        f"and 64 tokens); (26) a re-tune, cross-check and new comparison of the {len(int4)} INT4 "
        f"items with the kernel as it was (until then the INT4 rows at M >= {m3_lo} were call "
        "3's, from before the kernel's SWAP_AB change); (27-31) probes of the split-K "
        "epilogue (27: the variant failed to compile, 28: its error); (32) with the atomic "
        "split-K sum in the INT4 space (ATOMIC_REDUCE), the GPU tests, then a re-tune, "
        f"cross-check and new comparison of the {len(int4)} INT4 items ([Split-K by atomic adds]"
        "(#split-k-by-atomic-adds-and-two-int4-probes-calls-25-32)); (33) an FP8 probe of the "
        "decode kernel's fixed cost and `autotune kernels tune` end to end with and without "
        "`--deterministic`; (34-35) FP8 probes of the split-K epilogue, not shipped ([FP8 at "
        "decode sizes](#fp8-at-decode-sizes-the-split-k-synchronization-calls-33-35)); (36) the "
        "GPU tests after review fixes; (37) the GPU tests again after a test clean-up; (38-42) "
        "probes of the split-K sum inside a thread-block cluster, not shipped ([Split-K in a "
        "thread-block cluster](#split-k-in-a-thread-block-cluster-calls-38-42-not-shipped)); "
        "(43-44) Nsight Compute of the INT4 plane kernel's pipes and instruction mix ([The plane "
        "kernel's pipes](#the-plane-kernels-pipes-and-instruction-mix-nsight-compute-calls-43-44)); "
        "(45) an FP8 probe with 6-20 pipeline stages, not shipped ([Deeper software pipelines]"
        "(#deeper-software-pipelines-at-decode-sizes-call-45-not-shipped)). "
        "The tables below hold "
        f"call {CALLS16[-1]}'s rows for FP8 ({len(fp8)} items) and call {CALLS25[-1]}'s for INT4 "
        f"({len(int4)})"
        + ". Generated by `benchmarks/kernels_report.py` from `reports/kernels/data/`; "
        "our own kernels' files are in `kernels_tuning/configs/autotune/` (FP8 with split-K / "
        "SWAP_AB / FOLD_SCALES / TMA, and INT4; see `kernels_tuning/configs/README.md`). The "
        "engine files tuned here on autotune's mirror of SGLang's plain kernel (the 'engine "
        "files' rows below) are no longer shipped: SGLang's files are now tuned on each "
        "release's own kernel, `reports/kernels/engine-kernels.md`."
    )
    w("")
    w(
        "Shapes (SGLang's merged projections, `autotune kernels shapes`): TP1 qkv_proj 14336x5120, "
        "o_proj+out_proj 5120x6144, in_proj_qkvz 16384x5120, gate_up_proj 34816x5120, down_proj "
        "5120x17408; TP2 7168x5120, 5120x3072, 8192x5120, 17408x5120, 5120x8704 (N x K; in_proj_ba "
        "stays bf16). Batch sizes: SGLang's 18 plus 3 (MTP verify) and 8192: 20 per shape, "
        "400 (kind, shape, M) items in all."
    )
    w("")
    w("## Goals")
    w("")
    w(
        "Each comparison row times the tuned config, the default and the baselines side by side "
        f"in one call (FP8: call {CALLS16[-1]}; INT4: call {CALLS25[-1]})."
    )
    w("")
    w("| goal | target | measured | met |")
    w("| --- | --- | --- | --- |")
    w(
        f"| FP8 tuned vs SGLang default (BM64 BN128 BK128 G32 w4 s3), M <= 128, geomean | >= 1.5x | "
        f"engine files (no split-K, SWAP_AB, FOLD_SCALES or TMA): **{g1_eng:.2f}x** (min {g1_min:.2f}x); our own "
        f"files: **{g1_own:.2f}x** | engine files: "
        + ("yes" if g1_eng >= 1.5 else f"no ({(1.5 / g1_eng - 1) * 100:.0f}% short)")
        + f"; own files: {'yes' if g1_own >= 1.5 else 'no'} |"
    )
    w(
        f"| FP8 M <= 16: bandwidth | >= 3.2 TB/s on every shape | {n_tb}/{len(g2_rows)} shapes; "
        f"worst {worst_tb:.2f} TB/s (own files), range in the table below | "
        f"{'yes' if n_tb == len(g2_rows) else 'no'} |"
    )
    w(
        f"| FP8 M <= 16: vs cuBLAS per-tensor FP8 | within 1.1x on every shape | {n_rat}/"
        f"{len(g2_rows)} shapes; worst {worst_rat:.2f}x (own files) | "
        f"{'yes' if n_rat == len(g2_rows) else 'no'} |"
    )
    n700 = sum(1 for x in tf if x >= 700)
    n700_eng = sum(1 for x in tf_eng if x >= 700)
    w(
        f"| FP8 M >= 1024 | >= 700 TFLOP/s | our own files (FOLD_SCALES, TMA): median "
        f"**{statistics.median(tf):.0f}**, min {min(tf):.0f}, max {max(tf):.0f} TFLOP/s; "
        f"**{n700}/{len(tf)}** (shape, M) at >= 700 (before calls 21-23: median "
        f"{statistics.median(tf12):.0f}, {n700_12}/{len(tf12)}; before calls 9-12: median "
        f"{fold['tf_prev_med']:.0f}, {fold['n700_prev']}/{fold['n_big']}); engine files: median "
        f"{statistics.median(tf_eng):.0f}, min {min(tf_eng):.0f}, max {max(tf_eng):.0f}, "
        f"{n700_eng}/{len(tf_eng)} | "
        f"{'yes' if n700 == len(tf) else 'partly' if n700 else 'no'} (own files) |"
    )
    w(
        f"| INT4 M <= 16 vs bf16 `torch.matmul` | >= 2x | geomean **{gm(g4):.2f}x** (min "
        f"{min(g4):.2f}x, max {max(g4):.2f}x) | {'yes' if min(g4) >= 2 else 'no'} |"
    )
    w(
        f"| INT4 vs vLLM AWQ-Triton defaults (32/32/32, split-K 8) | >= 1.5x | M <= 16: geomean "
        f"**{gm(g5):.2f}x** (min {min(g5):.2f}x); all M: geomean {gm(g5_all):.2f}x (min "
        f"{min(g5_all):.2f}x) | "
        + (
            "yes, on every item"
            if min(g5_all) >= 1.5
            else ("yes at M <= 16; not on every larger M" if min(g5) >= 1.5 else "geomean only")
        )
        + " |"
    )
    w(
        f"| Budgeted vs exhaustive | within 2% on >= 8 pairs, <= 10% of evaluations | "
        f"{len(ratios)} pairs: budgeted/exhaustive time {min(ratios):.3f} to {max(ratios):.3f}; "
        f"{ev_b} vs {ev_e} evaluations ({100 * ev_b / ev_e:.1f}% overall, per pair "
        f"{min(pair_pct):.1f}% to {max(pair_pct):.1f}%; call 1, space without SWAP_AB) | "
        f"{'yes' if max(ratios) <= 1.02 and len(ratios) >= 8 else 'no'}"
        f"{' (one pair above 10% of its own space)' if max(pair_pct) > 10 else ''} |"
    )
    t4_fp8 = tune4.get("fp8 TP1")
    t4_int4 = tune4.get("int4 TP1")
    t6_int4 = tune6.get("int4 TP1")
    t9_fp8 = tune9.get("fp8 TP1")
    # call9/timings.json and call13/timings-fp8.json (the run script's own wall clock per search
    # step) against their logs.
    for t_json, steps, log_name in (
        (d / "call9" / "timings.json", tune9, "progress-run9.log"),
        (d / "call13" / "timings-fp8.json", tune13["fp8"], "progress-run13-fp8.log"),
    ):
        for step, wall in (json.loads(t_json.read_text()) if t_json.exists() else {}).items():
            kd, tp = step.split("_")
            logged = steps.get(f"{kd} {tp.upper()}")
            if logged is None or abs(logged[2] - float(wall)) > 0.5:
                print(f"warning: {t_json} {step} = {wall} s, {log_name}: {logged}")
    tp1_walls = [pre_fp8 + tune["fp8 TP1"], pre_int4 + tune["int4 TP1"]]
    if t9_fp8 and "fp8" in pre9:
        tp1_walls.append(pre9["fp8"][1] + t9_fp8[2])
    # Call 13: per kind, (TP1 items, precompile binaries, precompile s, TP1 search s).
    t13 = {
        kd: (tune13[kd][f"{kd} TP1"][0], *pre13[kd][kd], tune13[kd][f"{kd} TP1"][2])
        for kd in ("int4", "fp8")
        if f"{kd} TP1" in tune13[kd] and kd in pre13[kd]
    }
    tp1_walls += [x[2] + x[3] for x in t13.values()]
    tune23, pre23 = tuned_steps(logs16[23]).get("fp8 TP1"), precompiles(logs16[23]).get("fp8")
    t23 = (tune23[0], pre23[1], tune23[2], pre23[0]) if tune23 and pre23 else None
    if t23:
        tp1_walls.append(t23[1] + t23[2])
    log32 = (d / f"progress-run{CALLS25[-1]}.log").read_text()
    tune32, pre32 = tuned_steps(log32).get("int4 TP1"), precompiles(log32).get("int4")
    t32 = (tune32[0], pre32[1], tune32[2], pre32[0]) if tune32 and pre32 else None
    if t32:
        tp1_walls.append(t32[1] + t32[2])
    w(
        f"| All TP1 shapes x 20 batch sizes, one H200 | <= 20 min | call 1: FP8 "
        f"{pre_fp8 + tune['fp8 TP1']:.0f} s (precompile {pre_fp8:.0f} s + search "
        f"{tune['fp8 TP1']:.0f} s); INT4: {pre_int4 + tune['int4 TP1']:.0f} s"
        + (
            f"; call 4, the {t4_fp8[0]} TP1 items with M <= {m4_max} again with SWAP_AB: FP8 "
            f"{t4_fp8[2]:.0f} s, INT4 {t4_int4[2]:.0f} s"
            if t4_fp8 and t4_int4
            else ""
        )
        + (
            f"; call 6, the {t6_int4[0]} INT4 TP1 items with M <= {m6_max} with the plane "
            f"kernel: {t6_int4[2]:.0f} s (precompile {pre6['int4'][1]:.0f} s before it)"
            if t6_int4 and "int4" in pre6
            else ""
        )
        + (
            f"; call 9, the {t9_fp8[0]} FP8 TP1 items with FOLD_SCALES: "
            f"{pre9['fp8'][1] + t9_fp8[2]:.0f} s (precompile of {pre9['fp8'][0]} binaries "
            f"{pre9['fp8'][1]:.0f} s + search {t9_fp8[2]:.0f} s)"
            if t9_fp8 and "fp8" in pre9
            else ""
        )
        + (
            f"; call 13, with SPLIT_K {new_splits} in the space: the "
            + " and the ".join(
                f"{ni} {kd.upper()} TP1 items with M <= {m13[kd]}: {pc + ws:.0f} s (precompile "
                f"of {nb} binaries {pc:.0f} s + search {ws:.0f} s)"
                for kd, (ni, nb, pc, ws) in t13.items()
            )
            if t13
            else ""
        )
        + (
            f"; call 23, the {t23[0]} FP8 TP1 items with TMA: {t23[1] + t23[2]:.0f} s "
            f"(precompile of {t23[3]} binaries for both TPs {t23[1]:.0f} s + search "
            f"{t23[2]:.0f} s)"
            if t23
            else ""
        )
        + (
            f"; call {CALLS25[-1]}, the {t32[0]} INT4 TP1 items with ATOMIC_REDUCE: "
            f"{t32[1] + t32[2]:.0f} s (precompile of {t32[3]} binaries for both TPs "
            f"{t32[1]:.0f} s + search {t32[2]:.0f} s)"
            if t32
            else ""
        )
        + f" | {'yes' if max(tp1_walls) <= 1200 else 'no'} |"
    )
    n_bad = len(gate["unchecked"])
    w(
        f"| Every shipped config passed the correctness gate | all | {gate['entries'] - n_bad}/"
        f"{gate['entries']} (every (file, M) entry of the {gate['files']} files in "
        f"`kernels_tuning/configs/`, {gate['swapped']} of them SWAP_AB, {gate['split']} "
        f"split-K ({gate['split_new']} with SPLIT_K {new_splits}), {gate['folded']} FOLD_SCALES, {gate['tma']} TMA, {gate['atomic']} ATOMIC_REDUCE and {gate['planes']} INT4 on the plane kernel, "
        "has a passing gated evaluation of that item on record, after the item's last "
        f"re-tune) | {'yes' if n_bad == 0 else 'no: ' + ', '.join(gate['unchecked'][:3])} |"
    )
    w("")
    w("Where goals are missed, by how much and why is in [Misses](#misses).")
    if gate["stale"]:
        w("")
        w(
            f"Warning: {len(gate['stale'])} file entries differ from the latest result in the "
            f"cache, e.g. {', '.join(gate['stale'][:3])}."
        )
    w("")
    w("## FP8 at M <= 16, per shape (worst over M = 1, 2, 3, 4, 8, 16)")
    w("")
    w(
        "| N x K | TP | TB/s engine file | TB/s own file | TB/s cuBLAS | time vs cuBLAS, "
        "engine | time vs cuBLAS, own |"
    )
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for n, k, tp, tbe, tbo, cub, re_, ro in g2_rows:
        w(f"| {n}x{k} | {tp} | {tbe:.2f} | {tbo:.2f} | {cub:.2f} | {re_:.2f}x | {ro:.2f}x |")
    if fa is not None or ia is not None:
        w("")
        ab_ms = (fa or ia or {}).get("ms", [])
        w(f"## SWAP_AB at decode sizes (call 5, M = {', '.join(map(str, ab_ms))})")
        w("")
        w(
            "`benchmarks/kernels_small_m.py`: per shape and M, each variant is the fastest of a "
            "small hand-picked set of tiles x SPLIT_K 1-8 (every config gated, then timed; the "
            "variants' winners re-timed side by side with the baselines, the faster round kept): "
            "`plain` = SWAP_AB 0, `swap` = SWAP_AB 1, `either` = the faster of the two, "
            "`files before call 4` = the config of the own file as committed before call 4 "
            "(call 3's tuning; "
            + ", ".join(
                f"{a['shipped_same']}/{a['rows']} {kd} entries equal the current files"
                for kd, a in ab.items()
            )
            + "). Ratio = time / baseline time (below 1: faster than the baseline). The INT4 "
            "rows time the kernel as it was in call 5, before the plane kernel existed: since "
            "call 6, `plain` configs with BM 16 and BN >= 128 run the plane kernel, so these "
            "rows compare the old kernel, not the INT4 path shipped now."
        )
        w("")
        w(
            "| kind | baseline | (shape, M) | variant | geomean time / baseline | worst | "
            "swap faster than plain |"
        )
        w("| --- | --- | --- | --- | --- | --- | --- |")
        names = {"cublas_fp8": "cuBLAS per-tensor FP8", "bf16": "bf16 `torch.matmul`"}
        kind_label = {"fp8": "fp8", "int4": "int4 (old kernel)"}
        for kd, a in ab.items():
            for v, label in (
                ("plain", "plain"),
                ("swap", "swap"),
                ("either", "either"),
                ("shipped", "files before call 4"),
            ):
                xs = a["ratios"][v]
                w(
                    f"| {kind_label[kd]} | {names[a['base']]} | {a['rows']} | {label} | "
                    f"{gm(xs):.2f}x | "
                    f"{max(xs):.2f}x | "
                    + (
                        f"{a['swap_faster']}/{a['rows']}; swap/plain geomean by M: "
                        + ", ".join(f"M={m} {x:.2f}" for m, x in a["by_m"].items())
                        if v == "plain"
                        else ""
                    )
                    + " |"
                )
        w("")
        w(
            "The search of call 4 picked SWAP_AB for "
            f"{n_sw_fp8}/{len(sw_fp8)} FP8 own-file winners and {n_sw_int4}/{len(sw_int4)} INT4 "
            f"winners at M <= {m4_max}; the INT4 re-tune of call 6 picked SWAP_AB for "
            f"{n_sw6}/{len(i6)} and the plane kernel for {n_pl6}/{len(i6)}; after the re-tunes "
            f"of call 13, {n_sw_now}/{len(fp8_small)} FP8 own-file entries at M <= {m4_max} use "
            f"SWAP_AB, and {n_sw13}/{len(i13)} INT4 entries at M <= {m13['int4']} ({n_pl13} on "
            "the plane kernel). Per (shape, M) rows: `data/small_m.log`."
        )
    w("")
    w("## FP8 W8A8 block-wise, per shape and M (microseconds, bf16 output)")
    w("")
    w(
        "`tuned`: the engine-file config (no split-K, SWAP_AB, FOLD_SCALES or TMA); `own`: our "
        "own file's config (split-K, SWAP_AB, FOLD_SCALES and TMA allowed) where it differs; `default`: SGLang's fallback; `cuBLAS`: "
        "`torch._scaled_mm` per-tensor FP8; `bf16`: `torch.matmul` on bf16 weights. Rate: TB/s "
        "(all bytes moved once) for M <= 64, TFLOP/s above, of the faster of tuned/own. Config: "
        "BM/BN/BK, GROUP_SIZE_M, warps, stages, `skN` SPLIT_K, `swap` SWAP_AB, `fold` "
        "FOLD_SCALES, `tma` TMA."
    )
    for tp in (1, 2):
        for n, k in sorted(
            {(r["item"]["n"], r["item"]["k"]) for r in fp8 if r["tp"] == tp},
            key=lambda s: -s[0] * s[1],
        ):
            rs = sorted(
                (r for r in fp8 if (r["item"]["n"], r["item"]["k"]) == (n, k)),
                key=lambda r: r["item"]["m"],
            )
            w("")
            w(f"### TP{tp} {rs[0]['item']['label']} N={n} K={k}")
            w("")
            w("| M | tuned | own | default | cuBLAS | bf16 | x default | rate | config (own) |")
            w("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            for r in rs:
                m = r["item"]["m"]
                best = ours_fp8(r)
                rate = (
                    f"{r['bytes'] / best / 1e6:.2f} TB/s"
                    if m <= 64
                    else f"{r['flops'] / best / 1e6:.0f} TF/s"
                )
                w(
                    f"| {m} | {f1(t(r, 'tuned'))} | {f1(topt(r, 'tuned_splitk'))} | "
                    f"{f1(t(r, 'default'))} | {f1(t(r, 'cublas_fp8_per_tensor'))} | "
                    f"{f1(t(r, 'bf16_matmul'))} | {t(r, 'default') / best:.2f} | {rate} | "
                    f"{cfg_short(r['best'])} |"
                )
    w("")
    w("## INT4 W4A16 (AWQ packing, group 128), per shape and M (microseconds)")
    w("")
    w(
        "`tuned`: our kernel, tuned (split-K, SWAP_AB and ATOMIC_REDUCE allowed; tuned and "
        f"timed in call {CALLS25[-1]}); `default`: our kernel's "
        "fallback (16/64/128 w4 s4); `ours@vLLM`: our kernel with vLLM's values (32/32/32 "
        "split-K 8, bf16); `vLLM`: vLLM's AWQ-Triton algorithm with its defaults (fp16, zeroed "
        "[8,M,N] buffer + sum; `kernels_tuning/kernels/vllm_awq_like.py`); `bf16`: "
        "`torch.matmul` on the dequantized weights. Rate: TB/s of all bytes (int4 weights, "
        "scales, zeros, activations, output) for M <= 64, TFLOP/s above. Config: as for FP8; "
        "`planes`: `int4_w4a16.w4a16_matmul` runs it on the PTX plane kernel "
        "(`int4_awq_planes.uses_planes`: AWQ, BM 16, BN >= 128, no SWAP_AB); the other "
        "configs, the default and ours@vLLM run the main kernel; `atomic`: ATOMIC_REDUCE, the "
        "splits' partials summed by atomic adds (`kernels_tuning/kernels/_atomic.py`)."
    )
    for tp in (1, 2):
        for n, k in sorted(
            {(r["item"]["n"], r["item"]["k"]) for r in int4 if r["tp"] == tp},
            key=lambda s: -s[0] * s[1],
        ):
            rs = sorted(
                (r for r in int4 if (r["item"]["n"], r["item"]["k"]) == (n, k)),
                key=lambda r: r["item"]["m"],
            )
            w("")
            w(f"### TP{tp} {rs[0]['item']['label']} N={n} K={k}")
            w("")
            w(
                "| M | tuned | default | ours@vLLM | vLLM | bf16 | x bf16 | x vLLM | rate | config |"
            )
            w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            for r in rs:
                m = r["item"]["m"]
                tt = t(r, "tuned")
                rate = (
                    f"{r['bytes'] / tt / 1e6:.2f} TB/s"
                    if m <= 64
                    else f"{r['flops'] / tt / 1e6:.0f} TF/s"
                )
                w(
                    f"| {m} | {f1(tt)} | {f1(t(r, 'default'))} | {f1(topt(r, 'ours_vllm_config'))} | "
                    f"{f1(t(r, 'vllm_awq_defaults'))} | {f1(t(r, 'bf16_matmul'))} | "
                    f"{t(r, 'bf16_matmul') / tt:.2f} | {t(r, 'vllm_awq_defaults') / tt:.2f} | "
                    f"{rate} | {cfg_short(r['best'], r['item']['packing'])} |"
                )
    w("")
    w("## Budgeted vs exhaustive")
    w("")
    w(
        "From call 1 (space without SWAP_AB). Stratified sample (one pair per M bucket <= 16, "
        "24-128, 256-1024, >= 1536, per kind, fixed seed). The exhaustive search times every "
        "config of the same pre-filtered space; then the two winners are re-timed side by side, "
        "interleaved, 3 rounds, median. Ratio = budgeted winner's time / exhaustive winner's "
        "time (below 1: the exhaustive pick was a noise winner the budgeted one beats on "
        "re-timing)."
    )
    w("")
    w("| item | space | budgeted evals | exhaustive evals | % | ratio | exhaustive wall s |")
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for e in exh:
        it = e["item"]
        w(
            f"| {it['kind']} N={it['n']} K={it['k']} M={it['m']} | {e['space_size']} | "
            f"{e['budgeted_evals']} | {e['exhaustive_evals']} | "
            f"{100 * e['budgeted_evals'] / e['exhaustive_evals']:.1f} | {e['ratio']:.3f} | "
            f"{e['wall_s']} |"
        )
    w("")
    w("## Tuning cost")
    w("")
    w("| step | wall s (first run) | evaluations |")
    w("| --- | --- | --- |")
    w(f"| precompile FP8 ({n_pre1.get('fp8', 0)} binaries, 14 processes) | {pre_fp8:.1f} | - |")
    w(
        f"| precompile INT4 ({n_pre1.get('int4', 0)} binaries, in the background while FP8 TP1 "
        f"is tuned) | {pre_int4:.1f} | - |"
    )
    for key, wall_s in tune.items():
        w(f"| search {key}, 100 items | {wall_s:.1f} | {evals[key]} |")
    w("")
    w(
        f"Second call (re-tune of the {4 * 30} items with M <= 16 after the timing fix): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in retune.items())
        + "."
    )
    if polish_line:
        w(f"Third call, neighbour cross-check (`runner.polish`): `{polish_line.group(0)}`.")
    w("")
    # Later calls: (ordinal, what, search steps, precompiles, precompile note, polish line,
    # evaluations per polish timing, compared items).
    later = {
        "4": (
            "Fourth",
            f"re-tune of the {len(retuned[4])} items with M <= {m4_max}, SWAP_AB in the space; "
            "the cache of calls 1-3 as the start, the re-tuned items' earlier evaluations and "
            "results set aside by a `retune` record",
            tune4,
            pre4,
            f", BM <= {max(16, m4_max)}",
            polish4,
            1,
            compare4,
        ),
        "6": (
            "Sixth",
            f"re-tune of the {len(retuned[6])} {'/'.join(k.upper() for k in kinds6)} items with "
            f"M <= {m6_max} with the PTX plane kernel in place; the cache of calls 1-4 as the "
            "start, the re-tuned items' earlier evaluations and results set aside by a `retune` "
            "record",
            tune6,
            pre6,
            f", BM <= {max(16, m6_max)}",
            polish6,
            1,
            compare6,
        ),
        "9": (
            "Ninth",
            f"re-tune of the {len(retuned[9])} {'/'.join(k.upper() for k in kinds9)} items "
            "with FOLD_SCALES in our own search; the cache of calls 1-7 as the start, a third "
            "`retune` record",
            tune9,
            pre9,
            ", every tile with its SWAP_AB and FOLD_SCALES forms",
            polish9,
            1,
            compare9,
        ),
        "12": (
            "Twelfth",
            "polish of call 9's FP8 results on its cache, no `retune` record: each config timed "
            "twice, plus each item's winners from before call 9's re-tune and their FOLD_SCALES "
            "forms",
            {},
            pre12,
            "",
            polish12,
            2,
            compare12,
        ),
    }
    for n_rec, kd in enumerate(("int4", "fp8")):
        later[f"13 {kd}"] = (
            "Thirteenth",
            f"{kd.upper()}: re-tune of the {len(retuned13[kd])} {kd.upper()} items with M <= {m13[kd]} with "
            f"SPLIT_K {new_splits} in the space; the cache of calls 1-12"
            + (" and of call 13's INT4 re-tune" if n_rec else "")
            + " as the start, "
            + ("a fourth" if not n_rec else "a fifth")
            + " `retune` record; the cross-check times each config twice and adds the winners "
            "from before the re-tune (`--polish-prior`)",
            tune13[kd],
            pre13[kd],
            f", BM <= {max(16, m13[kd])}" if kd == "int4" else "",
            polish13[kd],
            2,
            compare13[kd],
        )
    for nth, what, tune_c, pre_c, pre_note, polish_c, per, compare_c in later.values():
        if not tune_c and not polish_c:
            continue
        w(f"{nth} call ({what}):")
        w("")
        w("| step | wall s | evaluations |")
        w("| --- | --- | --- |")
        for kd, (nb, wall) in pre_c.items():
            w(f"| precompile {kd.upper()} ({nb} binaries{pre_note}) | {wall:.1f} | - |")
        for key, (ni, ne, wall) in tune_c.items():
            w(f"| search {key}, {ni} items | {wall:.1f} | {ne} |")
        if polish_c:
            m = re.search(
                r"(\d+) items cross-checked, (\d+) timings, ([\d.]+)s", polish_c.group(0)
            )
            if m:
                n_cfg = int(m.group(2))
                w(
                    f"| cross-check (`runner.polish`), {m.group(1)} items | {m.group(3)} | "
                    + (f"{n_cfg}" if per == 1 else f"{n_cfg} configs x {per} = {n_cfg * per}")
                    + " |"
                )
        w("")
        w(f"Comparison: {compare_c} items re-measured.")
        w("")
    w(
        f"Evaluations on record: {n_eval} ("
        + ", ".join(f"{n} in call {c}" for c, n in sorted(n_eval_call.items()))
        + "), "
        + (
            f"{n_fail} failed ("
            + ", ".join(
                f"{v} x '{k}'" for k, v in sorted(fail_kinds.items(), key=lambda kv: -kv[1])[:3]
            )
            + ")"
            if n_fail
            else "none failed (no compile error, no OutOfResources, no gate rejection)"
        )
        + ". For scale: SGLang's tuner times all 1,280 configs per M, 10 shapes x 20 M = 256,000 "
        "evaluations per kind, without numerics checks."
    )
    w("")
    w(
        METHOD.format(
            m4_max=m4_max,
            n_retuned=len(retuned[4]),
            n_retuned6=len(retuned[6]),
            m6_max=m6_max,
            n_eval6=n_eval_call[6],
            t6_tp1=tune6.get("int4 TP1", (0, 0, math.nan))[2],
            t6_tp2=tune6.get("int4 TP2", (0, 0, math.nan))[2],
            polish6=(
                "{} items, {} timings".format(*m6.groups())
                if polish6
                and (
                    m6 := re.search(r"(\d+) items cross-checked, (\d+) timings", polish6.group(0))
                )
                else "no cross-check logged"
            ),
            compare6=compare6,
            mid_note=(
                f"None of the INT4 configs at M > {m6_max} (call 3's) is one the plane kernel "
                "takes, so those rows and files described what ran (until calls 26 and 32 re-tuned them)"
                if not old_planes
                else f"{len(old_planes)} INT4 configs at M > {m6_max} (call 3's) now run the "
                "plane kernel, so their rows were timed on the main kernel: "
                + ", ".join(old_planes[:4])
            ),
            fp8_sha=env["fp8"]["kernel_sha256"][:8],
            int4_sha=env["int4"]["kernel_sha256"][:8],
            sha_match=(
                "both equal those of the kernel source in this tree"
                if all(fingerprints.values())
                else "the kernel source in this tree now hashes differently for "
                + " and ".join(
                    f"{k.upper()} ({src_sha[k][:8]}...)" for k, v in fingerprints.items() if not v
                )
                + ": the code changed after it was measured"
            )
            + (
                "; the shipped sidecars carry the fingerprints of the source in this tree, so "
                "that test passes"
                + (
                    ""
                    if all(fingerprints.values())
                    else ", but their times were taken on the code before that change"
                )
                if sides_ok
                else "; the shipped sidecars do not match the source in this tree, so that "
                "test fails"
            ),
            gpu_tests=gpu_tests.group(1) if gpu_tests else "?",
            gpu_tests10=gpu_tests10.group(0) if gpu_tests10 else "not logged",
            gpu_tests20=gpu_tests20.group(0) if gpu_tests20 else "not logged",
            gpu_tests32=gpu_tests32.group(0) if gpu_tests32 else "not logged",
            gpu_tests36=gpu_tests36.group(0) if gpu_tests36 else "not logged",
            gpu_tests37=gpu_tests37.group(0) if gpu_tests37 else "not logged",
            n_retuned9=len(retuned[9]),
            n_eval9=n_eval_call[9],
            t9_tp1=tune9.get("fp8 TP1", (0, 0, math.nan))[2],
            t9_tp2=tune9.get("fp8 TP2", (0, 0, math.nan))[2],
            polish9=polish_text(polish9),
            polish12=polish_text(polish12, 2),
            compare12=compare12,
            same_env=same_env,
            split_values=", ".join(map(str, SPLIT_K_VALUES)),
            new_splits=new_splits,
            split_anchor=stats["split_anchor"],
            m12_lo=m12_lo,
            **{
                f"{name}_{kd}": v
                for kd in ("int4", "fp8")
                for name, v in (
                    ("n13", len(retuned13[kd])),
                    ("m13", m13[kd]),
                    ("n_eval13", sum(1 for rec in span13[kd] if rec["t"] == "eval")),
                    ("polish13", polish_text(polish13[kd], 2)),
                )
            },
            **{
                f"t13_{kd}_tp{tp}": tune13[kd].get(f"{kd} TP{tp}", (0, 0, math.nan))[2]
                for kd in ("int4", "fp8")
                for tp in (1, 2)
            },
        )
    )
    L.extend(fold_section(fold, tf12, n700_12))
    L.extend(polish_section(pol))
    if i11:
        L.extend(int4_section(i11, sides_ok and src_sha["int4"] == side_sha.get("int4")))
    L.extend(split13_section(r13, probe, gate, ncu))
    L.extend(stall_section(stalls))
    L.extend(postscale_section(d / "call15"))
    L.extend(tma_section(d / "call16", fp8, fp8_c15, logs16, gate))
    L.extend(not_shipped16_section(d / "call16"))
    L.extend(atomic_section(d / "call25", int4, int4_c24))
    L.extend(fp8_decode_section(d / "call25"))
    L.extend(cluster_section(d / "call38"))
    L.extend(deep_stages_section(d / "call38"))
    L.extend(pipes_section(d / "call38"))
    w("## Misses")
    w("")
    bullets = []
    if n_tb < len(g2_rows) or n_rat < len(g2_rows):
        bullets.append(MISS_FP8_SMALL)
    if g1_eng < 1.5:
        bullets.append(MISS_FP8_DEFAULT)
    if n700 < len(tf):
        bullets.append(MISS_FP8_BIG)
    if min(g4) < 2:
        bullets.append(MISS_INT4_BF16)
    if min(g5_all) < 1.5:
        bullets.append(MISS_INT4_VLLM)
    if max(ratios) > 1.02 or max(pair_pct) > 10:
        bullets.append(MISS_BUDGET)
    bullets.append(MISS_NOT_RUN)
    for b in bullets:
        L.extend(b.format(**stats).rstrip("\n").split("\n"))
    args.out.write_text("\n".join(L) + "\n")
    print(f"wrote {args.out}")


def polish_text(line: re.Match[str] | None, per: int = 1) -> str:
    """'N items, M timings' of a `polish:` log line (timings x per: evaluations)."""
    m = line and re.search(r"(\d+) items cross-checked, (\d+) timings", line.group(0))
    if not m:
        return "no cross-check logged"
    if per == 1:
        return f"{m.group(1)} items, {m.group(2)} timings"
    return f"{m.group(1)} items, {m.group(2)} configs timed {per} times"


def fold_section(fold: dict[str, Any], tf: list[float], n700: int) -> list[str]:
    """The FOLD_SCALES section: idea, call 8, shipped before / now by M band."""
    out = [
        "## FOLD_SCALES (calls 8, 9, 12)",
        "",
        "The FP8 kernels rescale the accumulator after every K tile, and that waits for the "
        "tile's MMA, so its length is exposed on every K tile. SGLang's and vLLM's "
        "`_w8a8_block_fp8_matmul` do it as `acc += dot(a, b) * a_s[:, None] * b_s[None, :]`: two "
        "multiplies and an add per accumulator element. Where BLOCK_SIZE_N divides the "
        "128-column weight block, the tile's weight scale is one number and folds into the "
        "token scales: `acc += dot(a, b) * (a_s * b_s)[:, None]`, one multiply-add. Call 8 "
        f"tried it as a patch of our kernel ({fold['c8_evals']} evaluations, {fold['c8_items']} "
        "of the 200 items compared before the device time ran out; `data/call8/`). Since call 9 "
        "it is FOLD_SCALES, an option of our own FP8 files (`kernels_tuning/kernels/"
        "fp8_block.py`): call 9 re-tuned all FP8 items with it, call 12 polished them. Time "
        "shipped before (calls 3/4, `data/call12/previous_fp8_compare.jsonl`) / after (call 12; "
        "its rows at M <= 64, which call 13 replaced, are in `data/call13/previous_compare."
        "jsonl`), geomean (min-max); the engine files were re-tuned too, with FOLD_SCALES=0; the SGLang "
        "default config, the same in both, shows the run-to-run drift; the last column is call "
        "8's kernel effect on that default config (64/128/128, folded in call 8):",
        "",
        "| M | own file | engine file | default config | own-file winners with FOLD_SCALES | "
        "call 8, default config |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def short(xs: list[float]) -> str:
        return f"{gm(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})" if xs else "-"

    for b in fold["bands"]:
        out.append(
            f"| {b['label']} | {spread(b['own'])} | {short(b['eng'])} | {short(b['default'])} | "
            f"{b['fold']}/{b['n']} | "
            + (f"{gm(b['k8']):.2f}x ({len(b['k8'])} items)" if b["k8"] else "-")
            + " |"
        )
    out += [
        "",
        f"In call 12, {fold['n_fold']}/{fold['n_fp8']} own-file winners used FOLD_SCALES "
        f"({fold['eng_folded']} of them the engine file's config, folded). At M >= 1024 our own "
        f"files run {min(tf):.0f}-{max(tf):.0f} TFLOP/s, median {statistics.median(tf):.0f}, "
        f"{n700}/{len(tf)} (shape, M) at >= 700 (before: median {fold['tf_prev_med']:.0f}, "
        f"{fold['n700_prev']}/{fold['n_big']}). The engine files cannot hold it: SGLang's and "
        "vLLM's kernels read them and rescale with both scales per element, so their configs "
        "are tuned and timed with FOLD_SCALES=0. The kernel change is one line in their "
        "`_w8a8_block_fp8_matmul` (under the same BLOCK_SIZE_N condition) and could be offered "
        "upstream; the engine files would then be re-tuned with it.",
        "",
    ]
    return out


def polish_section(pol: dict[str, Any]) -> list[str]:
    r11, sp = pol["r11"], pol["spread"]
    q = statistics.quantiles(sp, n=20) if len(sp) > 1 else [math.nan] * 19
    return [
        "## Polish: two timings, and the winners before a re-tune (calls 10-12)",
        "",
        "`runner.polish` times each item's winners side by side with those of its neighbouring "
        "M and keeps the fastest. Until call 11 it timed each config once (median of 5 "
        "replays), so a momentary slowdown could make the slower of two close configs win. "
        "Calls 10 and 11 re-ran the FP8 polish on call 9's cache with one timing per config, "
        f"over the same {pol['n_items']} items and configs as call 12: their own-file winners "
        f"differ on {pol['d10_11']} items (call 10 vs call 12: {pol['d10_12']}, call 11 vs "
        f"call 12: {pol['d11_12']}). Call 11's comparison (`data/call11/compare-fp8.jsonl`, "
        f"discarded) against call 12's, own-file time: geomean {gm(r11):.3f}x call 12's, "
        f"{pol['n11_slow']} items over 5% slower, worst {max(r11):.2f}x: at {pol['ex_item']} "
        f"call 11 kept the {pol['ex_11']} ({pol['ex_11_polish']:.1f} us in its polish), where "
        f"call 9 had the {pol['ex_9']} (comparison) and call 10 the {pol['ex_10']} (polish); "
        f"call 12: {pol['ex_12']}.",
        "",
        "Call 12 times each config twice, the second round in reverse order, and each config's "
        f"faster time counts: of its {pol['n_cfgs']} configs, the {len(sp)} with two graph "
        f"timings ({pol['n_early']} timings were eager estimates of configs rejected as far "
        "slower than the item's best) differ between the two by a median "
        f"{100 * statistics.median(sp):.1f}% (95th percentile {100 * q[18]:.1f}%, max "
        f"{100 * max(sp):.0f}%). `--polish-prior` adds each item's winners from before its last "
        "re-tune (`ResultCache.superseded()`: those of calls 3/4) and, for FP8, their "
        f"FOLD_SCALES=1 forms. Of the {pol['n12']} items, call 12 changed "
        f"{pol['changed']['best']} own-file and {pol['changed']['engine_best']} engine-file "
        f"winners from call 9's; {pol['from_prior']['best']} and "
        f"{pol['from_prior']['engine_best']} of the new ones are such earlier winners or their "
        "folded forms.",
        "",
    ]


def int4_section(i11: dict[str, Any], reverted: bool) -> list[str]:
    ins, regs = i11["ins"], i11["regs"]
    sass = (
        f"a K tile of BN256 BK128 w4 s3 takes {ins[0]} -> {ins[1]} SASS instructions "
        f"({100 * (1 - ins[1] / ins[0]):.0f}% fewer)"
        + (f" and {regs[0]} -> {regs[1]} registers" if regs else "")
        if ins
        else "the instruction counts are not in the patch"
    )
    r = i11["ratio"]
    return [
        "## INT4 plane kernel, pairs along K (call 11, not shipped)",
        "",
        "`data/call11/int4_pack2.patch` is a rewrite of the AWQ plane kernel's inline asm guided "
        "by its SASS: each asm call takes the packed words of two K rows (pack=2) and yields the "
        "MMA's B-operand registers directly, weight pairs along K, without the regrouping `prmt` "
        f"the pairs along N needed. Per static analysis of the sm_90 SASS compiled on a CPU, "
        f"{sass}. Call 11 re-tuned the {i11['n']} INT4 items with M <= {i11['m_max']} with it "
        f"({i11['evals']} evaluations, {i11['wall']:.0f} s of search; {i11['planes']}/{i11['n']} "
        "winners run the plane kernel) and compared them (`data/call11/compare.jsonl`; call 10 "
        "ran the same experiment, its output was lost). Overall it was slower: tuned time of "
        f"call 7 (shipped until call 13) / call 11 tuned time, per item: geomean {gm(r):.3f}x (min {min(r):.2f}x, "
        f"max {max(r):.2f}x; call 11 faster on {i11['n_faster']}/{i11['n']}); at M <= 16 it runs "
        f"at {i11['x_bf16']:.2f}x bf16 `torch.matmul` (geomean over {i11['n_tiny']} items; "
        f"call 7: {i11['x_bf16_shipped']:.2f}x). The loss comes from the {len(i11['off'])} items "
        f"whose call-11 winner does not run the plane kernel ({i11['off_where']}): "
        f"{gm(i11['off']):.2f}x; on the {len(i11['on'])} whose winner does, {gm(i11['on']):.2f}x, "
        f"and on the {len(i11['same'])} where both calls chose the same config "
        f"({i11['same_planes']} of them on the plane kernel) {gm(i11['same']):.3f}x, against "
        f"{gm(i11['bf16']):.3f}x for the unchanged bf16 baseline over all {i11['n']} items "
        "(run-to-run drift). So the rewrite ran the same configs at most a few percent faster, "
        "and its search missed the plane configs on those items; why (call 11's cache was not "
        "kept) is not established. Not shipped; the kernel was reverted"
        + (
            " (the plane kernel in this tree has the shipped INT4 sidecars' fingerprint)."
            if reverted
            else "."
        ),
        "",
    ]


def split13_section(
    r13: dict[str, Any], probe: dict[str, Any], gate: dict[str, Any], ncu: list[dict[str, Any]]
) -> list[str]:
    """Call 13: the INT4 probe before it, its re-tunes against the rows they replaced, and the
    Nsight Compute probe."""
    splits = ", ".join(map(str, NEW_SPLITS))
    out = [f"## Split-K {splits} (call 13)", ""]
    if probe:
        narrow, wide, rows = probe["narrow"], probe["wide"], probe["rows"]
        tiles, sms = probe["tiles"], probe["sms"]
        old = "/".join(map(str, probe["old_split"]))
        rel = probe["b512_rel"]
        faster512 = [x for x in rows if x["b512_rel"] is not None and x["b512_rel"] < 1]
        wide_lose = [x for x in wide if x["ratio"] < 1]
        out += [
            "Until call 12 SPLIT_K took powers of two. The INT4 winners at M <= 16 use BN 256, so "
            f"the N = 5120 shapes have 5120 / 256 = {tiles} column tiles; with split {old} that "
            f"is {tiles * probe['old_split'][0]} programs for {sms} SMs. Before re-tuning, call "
            "13 probed the INT4 plane kernel (`data/call13/int4_probe.py`, `int4_probe.json`): "
            "per (shape, M) at M = 1 and 16, the config shipped then against BN 512 with 8 "
            "warps (two warps per scheduler in one program; BK 64/128, stages 2-4, every split "
            f"that leaves >= 2 K tiles per split) and against BN 256 with split {splits} (stages "
            f"3, 4): {probe['n_cfg']} gated evaluations, {probe['n_fail']} rejected; then the "
            "shipped config and the fastest new one re-timed side by side twice (the faster "
            "kept), with bf16 `torch.matmul`. Times in us; the last column compares the fastest "
            "BN 512 config with the shipped one from the same (first) timing pass.",
            "",
            "| N x K | M | shipped then | us | fastest new | us | shipped / new | best BN 512 / "
            "shipped | bf16 |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for x in rows:
            out.append(
                f"| {x['n']}x{x['k']} | {x['m']} | {cfg_short(x['shipped'].as_dict())} | "
                f"{x['shipped_us']:.1f} | {cfg_short(x['new'].as_dict())} | {x['new_us']:.1f} | "
                f"{x['ratio']:.2f}x | "
                + (f"{x['b512_rel']:.2f}x" if x["b512_rel"] is not None else "-")
                + f" | {x['bf16_us']:.1f} |"
            )
        text = [
            (
                f"BN 512 with 8 warps is never the fastest config of its (shape, M) "
                f"(0/{len(rows)}); its best is {rel_range(rel)}x the shipped config's time"
                + (
                    f", faster than it on {len(faster512)} rows, all N = 5120 shapes, where BN 256 "
                    "with a new split is faster still"
                    if faster512
                    and all(x["n"] == 5120 and x["new_us"] < x["shipped_us"] for x in faster512)
                    else f", faster on {len(faster512)} rows"
                    if faster512
                    else ""
                )
                + "."
            )
            if probe["n_512_fastest"] == 0
            else f"BN 512 with 8 warps is the fastest config on {probe['n_512_fastest']}/"
            f"{len(rows)} rows (best BN 512 / shipped: {rel_range(rel)}x)."
        ]
        if narrow and probe["narrow_k6"] == len(narrow):
            text.append(
                f"Split 6 beats the shipped split {old} on every N = 5120 row "
                f"({rel_range([x['ratio'] for x in narrow])}x faster): {tiles} column tiles x 6 "
                f"= {tiles * 6} programs fill {tiles * 6} of the {sms} SMs, where split 4 runs "
                f"{tiles * 4} and split 8 needs {tiles * 8}, more than the SMs."
            )
        else:
            text.append(
                f"On the N = 5120 shapes split 6 wins {probe['narrow_k6']}/{len(narrow)} rows "
                f"(shipped / new {rel_range([x['ratio'] for x in narrow])}x)."
            )
        if wide:
            wide_win = [x["ratio"] for x in wide if x["ratio"] >= 1]
            text.append(
                f"On the wider shapes shipped / new is {rel_range([x['ratio'] for x in wide])}x"
                + (
                    f": once re-timed, the new config is slower on {len(wide_lose)}/{len(wide)} "
                    "rows ("
                    + ", ".join(sorted({f"{x['n']}x{x['k']}" for x in wide_lose}))
                    + ")"
                    + (f" and {rel_range(wide_win)}x faster on the others" if wide_win else "")
                    if wide_lose
                    else ""
                )
                + "."
            )
        text.append(
            f"So call 13 added SPLIT_K {splits} to the space of both kinds; BN stays at most "
            f"{max(GRID['BLOCK_SIZE_N'])}."
        )
        out += ["", " ".join(text), ""]
    if r13:
        out += [
            "Then call 13 re-tuned the items below with the wider split-K (see Method and "
            "[Tuning cost](#tuning-cost)). Shipped time before (call 12's FP8 rows, call 7's "
            "INT4 rows: `data/call13/previous_compare.jsonl`) / now (call 13), geomean (min-max); "
            "FP8 own file = the faster of the two FP8 files, as in the tables; the baseline "
            "(INT4: bf16 `torch.matmul`; FP8: cuBLAS per-tensor FP8), the same code in both "
            "calls, shows the run-to-run drift; `same winner`: the items whose own-file config "
            "did not change.",
            "",
            "| kind | M | own file | engine file | baseline (control) | winners changed | same "
            f"winner | winners with split {splits.replace(', ', '/')} |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for kd, v in r13.items():
            for b in v["bands"]:
                out.append(
                    f"| {kd.upper()} | {b['label']} | {spread(b['own'])} | "
                    f"{short_spread(b['eng'])} | {short_spread(b['base'])} | "
                    f"{b['changed']}/{b['n']} | {short_spread(b['same_cfg'])} | "
                    f"{b['new_split']}/{b['n']} |"
                )
        by = r13.get("int4", {}).get("by_width", {})
        txt = []
        if by.get("narrow") and by.get("wide"):
            txt.append(
                f"INT4 by shape: the N = 5120 shapes {gm(by['narrow']):.2f}x "
                f"({len(by['narrow'])} items), the wider ones {gm(by['wide']):.2f}x "
                f"({len(by['wide'])})."
            )
        txt.append(
            "Call 13's winners by SPLIT_K: "
            + "; ".join(
                f"{kd.upper()} "
                + ", ".join(
                    f"{n} with {'split ' if i == 0 else ''}{sk}"
                    for i, (sk, n) in enumerate(v["splits"].items())
                )
                + f" (of {v['n']})"
                for kd, v in r13.items()
            )
            + f". In the shipped files {gate['split_new']} of the {gate['entries']} entries use "
            f"SPLIT_K {splits}."
        )
        out += ["", " ".join(txt), ""]
    out += ncu_section(ncu)
    return out


def rel_range(xs: list[float]) -> str:
    return rng1(xs, ".2f")


def rng1(xs: list[float], fmt: str = ".1f") -> str:
    """min-max of xs in `fmt` (one number when they print the same)."""
    if not xs:
        return "-"
    lo, hi = f"{min(xs):{fmt}}", f"{max(xs):{fmt}}"
    return lo if lo == hi else f"{lo}-{hi}"


def short_spread(xs: list[float]) -> str:
    return f"{gm(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})" if xs else "-"


def ncu_section(ks: list[dict[str, Any]]) -> list[str]:
    """Call 13's Nsight Compute probe: a metric table with a column per kernel, and what it
    shows for the INT4 plane kernel."""
    if not ks:
        return []
    d13 = "`data/call13/ncu.txt`"
    out = [
        "### Where the INT4 decode kernel's time goes (Nsight Compute, call 13)",
        "",
        f"{d13} (`ncu_probe.py`): one launch each at M = 1, under Nsight Compute, of our INT4 "
        "plane kernel on the largest and the smallest shape and our FP8 own-file kernel on the "
        "smallest, with the configs shipped before call 13's re-tune, and of cuBLAS on the same "
        "shapes (bf16 `torch.matmul`, `nvjet_sm90_tst_*`; per-tensor FP8 `torch._scaled_mm`, "
        "`nvjet_sm90_qqtst_*`). Single launches with the clocks not locked: the durations are "
        "not the tables' timings. Warps per scheduler: an SM has 4 schedulers, each can issue "
        "one instruction per cycle.",
        "",
        "| metric | " + " | ".join(k["label"] for k in ks) + " |",
        "| --- |" + " --- |" * len(ks),
    ]

    def row(name: str, vals: list[str]) -> None:
        out.append(f"| {name} | " + " | ".join(vals) + " |")

    def met(name: str, fmt: str, unit: str | None = None) -> list[str]:
        return ["-" if math.isnan(v := ncu_metric(k, name, unit)) else f"{v:{fmt}}" for k in ks]

    row("config", [cfg_short(k["cfg"].as_dict()) if k["cfg"] else "-" for k in ks])
    row(
        "grid (programs)",
        [
            f"{'x'.join(map(str, k['grid'][:2]))} ({k['grid'][0] * k['grid'][1] * k['grid'][2]})"
            for k in ks
        ],
    )
    row("warps per program", [f"{k['block'] // 32}" for k in ks])
    row("waves per SM", met("Waves Per SM", ".2f"))
    row("duration, us", met("Duration", ".2f", "us"))
    row("DRAM throughput, % of peak", met("DRAM Throughput", ".1f"))
    row("memory throughput, TB/s", [f"{mem_tbs(k):.2f}" for k in ks])
    row("registers per thread", met("Registers Per Thread", ".0f"))
    row("dynamic shared memory per program, KB", met("Dynamic Shared Memory Per Block", ".1f"))
    row(
        "programs per SM, limit by registers / shared memory",
        [
            f"{ncu_metric(k, 'Block Limit Registers'):.0f} / "
            f"{ncu_metric(k, 'Block Limit Shared Mem'):.0f}"
            for k in ks
        ],
    )
    row(
        "theoretical / achieved occupancy, %",
        [
            f"{ncu_metric(k, 'Theoretical Occupancy'):.1f} / {ncu_metric(k, 'Achieved Occupancy'):.1f}"
            for k in ks
        ],
    )
    row("active warps per scheduler", met("Active Warps Per Scheduler", ".2f"))
    row("eligible warps per scheduler", met("Eligible Warps Per Scheduler", ".2f"))
    row("issued warp per scheduler (per cycle)", met("Issued Warp Per Scheduler", ".2f"))
    row("warp cycles per issued instruction", met("Warp Cycles Per Issued Instruction", ".2f"))
    row("executed IPC (active), per SM", met("Executed Ipc Active", ".2f"))
    # What the table shows: our INT4 kernel on the smallest and the largest shape, each against
    # bf16 cuBLAS on the same shape; our FP8 kernel against cuBLAS FP8.
    ours4, base = int4_kernels(ks)

    def m(k: dict[str, Any], name: str) -> float:
        return ncu_metric(k, name)

    txt = []
    if ours4:
        sm = ours4[0]
        n, kk = sm["shape"]
        gx, gy, gz = sm["grid"]
        sms = m(sm, "# SMs")
        txt.append(
            f"On {n}x{kk} our INT4 kernel runs {gx * gy * gz} programs (grid {gx}x{gy}: {gx} "
            f"column tiles x split {gy}) of {sm['block'] // 32} warps on {sms:.0f} SMs: "
            + ("at most one program per SM, " if gx * gy * gz <= sms else "")
            + f"{m(sm, 'Active Warps Per Scheduler'):.2f} active warps "
            f"per scheduler, issuing {m(sm, 'Issued Warp Per Scheduler'):.2f} instructions per "
            f"cycle, and it uses {m(sm, 'DRAM Throughput'):.1f}% of the DRAM bandwidth "
            f"({mem_tbs(sm):.2f} TB/s)"
            + (
                f"; bf16 cuBLAS on the same shape reaches "
                f"{m(base[sm['shape']], 'DRAM Throughput'):.0f}%"
                f" ({mem_tbs(base[sm['shape']]):.2f} TB/s) and takes "
                f"{m(base[sm['shape']], 'Duration'):.1f} us against our "
                f"{m(sm, 'Duration'):.1f} while reading four times the weight bytes (bf16 "
                "against int4)"
                if sm["shape"] in base
                else ""
            )
            + "."
        )
    if len(ours4) > 1:
        lg = ours4[-1]
        n, kk = lg["shape"]
        lim_r, lim_s = m(lg, "Block Limit Registers"), m(lg, "Block Limit Shared Mem")
        txt.append(
            f"On {n}x{kk} ({lg['grid'][0] * lg['grid'][1]} programs, "
            f"{m(lg, 'Waves Per SM'):.2f} waves) it has {m(lg, 'Active Warps Per Scheduler'):.1f} "
            f"active warps per scheduler, issues {m(lg, 'Issued Warp Per Scheduler'):.2f} per "
            f"cycle and reaches {m(lg, 'DRAM Throughput'):.0f}% of DRAM; occupancy is limited to "
            f"{min(lim_r, lim_s):.0f} programs per SM by registers "
            f"({m(lg, 'Registers Per Thread'):.0f} per thread: limit {lim_r:.0f}) and shared memory "
            f"({m(lg, 'Dynamic Shared Memory Per Block'):.1f} KB per program: limit {lim_s:.0f})"
            + (
                f"; bf16 cuBLAS reaches {m(base[lg['shape']], 'DRAM Throughput'):.0f}% with "
                f"{m(base[lg['shape']], 'Active Warps Per Scheduler'):.1f} active warps per "
                f"scheduler issuing {m(base[lg['shape']], 'Issued Warp Per Scheduler'):.2f} per "
                "cycle"
                if lg["shape"] in base
                else ""
            )
            + "."
        )
        issue = [
            m(k, "Issued Warp Per Scheduler") / m(base[k["shape"]], "Issued Warp Per Scheduler")
            for k in ours4
            if k["shape"] in base
        ]
        txt.append(
            f"Our kernel issues {rng1(issue)}x cuBLAS's instructions per cycle (it "
            "dequantizes every weight) with at most "
            f"{max(m(k, 'Active Warps Per Scheduler') for k in ours4):.1f} warps per scheduler "
            "to switch between, and leaves DRAM at "
            f"{rng1([m(k, 'DRAM Throughput') for k in ours4], '.0f')}% of peak: it is bound by "
            "how fast its few warps get through their instructions (each warp's latency is "
            "exposed), not by DRAM bandwidth (call 14's stall reasons, below, say on what). "
            "More warps "
            "per SM can come from more programs (the split-K of call 13 on the small shapes), "
            "from more warps per program (the BN 512 configs of the probe above), or from fewer "
            f"registers and less shared memory per program (the limit of {min(lim_r, lim_s):.0f} "
            f"programs per SM on {n}x{kk})."
        )
    fp = [k for k in ks if k["kind"] == "fp8"]
    if len(fp) == 2 and fp[0]["ours"]:
        o, c = fp
        txt.append(
            f"FP8 on {o['shape'][0]}x{o['shape'][1]}: ours {m(o, 'Duration'):.1f} us at "
            f"{m(o, 'DRAM Throughput'):.0f}% of DRAM ({o['grid'][0] * o['grid'][1]} programs, "
            f"{m(o, 'Active Warps Per Scheduler'):.2f} active warps per scheduler), cuBLAS FP8 "
            f"{m(c, 'Duration'):.1f} us at {m(c, 'DRAM Throughput'):.0f}%."
        )
    out += ["", " ".join(t for t in txt if t), ""]
    return out


STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def int4_kernels(
    ks: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[tuple[int, int], dict[str, Any]]]:
    """Our INT4 kernels of a probe, smallest shape first, and the bf16 cuBLAS baseline of each
    INT4 shape (the FP8 case has cuBLAS FP8 on its shape)."""
    ours4 = sorted(
        (k for k in ks if k["ours"] and k["kind"] == "int4"),
        key=lambda k: k["shape"][0] * k["shape"][1],
    )
    return ours4, {k["shape"]: k for k in ks if not k["ours"] and k["kind"] == "int4"}


def stall_section(ks: list[dict[str, Any]]) -> list[str]:
    """Call 14: the same probe under Nsight Compute with the warp stall reasons (per issued
    instruction, in warp cycles), with the configs shipped after call 13."""
    if not ks:
        return []
    reasons = sorted(
        {
            nm[len("smsp__average_warps_issue_stalled_") : -len("_per_issue_active.ratio")]
            for k in ks
            for nm, _ in k["metrics"]
            if nm.startswith("smsp__average_warps_issue_stalled_")
        }
    )

    def st(k: dict[str, Any], r: str) -> float:
        v = ncu_metric(k, STALL.format(r))
        return 0.0 if math.isnan(v) else v

    shown = [r for r in reasons if max(st(k, r) for k in ks) >= 0.15]
    shown.sort(key=lambda r: -max(st(k, r) for k in ks))
    out = [
        "### Where the warps wait (Nsight Compute stall reasons, call 14)",
        "",
        "`data/call13/ncu_stalls.txt`: the same probe (`ncu_probe.py`) profiled once more, for "
        "the scheduler statistics and each warp stall reason per issued instruction "
        "(`smsp__average_warps_issue_stalled_*_per_issue_active`, warp cycles; they add up to "
        "the warp cycles per issued instruction), with the configs shipped after call 13 "
        "(INT4: split-K 6). Reasons of at least 0.15 cycles in some kernel; `selected`: the "
        "cycle the warp issues; `not_selected`: it was ready but another warp issued; "
        "`math_pipe_throttle` / `dispatch_stall`: the pipe it needs is busy; `wait`: a fixed "
        "latency dependency; `long_scoreboard`: waiting for global memory; `barrier`: a CTA "
        "barrier.",
        "",
        "| | " + " | ".join(k["label"] for k in ks) + " |",
        "| --- |" + " --- |" * len(ks),
    ]
    rows: list[tuple[str, list[str]]] = [
        ("config", [cfg_short(k["cfg"].as_dict()) if k["cfg"] else "-" for k in ks]),
        ("grid (programs)", [f"{k['grid'][0] * k['grid'][1] * k['grid'][2]}" for k in ks]),
        *(
            (label, [f"{ncu_metric(k, name):.2f}" for k in ks])
            for label, name in (
                ("active warps per scheduler", "Active Warps Per Scheduler"),
                ("issued warp per scheduler (per cycle)", "Issued Warp Per Scheduler"),
            )
        ),
        (
            "**warp cycles per issued instruction**",
            [f"**{sum(st(k, r) for r in reasons):.2f}**" for k in ks],
        ),
        *((r, [f"{st(k, r):.2f}" for k in ks]) for r in shown),
    ]
    out += [f"| {name} | " + " | ".join(vals) + " |" for name, vals in rows]
    ours4, base = int4_kernels(ks)
    txt = []
    busy = ("not_selected", "dispatch_stall", "math_pipe_throttle", "mio_throttle")
    lat = ("wait", "long_scoreboard", "short_scoreboard", "barrier")
    for k in reversed(ours4):
        n, kk = k["shape"]
        tot = sum(st(k, r) for r in reasons)
        b = sum(st(k, r) for r in busy)
        la = sum(st(k, r) for r in lat)
        txt.append(
            f"Our INT4 kernel on {n}x{kk} ({k['grid'][0] * k['grid'][1]} programs, "
            f"{ncu_metric(k, 'Active Warps Per Scheduler'):.2f} active warps per scheduler): "
            f"{tot:.2f} warp cycles per issued instruction, of which {b:.2f} busy-scheduler or "
            f"busy-pipe cycles ({', '.join(f'{r} {st(k, r):.2f}' for r in busy)}) and {la:.2f} "
            f"dependency waits ({', '.join(f'{r} {st(k, r):.2f}' for r in lat)})"
            + (
                f"; bf16 cuBLAS on the same shape: {sum(st(base[k['shape']], r) for r in reasons):.2f}, "
                f"{st(base[k['shape']], 'long_scoreboard'):.2f} of them waiting for memory"
                if k["shape"] in base
                else ""
            )
            + "."
        )
    if len(ours4) > 1:
        txt.append(
            "Where several warps share a scheduler (the large shape) the kernel is bound by "
            "instruction issue and its pipes, so fewer instructions per weight is the lever; "
            "where one warp has a scheduler to itself (the small shape) each instruction waits "
            "for the one before, so more warps or more independent work per warp is. Neither "
            "waits on DRAM, which bf16 cuBLAS does."
        )
    out += ["", " ".join(txt), ""]
    return out


def postscale_section(d15: Path) -> list[str]:
    """Call 15: the AWQ plane kernel with zero point and scale applied after the dot (patch),
    timed against the shipped plane kernel on the same configs (not shipped)."""
    path = d15 / "postscale.json"
    if not path.exists():
        return []
    rows = json.loads(path.read_text())
    sass = json.loads((d15 / "sass.json").read_text())
    ratio = [r["old_us"] / r["new_us"] for r in rows]
    best = [r["old_us"] / r["new_best_us"] for r in rows]
    errs = [r["new_rel_err"] for r in rows]
    o, n = sass["shipped"], sass["postscale"]
    ms = sorted({r["m"] for r in rows})
    return [
        "### Zero point and scale after the dot (call 15, not shipped)",
        "",
        "`data/call15/int4_postscale.patch`: the MMA takes the biased weights B + q as they come "
        "out of one `lop3` per weight pair (pairs along K, as in call 11), and the zero point "
        "and scale are applied per column and K tile to the fp32 dot: s (a . (B + q) - (B + z) "
        "sum(a)), with no per-weight subtract and multiply. Its sm_90 SASS "
        f"(`planes_sass.py`, `sass.json`, {sass['config']}) has {n['loop_ins']} instructions per "
        f"K tile against {o['loop_ins']} (HADD2/HMUL2 {n['HADD2']}/{n['HMUL2']} against "
        f"{o['HADD2']}/{o['HMUL2']}, PRMT {n['PRMT']} against {o['PRMT']}) and "
        f"{n['REG']} registers against {o['REG']}. On the H200 (`postscale_probe.py`, "
        f"`postscale.json`: {len(rows)} (shape, M) at M = {', '.join(map(str, ms))}, the configs "
        "shipped after call 13, both kernels timed side by side twice, the faster kept) it ran "
        f"at {gm(ratio):.2f}x the shipped kernel's speed (shipped time / its time; "
        f"{min(ratio):.2f}-{max(ratio):.2f}x), {gm(best):.2f}x with its best split-K; and its "
        f"output failed the correctness gate on {sum(1 for r in rows if not r['new_ok'])}/"
        f"{len(rows)} (relative error {min(errs):.1e}-{max(errs):.1e}; the reference rounds "
        "each dequantized weight to bf16 before the matmul, this kernel does not, which is the "
        "likely cause). Why it is slower was not profiled: it holds more registers, and each of "
        "its eight dots per K tile starts from zero and is followed by an fp32 epilogue instead "
        "of accumulating in the MMA. Not shipped.",
        "",
    ]


BANDS = ((1, 64, "1-64"), (96, 512, "96-512"), (1024, 1 << 30, ">= 1024"))
POLISH_RE = re.compile(r"\] (fp8:N=\d+,K=\d+,M=\d+)\s+best\s+([\d.]+) us (\S+)")


def row_key(r: dict[str, Any]) -> str:
    return json.dumps(r["item"], sort_keys=True)


def own_us(r: dict[str, Any]) -> float:
    """FP8: the faster of the engine-file and own-file configs (the own column where it
    differs); INT4: `tuned`."""
    return min(float(v) for kk, v in r["times_us"].items() if kk.startswith("tuned") and v)


def spread(xs: list[float]) -> str:
    """geomean (min-max, n items)"""
    return f"{gm(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f}, {len(xs)} items)" if xs else "-"


def fold_stats(d: Path, fp8: list[dict[str, Any]]) -> dict[str, Any]:
    """FOLD_SCALES: the shipped FP8 rows (call 12) against those shipped before calls 9-12
    (call12/previous_fp8_compare.jsonl), by M band, and call 8's experiment (call8/)."""
    prev = {row_key(r): r for r in load_jsonl(d / "call12" / "previous_fp8_compare.jsonl")}
    c8_path = d / "call8" / "compare.jsonl"
    c8 = {row_key(r): r for r in load_jsonl(c8_path)} if c8_path.exists() else {}
    bands: list[dict[str, Any]] = []
    for lo, hi, label in BANDS:
        rs = [r for r in fp8 if lo <= r["item"]["m"] <= hi and row_key(r) in prev]
        bands.append(
            {
                "label": label,
                "own": [own_us(prev[row_key(r)]) / own_us(r) for r in rs],
                "eng": [
                    prev[row_key(r)]["times_us"]["tuned"] / r["times_us"]["tuned"] for r in rs
                ],
                "default": [
                    prev[row_key(r)]["times_us"]["default"] / r["times_us"]["default"] for r in rs
                ],
                "fold": sum(1 for r in rs if (r["best"] or {}).get("FOLD_SCALES")),
                "n": len(rs),
                "k8": [
                    prev[k]["times_us"]["default"] / c8[k]["times_us"]["default"]
                    for r in rs
                    if (k := row_key(r)) in c8
                ],
            }
        )
    big = [r for r in fp8 if r["item"]["m"] >= 1024 and row_key(r) in prev]
    tf_prev = sorted(prev[row_key(r)]["flops"] / own_us(prev[row_key(r)]) / 1e6 for r in big)
    folded = [r for r in fp8 if (r["best"] or {}).get("FOLD_SCALES")]
    # Fold winners that are the engine file's config with FOLD_SCALES=1 (same tile, no split-K
    # or swap): the form call 9's own search tries first.
    eng_folded = sum(
        1
        for r in folded
        if r["engine_best"]
        and KernelConfig.from_dict(r["best"])
        == KernelConfig.from_dict(r["engine_best"]).with_(FOLD_SCALES=1)
    )
    log8 = (d / "call8" / "progress.log").read_text() if c8 else ""
    return {
        "bands": bands,
        "n_fold": len(folded),
        "n_fp8": len(fp8),
        "eng_folded": eng_folded,
        "tf_prev_med": tf_prev[len(tf_prev) // 2] if tf_prev else math.nan,
        "n700_prev": sum(1 for x in tf_prev if x >= 700),
        "n_big": len(tf_prev),
        "c8_items": len(c8),
        "c8_evals": sum(int(x) for x in re.findall(r"items, (\d+) evaluations", log8)),
    }


def polish_lines(log: str, after: str | None = None) -> dict[str, tuple[float, KernelConfig]]:
    """A progress log's per-item result lines (after the last line containing `after`, e.g.
    the polish after the search): item -> (us, the own-file winner)."""
    if after is not None:
        log = log[log.rindex(after) :]
    out: dict[str, tuple[float, KernelConfig]] = {}
    for m in POLISH_RE.finditer(log):
        out[m.group(1)] = (float(m.group(2)), parse_key(m.group(3)))
    return out


def parse_key(key: str) -> KernelConfig:
    """KernelConfig.key() back to the config ('m64n128k128g32w4s3k1[t][f][x]')."""
    m = re.fullmatch(r"m(\d+)n(\d+)k(\d+)g(\d+)w(\d+)s(\d+)k(\d+)(t?)(f?)(x?)", key)
    if m is None:
        sys.exit(f"unreadable config key {key!r} in a progress log")
    bm, bn, bk, g, w, st, sk = (int(x) for x in m.groups()[:7])
    return KernelConfig(
        BLOCK_SIZE_M=bm,
        BLOCK_SIZE_N=bn,
        BLOCK_SIZE_K=bk,
        GROUP_SIZE_M=g,
        num_warps=w,
        num_stages=st,
        SPLIT_K=sk,
        SWAP_AB=int(bool(m.group(8))),
        FOLD_SCALES=int(bool(m.group(9))),
        TMA=int(bool(m.group(10))),
    )


def polish_stats(
    d: Path,
    fp8: list[dict[str, Any]],
    prior: dict[str, dict[str, Any]],
    res9: dict[str, dict[str, Any]],
    span12: list[dict[str, Any]],
) -> dict[str, Any]:
    """Calls 10-12: the polish with one timing per config (calls 10 and 11) and with two (call
    12), and what the winners from before the re-tune (`prior`, superseded results) added."""
    p10 = polish_lines((d / "call11" / "progress-call10-fp8.log").read_text())
    p11 = polish_lines((d / "call11" / "progress-fp8.log").read_text())
    p12 = polish_lines((d / "progress-run12.log").read_text())
    keys = sorted(set(p10) & set(p11) & set(p12))
    c9 = {row_key(r): r for r in load_jsonl(d / "call9" / "compare.jsonl")}
    c11 = {row_key(r): r for r in load_jsonl(d / "call11" / "compare-fp8.jsonl")}
    pairs = [(c11[row_key(r)], r) for r in fp8 if row_key(r) in c11]
    r11 = [own_us(a) / own_us(b) for a, b in pairs]
    worst_a, worst_b = max(pairs, key=lambda ab: own_us(ab[0]) / own_us(ab[1]))
    wk = item_key("fp8", worst_b["item"]["n"], worst_b["item"]["k"], worst_b["item"]["m"])

    def folded(r: dict[str, Any] | None) -> str:
        return "folded" if r and (r["best"] or {}).get("FOLD_SCALES") else "unfolded"

    # Call 12's two timings of each config (second round in reverse order): their spread, over
    # the configs whose two timings are both graph timings (an `early` record is the eager
    # estimate of a config rejected as far slower than the item's best, Python overhead incl.).
    times: dict[tuple[str, KernelConfig], list[float]] = defaultdict(list)
    n_early = 0
    for rec in span12:
        if rec["t"] == "eval" and rec.get("ok") and rec.get("us"):
            key = (rec["item"], KernelConfig.from_dict(rec["cfg"]))
            if rec.get("early"):
                n_early += 1
                times[key].append(math.nan)
            else:
                times[key].append(float(rec["us"]))
    sp = sorted(
        max(v) / min(v) - 1 for v in times.values() if len(v) == 2 and not any(map(math.isnan, v))
    )
    # Winners of call 12 that differ from call 9's result and come from before the re-tune.
    res12 = latest_items(span12, "fp8")
    from_prior = {"best": 0, "engine_best": 0}
    changed = {"best": 0, "engine_best": 0}
    for k, rec in res12.items():
        before = prior.get(k)
        for field in from_prior:
            now = KernelConfig.from_dict(rec[field])
            if now == KernelConfig.from_dict(res9[k][field]):
                continue
            changed[field] += 1
            olds = [KernelConfig.from_dict(before[f]) for f in from_prior if before and before[f]]
            if now in olds or now in [c.with_(FOLD_SCALES=1) for c in olds]:
                from_prior[field] += 1
    return {
        "n_items": len(keys),
        "d10_11": sum(1 for k in keys if p10[k][1] != p11[k][1]),
        "d10_12": sum(1 for k in keys if p10[k][1] != p12[k][1]),
        "d11_12": sum(1 for k in keys if p11[k][1] != p12[k][1]),
        "r11": r11,
        "n11_slow": sum(1 for x in r11 if x > 1.05),
        "ex_item": f"{worst_b['item']['n']}x{worst_b['item']['k']} M={worst_b['item']['m']}",
        "ex_11": f"{folded(worst_a)} config at {own_us(worst_a):.1f} us",
        "ex_11_polish": p11[wk][0] if wk in p11 else math.nan,
        "ex_9": f"{folded(c9.get(row_key(worst_b)))} at {own_us(c9[row_key(worst_b)]):.1f} us"
        if row_key(worst_b) in c9
        else "-",
        "ex_10": (
            f"{'folded' if p10[wk][1].FOLD_SCALES else 'unfolded'} at {p10[wk][0]:.1f} us"
            if wk in p10
            else "-"
        ),
        "ex_12": f"{folded(worst_b)} at {own_us(worst_b):.1f} us",
        "spread": sp,
        "n_early": n_early,
        "n_cfgs": len(times),
        "changed": changed,
        "from_prior": from_prior,
        "n12": len(res12),
    }


def int4_pack2_stats(d11: Path, int4: list[dict[str, Any]]) -> dict[str, Any]:
    """Call 11's INT4 experiment (call11/int4_pack2.patch, not shipped): its re-tune and
    comparison of the INT4 items at M <= 32 against the shipped rows of the same items."""
    if not (d11 / "compare.jsonl").exists():
        return {}
    new = {row_key(r): r for r in load_jsonl(d11 / "compare.jsonl")}
    pairs = [(r, new[row_key(r)]) for r in int4 if row_key(r) in new]
    ratio = [o["times_us"]["tuned"] / n["times_us"]["tuned"] for o, n in pairs]
    tiny = [(o, n) for o, n in pairs if o["item"]["m"] <= 16]

    def cfg(r: dict[str, Any]) -> KernelConfig:
        return KernelConfig.from_dict(r["best"])

    def on_planes(r: dict[str, Any]) -> bool:
        return uses_planes(cfg(r), r["item"]["packing"])

    def tuned_ratio(o: dict[str, Any], n: dict[str, Any]) -> float:
        return float(o["times_us"]["tuned"] / n["times_us"]["tuned"])

    # Where both calls ran the same config (the kernel change alone), where call 11's winner
    # is not on the plane kernel, and the unchanged bf16 baseline as the run-to-run control.
    same = [tuned_ratio(o, n) for o, n in pairs if cfg(o) == cfg(n)]
    off = [(o, n) for o, n in pairs if not on_planes(n)]
    off_shapes: dict[tuple[int, int], list[int]] = defaultdict(list)
    for o, _ in off:
        off_shapes[(o["item"]["n"], o["item"]["k"])].append(o["item"]["m"])
    patch = (d11 / "int4_pack2.patch").read_text()
    ins = re.search(r"(\d+) -> (\d+) instructions", patch)
    regs = re.search(r"(\d+) -> (\d+) registers", patch)
    log = (d11 / "progress.log").read_text()
    steps = re.findall(r"tuned int4 TP(\d+): (\d+)/\d+ items, (\d+) evaluations, ([\d.]+)s", log)
    return {
        "n": len(pairs),
        "m_max": max(o["item"]["m"] for o, _ in pairs),
        "ratio": ratio,
        "n_faster": sum(1 for x in ratio if x > 1),
        "x_bf16": gm([n["times_us"]["bf16_matmul"] / n["times_us"]["tuned"] for _, n in tiny]),
        "x_bf16_shipped": gm(
            [o["times_us"]["bf16_matmul"] / o["times_us"]["tuned"] for o, _ in tiny]
        ),
        "n_tiny": len(tiny),
        "planes": sum(
            1
            for _, n in pairs
            if n["best"] and uses_planes(KernelConfig.from_dict(n["best"]), n["item"]["packing"])
        ),
        "ins": (int(ins.group(1)), int(ins.group(2))) if ins else None,
        "regs": (int(regs.group(1)), int(regs.group(2))) if regs else None,
        "same": same,
        "same_planes": sum(1 for o, n in pairs if cfg(o) == cfg(n) and on_planes(n)),
        "on": [tuned_ratio(o, n) for o, n in pairs if on_planes(n)],
        "off": [tuned_ratio(o, n) for o, n in off],
        "off_where": "; ".join(
            f"{n}x{k} M = {', '.join(map(str, ms))}" for (n, k), ms in sorted(off_shapes.items())
        ),
        "bf16": [o["times_us"]["bf16_matmul"] / n["times_us"]["bf16_matmul"] for o, n in pairs],
        "evals": sum(int(s[2]) for s in steps),
        "wall": sum(float(s[3]) for s in steps),
    }


def retune13_stats(
    rows: list[dict[str, Any]], prev13: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Call 13 against the rows it replaced, per kind and M band: shipped time before / now of
    the own file (FP8 also the engine file), the unchanged baseline's as the run-to-run control,
    how many winners changed and how many use a split call 13 added."""
    base = {"int4": "bf16_matmul", "fp8": "cublas_fp8_per_tensor"}
    out: dict[str, Any] = {}
    for kind in ("int4", "fp8"):
        rs = [r for r in rows if r["item"]["kind"] == kind and row_key(r) in prev13]
        if not rs:
            continue
        m_hi = max(r["item"]["m"] for r in rs)
        m_mid = min((r["item"]["m"] for r in rs if r["item"]["m"] > 16), default=m_hi)
        bands = []
        for lo, hi in ((1, 16), (m_mid, m_hi)):
            b = [r for r in rs if lo <= r["item"]["m"] <= hi]
            pairs = [(prev13[row_key(r)], r) for r in b]

            def same(o: dict[str, Any], n: dict[str, Any]) -> bool:
                return KernelConfig.from_dict(o["best"]) == KernelConfig.from_dict(n["best"])

            bands.append(
                {
                    "label": f"{lo}-{hi}",
                    "n": len(b),
                    "own": [own_us(o) / own_us(n) for o, n in pairs],
                    "eng": [o["times_us"]["tuned"] / n["times_us"]["tuned"] for o, n in pairs]
                    if kind == "fp8"
                    else [],
                    "base": [
                        o["times_us"][base[kind]] / n["times_us"][base[kind]] for o, n in pairs
                    ],
                    "changed": sum(1 for o, n in pairs if not same(o, n)),
                    "same_cfg": [own_us(o) / own_us(n) for o, n in pairs if same(o, n)],
                    "new_split": sum(
                        1 for r in b if KernelConfig.from_dict(r["best"]).SPLIT_K in NEW_SPLITS
                    ),
                }
            )
        splits: dict[int, int] = defaultdict(int)
        for r in rs:
            splits[KernelConfig.from_dict(r["best"]).SPLIT_K] += 1
        # INT4 by shape width: the N = 5120 shapes (few column tiles) against the wider ones.
        by_width = {
            w: [
                own_us(prev13[row_key(r)]) / own_us(r)
                for r in rs
                if (r["item"]["n"] == 5120) == (w == "narrow")
            ]
            for w in ("narrow", "wide")
        }
        out[kind] = {
            "n": len(rs),
            "m_hi": m_hi,
            "bands": bands,
            "splits": dict(sorted(splits.items())),
            "by_width": by_width,
            "all": [own_us(prev13[row_key(r)]) / own_us(r) for r in rs],
        }
    return out


def probe_stats(path: Path, sms: int) -> dict[str, Any]:
    """Call 13's INT4 probe (call13/int4_probe.py) before its re-tune: per (shape, M) the config
    shipped then against BLOCK_SIZE_N 512 with 8 warps and against split-K 3/6/12 at BN 256."""
    if not path.exists():
        return {}
    rows = json.loads(path.read_text())
    out = []
    for r in rows:
        ok = {kk: float(v) for kk, v in r["all"].items() if v is not None}
        shipped, new = parse_key(r["shipped"]), parse_key(r["best_new"])
        n512 = {kk: v for kk, v in ok.items() if parse_key(kk).BLOCK_SIZE_N == 512}
        b512 = min(n512, key=lambda kk: n512[kk]) if n512 else None
        fastest = min(ok, key=lambda kk: ok[kk])
        out.append(
            {
                "n": r["n"],
                "k": r["k"],
                "m": r["m"],
                "shipped": shipped,
                "shipped_us": float(r["shipped_us"]),
                "new": new,
                "new_us": float(r["best_new_us"]),
                "bf16_us": float(r["bf16_us"]),
                "ratio": float(r["shipped_us"]) / float(r["best_new_us"]),
                "b512": parse_key(b512) if b512 else None,
                "b512_rel": n512[b512] / ok[r["shipped"]] if b512 and r["shipped"] in ok else None,
                "fastest_512": parse_key(fastest).BLOCK_SIZE_N == 512,
                "n_cfg": len(r["all"]),
                "n_fail": sum(1 for v in r["all"].values() if v is None),
            }
        )
    narrow = [x for x in out if x["n"] == 5120]
    wide = [x for x in out if x["n"] != 5120]
    # Column tiles of the N = 5120 shapes at the shipped BN, and the programs per split.
    bn = {x["shipped"].BLOCK_SIZE_N for x in narrow}
    tiles = 5120 // bn.pop() if len(bn) == 1 else 0
    return {
        "rows": out,
        "n_cfg": sum(x["n_cfg"] for x in out),
        "n_fail": sum(x["n_fail"] for x in out),
        "n_512_fastest": sum(1 for x in out if x["fastest_512"]),
        "b512_rel": [x["b512_rel"] for x in out if x["b512_rel"] is not None],
        "narrow_k6": sum(1 for x in narrow if x["new"].SPLIT_K == 6 and x["ratio"] > 1),
        "narrow": narrow,
        "wide": wide,
        "tiles": tiles,
        "sms": sms,
        "old_split": sorted({x["shipped"].SPLIT_K for x in narrow}),
    }


NCU_KERNEL_RE = re.compile(
    r"^  (\S+) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), Context", re.MULTILINE
)
NCU_CASE_RE = re.compile(r"^(int4|fp8) (\d+) (\d+) (\d+) KernelConfig\((.*)\)$", re.MULTILINE)


def ncu_stats(d13: Path, name: str = "ncu.txt") -> list[dict[str, Any]]:
    """Call 13's Nsight Compute report (call13/ncu.txt, `ncu` text output of call13/ncu_probe.py):
    one dict per profiled kernel, in launch order, with its metrics by (name, unit). The probe
    launches, per case it prints (kind N K M config), our kernel and then the baseline of that
    shape (FP8: cuBLAS per-tensor FP8; INT4: bf16 `torch.matmul`)."""
    path = d13 / name
    if not path.exists():
        return []
    text = path.read_text()
    cases = [
        (m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5))
        for m in NCU_CASE_RE.finditer(text)
    ]
    heads = list(NCU_KERNEL_RE.finditer(text))
    if len(heads) != 2 * len(cases):
        sys.exit(
            f"{path}: {len(heads)} kernels profiled, expected 2 per case ({len(cases)} cases)"
        )
    out: list[dict[str, Any]] = []
    for i, h in enumerate(heads):
        kind, n, k, m, cfg = cases[i // 2]
        ours = i % 2 == 0
        if ours == h.group(1).startswith("nvjet"):
            sys.exit(f"{path}: kernel {i + 1} ({h.group(1)}) out of the probe's launch order")
        body = text[h.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        metrics: dict[tuple[str, str], float] = {}
        for line in body.splitlines():
            parts = re.split(r"\s{2,}", line.strip())
            if len(parts) not in (2, 3) or not re.fullmatch(r"[\d,]+(\.\d+)?", parts[-1]):
                continue
            unit = parts[1] if len(parts) == 3 else ""
            metrics.setdefault((parts[0], unit), float(parts[-1].replace(",", "")))
        label = (
            f"ours {kind.upper()} {n}x{k}"
            if ours
            else ("cuBLAS FP8" if kind == "fp8" else "bf16 cuBLAS") + f" {n}x{k}"
        )
        out.append(
            {
                "label": label,
                "kernel": h.group(1),
                "ours": ours,
                "kind": kind,
                "shape": (n, k),
                "m": m,
                "cfg": KernelConfig(
                    **{
                        a: int(b)
                        for a, b in (kv.split("=") for kv in cfg.replace(" ", "").split(","))
                    }
                )
                if ours
                else None,
                "grid": tuple(int(h.group(j)) for j in (2, 3, 4)),
                "block": int(h.group(5)),
                "metrics": metrics,
            }
        )
    return out


def ncu_metric(k: dict[str, Any], name: str, unit: str | None = None) -> float:
    """A metric of one profiled kernel (the first with that name when `unit` is None)."""
    for (nm, un), v in k["metrics"].items():
        if nm == name and (unit is None or un == unit):
            return float(v)
    return math.nan


def mem_tbs(k: dict[str, Any]) -> float:
    """Memory Throughput of the Memory Workload section in TB/s (ncu switches to Gbyte/s)."""
    for unit, scale in (("Tbyte/s", 1.0), ("Gbyte/s", 1e-3), ("Mbyte/s", 1e-6)):
        v = ncu_metric(k, "Memory Throughput", unit)
        if not math.isnan(v):
            return v * scale
    return math.nan


METHOD = """## Method

- **Kernels** (`kernels_tuning/kernels/`): our own Triton kernels. FP8 follows the contract of
  SGLang's `w8a8_block_fp8_matmul` (A fp8 [M,K] with per-token 1x128 scales, B fp8 [N,K] with
  [128,128] block scales, one scale pair per K tile, bf16 out) plus an in-kernel split-K (partials
  in an fp32 workspace, the last-arriving program of a tile reduces them in fixed order and resets
  its counter: one launch). INT4 W4A16 reads AWQ (and GPTQ) packing, dequantizes by OR-ing the
  nibble into the mantissa of 128.0 (no int->float convert), fp32 accumulation, same split-K.
  M, GROUP_SIZE_M and SPLIT_K are runtime arguments: one binary per (BM, BN, BK, warps, stages,
  SWAP_AB, FOLD_SCALES). SWAP_AB (a constexpr, in our own files only) computes the transposed tile
  C^T = W^T A^T: weight rows on the MMA's M side, tokens on its N side, so that at decode sizes
  Hopper's wgmma (from 64 rows, and from 16 tokens in Triton 3.6) replaces mma.sync padded to 16
  token rows. The FP8 kernel loads both operands K-major; the INT4 kernel decodes a transposed
  AWQ tile by nibble plane (eight [BN/8, BK] planes, one shift and mask each, no interleave),
  which keeps it on mma.sync fed from registers, with eight plane accumulators re-interleaved in
  the epilogue. The SWAP_AB=0 path is the code of calls 1-3 (a separate constexpr branch).
  Since call 6, `int4_w4a16.w4a16_matmul` sends AWQ configs with BM 16, BN >= 128 and no
  SWAP_AB to `int4_awq_planes.py` (`uses_planes`): inline PTX dequantizes two weights per
  32-bit operation (`lop3` of the packed word with `0x000F000F` and the bf16 bias 128.0, then
  `sub`/`mul` in bf16x2 for zero and scale; about 2.5 instructions per weight, bit-identical to
  the main kernel's weights) and runs one MMA per nibble plane, eight fp32 accumulators
  re-interleaved once per tile. GPTQ and the other tiles run the main kernel as before.
  FOLD_SCALES (a constexpr, FP8, in our own files only, since call 9; needs BN to divide the
  128-column weight block): the tile's one weight scale is multiplied into the token scales, so
  the rescale after each K tile is `acc += dot * (a_s * b_s)[:, None]`, one multiply-add per
  element, instead of the engines' `acc += dot * a_s[:, None] * b_s[None, :]`.
- **Space**: SGLang's grid (BM 16-256, BN 32-256, BK 64/128/256, G 1/16/32/64, warps 4/8,
  stages 2-5) plus SPLIT_K {split_values} ({new_splits} since call 13), SWAP_AB 0/1 and (FP8)
  FOLD_SCALES 0/1, filtered before any compile: BK divides the 128 group (removes BK 256),
  shared memory (modelled on 28 sm_90 compiles, wgmma keeps `stages`
  buffers), the accumulator must fit 128 registers per thread, BM above M rounded up to a power
  of two (min 16) is waste, GROUP_SIZE_M values equivalent at this M are duplicates, split-K only
  below 4 waves of output tiles; SWAP_AB only at M <= {m4_max}, with BM 8/16/32 (tokens), FP8
  BN >= 64, INT4 BN >= 128 and BK 128 and a bounded BM x BN. The engine default is always a
  candidate.
- **Gate**: every candidate's output (NaN-poisoned buffer) is compared with the dequantize-then-
  fp32-matmul reference: relative Frobenius error <= 5e-3 and |err| <= 1e-2 |ref| + 2e-3 rms(ref)
  element-wise; split-K candidates are checked again on the output of the timed replays.
- **Timing**: CUDA graph of back-to-back launches (about 0.4 ms per replay, at most 64), inputs
  rotated over sets totalling >= 3x the 60 MiB L2 (cold L2 for every launch), ~3 ms of warm-up
  replays, median of 5 replays; baselines through the same harness. The comparison table times
  every candidate twice, interleaved, and keeps the faster median; since call 12 the
  cross-check (`runner.polish`) times every config twice too, the second round in reverse order,
  and each config's faster time counts.
- **Search**: Optuna TPE (multivariate, ordinal indices) per (shape, M), seeded with the engine
  default and the winners of the neighbouring M of the same shape and of other shapes at the same
  M, then a +-1-step hill climb; budget 10% of the space, clamped to 8..48 evaluations
  (`TuneParams`). FP8 first searches the engine space (no split-K, no SWAP_AB: what goes into the
  SGLang/vLLM files), then, for our own file, tries that winner's FOLD_SCALES form (since call
  9; with TMA since call 21) and its splits, the splits of nearby SWAP_AB configs (folded where
  legal), and hill-climbs with SPLIT_K, SWAP_AB, FOLD_SCALES and TMA as axes
  (`budgeted.refine_split_k`; 10 more evaluations until call 21, 20 since call 22, 10 more where
  swapped configs exist; since call 23 from the winner's GROUP_SIZE_M as the space holds it,
  `space.canonical_group`). INT4 searches SWAP_AB as part of its space.
- **The calls.** In the first run, the first evaluations after each new shape's weights were
  generated ran up to 2x slow: the H200 drops its clocks when idle, and a timing of a 10-20 us
  kernel started from that state. Within a shape the search numbers were consistent (the same
  config agreed to 1-3% across M), but the comparison table, which opens each item with the
  tuned config, was not. `bench.time_graph` now replays ~3 ms before timing; the second call
  re-tuned the 120 items with M <= 16 (the first items of each shape). Items are searched in
  increasing M, so each saw only its smaller neighbour's winner; the third call timed each item's
  winners side by side with those of both neighbouring M (`runner.polish`, 2-6 configs per item,
  fresh measurements, the fastest kept) and re-measured the whole comparison table. The fourth
  call (`benchmarks/kernels_gpu_run.py --resume reports/kernels/data/cache.jsonl.gz --retune
  --batch-sizes 1,2,3,4,8,16,24,32`) started from the cache of calls 1-3, appended a `retune`
  record that sets aside the earlier evaluations and results of the {n_retuned} items with
  M <= {m4_max} (FP8 and INT4, TP1 and TP2), searched them afresh with SWAP_AB in the space,
  cross-checked them against their neighbours and re-measured their comparison rows; the other
  items and their files are those of calls 1-3. The fifth call (`benchmarks/kernels_small_m.py`)
  is the A/B of SWAP_AB above. The plane kernel changed what the INT4 configs with BM 16 and
  BN >= 128 run, and so their timings, so the sixth call (the same script with `--kinds int4`
  and the cache of calls 1-4) re-tuned the {n_retuned6} INT4 items with M <= {m6_max} behind a
  second `retune` record ({n_eval6} evaluations, INT4 TP1 searched in {t6_tp1:.0f} s, TP2 in
  {t6_tp2:.0f} s), cross-checked them ({polish6}) and re-measured their {compare6} comparison
  rows. {mid_note}. Call 7 (`--phases tune,compare` on call 6's cache without `--retune`:
  nothing searched) re-gated and re-measured those {compare6} items after the plane kernel's
  dispatch gained a device check (its bf16 pair math needs sm_90; the H200 path is unchanged),
  so the INT4 sidecars carry the final source's fingerprint; its rows replaced call 6's (and
  call 13's replace them). Call 8 was the FOLD_SCALES experiment (a patched kernel, not kept). The ninth call
  (the same script, FP8 only, on the cache of calls 1-7) set aside the results of all
  {n_retuned9} FP8 items behind a third `retune` record and searched them afresh with
  FOLD_SCALES in our own search ({n_eval9} evaluations incl. its cross-check; TP1 searched in
  {t9_tp1:.0f} s, TP2 in {t9_tp2:.0f} s), then cross-checked ({polish9}) and compared them.
  Calls 10 and 11 re-ran the cross-check with one timing per config and were discarded (see
  [Polish](#polish-two-timings-and-the-winners-before-a-re-tune-calls-10-12)); call 11 also
  tried an INT4 kernel change, not kept. The twelfth call resumed from call 9's cache (no
  `retune` record, nothing searched): `polish` with two timings per config and
  `--polish-prior` ({polish12}), then the comparison of the {compare12} FP8 items (the tables
  show its rows at M >= {m12_lo}). The thirteenth call, after two probes ([Split-K
  {new_splits}](#{split_anchor})), added SPLIT_K {new_splits} to the space (a runtime argument:
  the same binaries, kernel sources and fingerprints) and ran the same script
  twice, INT4 first, each on the cache as the previous run left it: the {n13_int4} INT4 items
  with M <= {m13_int4} behind a fourth `retune` record ({n_eval13_int4} evaluations incl. the
  cross-check; TP1 searched in {t13_int4_tp1:.0f} s, TP2 in {t13_int4_tp2:.0f} s), then the
  {n13_fp8} FP8 items with M <= {m13_fp8} behind a fifth ({n_eval13_fp8}; {t13_fp8_tp1:.0f} s
  and {t13_fp8_tp2:.0f} s); each run cross-checked with two timings per config and
  `--polish-prior` (INT4: {polish13_int4}; FP8: {polish13_fp8}) and compared its items. Figures
  in [Tuning cost](#tuning-cost). The exhaustive comparison is from the first run.
- **Provenance**: each file has a sidecar with GPU, SM count, driver, CUDA, torch, Triton, the
  kernel fingerprint (sha256 of the kernel modules' syntax tree without docstrings, so
  reformatting does not change it) and per-M times; `kernels_tuning.output.load_config_file`
  warns when they differ from the current machine, and a CPU test fails when the shipped
  sidecars no longer match the kernel source (`tests/kernels_tuning/test_shim.py`). The
  fingerprints recorded by the calls that last wrote the files (`data/env.json`: call 23 for FP8, call 32 for INT4; FP8 {fp8_sha}..., INT4 {int4_sha}...):
  {sha_match}. {same_env}
- **GPU tests**: `tests/kernels_tuning/test_gpu.py` (bf16 correctness of both kernels and both
  packings incl. split-K, SWAP_AB and the plane kernel, back-to-back split-K launches in one
  graph, timing stability, the gate rejecting a wrong kernel, FOLD_SCALES): {gpu_tests} passed
  on the H200 in the twelfth call (`pytest -m gpu tests/kernels_tuning`, `data/pytest-gpu.log`;
  call 10: {gpu_tests10}, `data/call11/pytest-gpu-call10.log`). With TMA in the FP8 kernel
  (four TMA configs added, plain and SWAP_AB, with split-K): {gpu_tests20} in call 20
  (`data/call16/pytest-gpu-call20.log`), the FP8 kernel source as shipped. With
  ATOMIC_REDUCE in the INT4 kernels (three atomic configs added to the INT4 list, and 200
  back-to-back launches of three atomic configs in one graph, after which the sums must be zero
  again): {gpu_tests32} in call 32 (`data/call25/pytest-gpu-call32.log`), the INT4 kernel source
  as shipped; {gpu_tests36} in call 36 after review fixes (each of the 200 launches' outputs
  checked, the atomic sums in the device's cached buffer; `data/call25/pytest-gpu-call36.log`)
  and {gpu_tests37} in call 37 after the graph tests shared one capture helper
  (`data/call25/pytest-gpu-call37.log`).
"""

MISS_FP8_SMALL = """- **FP8 at M <= 16 is {own_cub}x the time of cuBLAS per-tensor FP8 with our own files
  ({eng_cub}x with the engine files, which can use neither split-K, SWAP_AB nor FOLD_SCALES),
  and reaches {tb_own} TB/s against cuBLAS's {tb_cub}.** The gap grows as the weights shrink (own files,
  worst over M <= 16):
  - at >= 3.2 TB/s: {g_hit};
  - within 10% of 3.2 TB/s: {g_near};
  - further off: {g_far}.

  On the small shapes the split-K synchronization weighs most: at 5120x3072, M = 1 and 16
  (call 35), our kernel runs {ep_ordered} us, the same kernel without the synchronization (wrong
  output, timed only) {ep_nosync} and cuBLAS {ep_cublas}. Without a split (call 33, K = 128-768
  at N = 5120) our kernel takes {fc_nosplit}x cuBLAS's time on the same problem, but at these
  sizes only the splits fill the GPU ([FP8 at decode
  sizes](#fp8-at-decode-sizes-the-split-k-synchronization-calls-33-35)). Summing the splits
  inside a thread-block cluster through distributed shared memory instead (calls 38-42) ran at
  {cl_fp8} the speed of the shipped configs on the six shapes furthest from cuBLAS (M = 1, 16;
  [Split-K in
  a thread-block cluster](#split-k-in-a-thread-block-cluster-calls-38-42-not-shipped)), and
  6-20 pipeline stages with fewer splits (call 45; 10 shapes, M = 1, 16) at {deep_fp8} ([Deeper software
  pipelines](#deeper-software-pipelines-at-decode-sizes-call-45-not-shipped)).
  FOLD_SCALES shortens that rescale but gains little here ({n_fold_tiny}/{n_tiny} own-file
  winners at M <= 16 use it; own-file time of calls 3/4 / call 12 at M 1-64: {fold_small}), as
  does SPLIT_K {new_splits} (call 13; {f13_split}/{n_tiny} winners at M <= 16 use one of them;
  own-file time call 12 / call 13 at M <= 16: {f13_gain}, cuBLAS's {f13_base}).
  The engine-file configs go down to {tb_eng_lo:.2f} TB/s ({eng_worst}). SWAP_AB (call 4) helps
  a little: in the A/B of call 5 the swapped kernel is faster than the plain one on
  {fa_faster}/{fa_rows} (shape, M) (swap/plain geomean {fa_sp_gm:.2f}, range {fa_sp}), which
  takes the geomean time vs cuBLAS from {fa_plain:.2f}x to {fa_swap:.2f}x; the searches put it in
  {n_sw_now}/{n_fp8_small} of our FP8 files' entries at M <= {m4_max}. That wgmma on the weight rows
  gains this little suggests the MMA form was not what held these shapes back. A plain
  SPLIT_K=1 config runs slower at M=1 than at M=2 (call 4, time at M=1 / time at M=2:
  {m12_plain}); swapped configs do not ({m12_swap}); cause not established. Stream-K (call
  17) made these sizes slower (shipped / its best: {sk_small}); TMA (calls 21-23) left them
  where they were (own-file time before / call 23 at M <= 16: {tma_small_own}, cuBLAS's
  {tma_small_cub}; see [TMA](#tma-calls-19-23)).
"""

MISS_FP8_DEFAULT = """- **FP8 tuned vs default at M <= 128 is {g1_eng:.2f}x for the engine files**, {short:.0f}%
  short of 1.5x; our own files reach {g1_own:.2f}x. At large M the default is already near the
  best tile: {n_slow} items (M = {slow_ms}) came out {slow_pct}% slower than the default in the
  comparison (the default is a seed of every search, so it lost narrowly in the search).
"""

MISS_FP8_BIG = """- **FP8 at M >= 1024 runs {tf} TFLOP/s with our own files** (FOLD_SCALES); {n700}/{n_big}
  (shape, M) reach 700. Still under 700: {under700}. The engine files, which cannot fold, run
  {tf_eng} TFLOP/s ({n700_eng}/{n_big} at >= 700); cuBLAS per-tensor FP8 runs {cub_tf} and bf16
  cuBLAS {bf_tf}. The fold leaves one multiply-add per element after each K tile's MMA; a
  per-tensor or DeepGEMM-style kernel (rescale off the MMA's critical path) goes further.
"""

MISS_INT4_BF16 = """- **INT4 W4A16 at M <= 16 runs at {i_x}x the speed of bf16 `torch.matmul` (geomean
  {i_gm:.2f}x), not 2x** ({itb} TB/s of all bytes). These rows are call 32's: {n_pl_tiny}/{n_itiny}
  winners run the PTX plane kernel and {n_at_tiny}/{n_itiny} sum their splits with atomic adds;
  against the rows before call 26 (call 13's) the tuned time is {iprev_t} (before / now,
  geomean (min-max)), bf16's {iprev_c} (the run-to-run control; [Split-K by atomic
  adds](#split-k-by-atomic-adds-and-two-int4-probes-calls-25-32)). Call 13's rows in turn were
  {i13_gain} faster than call 7's (bf16 {i13_base}; [Split-K {new_splits}](#{split_anchor}),
  with the plane kernel on {n_pl13}/{n13i} winners at M <= {m13i}). Earlier, the plane kernel (call 6) made the search
  winners of the same {n_gain} items at M <= 16 {i_gain}x faster than call 4's (geomean
  {i_gain_gm:.2f}x). Per shape (M <= 16):
  - worst M at >= 1.5x: {i_hi};
  - worst M below 1.5x: {i_lo}.

  A least-squares line through the M <= 16 rows puts our time at {i_a:.1f} us + bytes /
  {i_bw:.1f} TB/s, bf16 `torch.matmul`'s at {b_a:.1f} us + bytes / {b_bw:.1f} TB/s (its bytes are
  4x ours). The plane kernel pays {fix_ratio:.1f}x bf16's fixed cost per call and streams at
  {bw_ratio:.0%} of its rate, so the small shapes ({i_lo_us} us kernels), where the fixed part
  weighs most, miss by most: 2x at {i_small} would mean {i_need:.1f} us a call, against bf16's own
  fixed cost of {b_a:.1f} us. The N = 5120 shapes have 5120 / {i_bn_max} = {n_tiles} column
  tiles for {sms} SMs and their winners use split-K {sk_narrow} ({narrow_programs}; the wider
  shapes: {sk_wide}), whose fp32 partials and final reduction add traffic and a tail. All {n_i_best} winners at
  M <= 16 use BN {i_bn} (the space's largest: {grid_bn}). {ncu_short} Call 11 rewrote the plane
  kernel's asm so the weight pairs run along K as the MMA wants them ({i11_ins}); where it ran
  the same configs as call 7, call 7's time / its time is {i11_same:.3f}x (the unchanged bf16
  baseline's: {i11_bf16:.3f}x; see [INT4 plane kernel, pairs
  along K](#int4-plane-kernel-pairs-along-k-call-11-not-shipped)). The static analysis of its sm_90
  SASS found no layout conversion of the weights in the K loop, which an earlier version of
  this text suspected: the TTGIR loop has no `convert_layout` or `local_alloc` (Triton already feeds the
  packed words from shared memory in the MMA operand layout). The fixed per-program costs
  (about 570 prologue + 460 epilogue SASS instructions, including a shared-memory round trip
  in the split-K store) are spread over {ktiles} K tiles per program in the shipped winners at
  M <= 16 (K / (BK x SPLIT_K)). {bn512} Two rewrites that cut the K loop's instructions (call
  11: -13%, call 15: -21%) did not make it faster; call 14's stall reasons say why in part: on
  the large shape the warps that wait do so on busy pipes and a busy scheduler, which a
  per-pipe profile (Nsight Compute's instruction statistics) would name, and call 15's version
  needs more registers (fewer programs per SM). Two more levers were measured in call 25 and
  were slower: a register cap (four programs per SM instead of three) and the plane kernel with
  32 or 64 tokens, so at M = {i_mid_ms} {i_mid_tiles} ({i_mid_vs16}x the M <= 16 time,
  {i_mid_x}x bf16). What is left is the fixed cost (call 31, N = 5120, one K tile per
  program): {fc_sk1:.1f} us without a split, {fc_at1:.1f} us (M = 1) and {fc_at16:.1f} us (M = 16)
  with six splits even with the atomic sum, against {fc_empty:.1f} us for an empty launch on the
  same grid and {b_a:.1f} us for bf16 cuBLAS's whole fixed cost. The splits' partials summed
  within a thread-block cluster through distributed shared memory (call 40) ran at {cl_int4}
  the speed of the shipped configs. Its pipes (Nsight Compute, calls 43-44) are not
  saturated either: the ALU pipe, the busiest, at about half of its active cycles and the issue
  slots half busy on the largest shape, with 31 instructions per packed word of 8 weights, 15 of
  them the dequantization ([The plane kernel's
  pipes](#the-plane-kernels-pipes-and-instruction-mix-nsight-compute-calls-43-44)). Plausible
  next steps, not measured: more independent work per warp or more warps per SM; a persistent
  schedule (on FP8 it did not help, calls 16-17). GPTQ packing still runs the main
  kernel (the plane kernel is AWQ only). At M >= 1024 (call 32, main kernel) it runs {itf}
  TFLOP/s against bf16 cuBLAS's {ibf} (vLLM switches to dequantize + cuBLAS at >= 256
  tokens).
"""

MISS_INT4_VLLM = """- **INT4 vs vLLM's AWQ-Triton defaults**: at M <= 16 geomean {v_gm:.2f}x, min
  {v_lo:.2f}x. Over all M the range is {va}x; {below_text}.
"""

MISS_BUDGET = """- **Budgeted vs exhaustive** is within {r_rng} on the 8 pairs with {pct:.1f}% of the
  evaluations overall; per pair up to {pct_hi:.1f}%, because the budget has a floor of 8
  evaluations and the smallest space (FP8, M <= 16) has 64 configs.
"""

MISS_NOT_RUN = """- **Not run on the GPU**: GPTQ packing is checked for correctness on the GPU (tests) but not
  tuned; the Ray executor (no ray on the device machine; tested with CPU actors); TP4/TP8.
"""


def _times(name: str) -> Any:
    return lambda r: r["times_us"][name]


FP8_BAND_TIMES = {
    "own": own_us,
    "eng": _times("tuned"),
    "cub": _times("cublas_fp8_per_tensor"),
}
INT4_BAND_TIMES = {"tuned": _times("tuned"), "bf16": _times("bf16_matmul")}
INT4_BANDS = tuple(
    (lo, hi, f"{lo}-{hi}") for lo, hi in ((1, 16), (24, 32), (48, 64), (96, 512), (1024, 8192))
)


def _band_ratios(
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    bands: tuple[Any, ...],
    times: dict[str, Any],
    flag: str,
) -> list[dict[str, Any]]:
    """Per M band (lo, hi, label): each of `times`' columns before / after (one ratio per item
    `after` shares with `before`), and how many `after` winners set `flag`."""
    prev = {row_key(r): r for r in before}
    out = []
    for lo, hi, label in bands:
        pairs = [
            (prev[row_key(r)], r)
            for r in after
            if lo <= r["item"]["m"] <= hi and row_key(r) in prev
        ]
        if not pairs:
            continue
        band: dict[str, Any] = {"label": label, "n": len(pairs)}
        band |= {name: [f(a) / f(b) for a, b in pairs] for name, f in times.items()}
        band["flag"] = sum(1 for _, b in pairs if (b["best"] or {}).get(flag))
        out.append(band)
    return out


def _tf_big(rows: list[dict[str, Any]]) -> list[float]:
    return [r["flops"] / own_us(r) / 1e6 for r in rows if r["item"]["m"] >= 1024]


def tma_section(
    d16: Path,
    fp8: list[dict[str, Any]],
    fp8_c15: list[dict[str, Any]],
    logs16: dict[int, str],
    gate: dict[str, Any],
) -> list[str]:
    """TMA: the probe (call 19), the re-tunes (calls 21-23) and what is shipped."""
    probe = json.loads((d16 / "tma_probe.json").read_text())
    tiles = ("m64n128k128w4s3", "m64n128k128w4s4", "m128n128k128w8s4")
    out = [
        "## TMA (calls 19-23)",
        "",
        "Until call 19 our FP8 kernel loaded its tiles the way SGLang's does: pointer loads, "
        "which Triton turns into `cp.async` copies with the addresses computed per thread. On "
        "Hopper the tensor memory accelerator (TMA) copies a whole tile into shared memory from "
        "one descriptor (rows past M or N read as zeros). Call 19 timed a stand-alone kernel "
        "that loads A and B through host tensor descriptors (`data/call16/fp8_tma_probe.py`, "
        "`tma_probe.json`; same math as our FOLD_SCALES path), with and without Triton's warp "
        "specialization (`tl.range(..., warp_specialize=True)`), next to the config shipped "
        "then for the same (shape, M) run by our kernel. Times in us, one call, each config "
        "gated then timed once (the shipped config: the faster of two timings):",
        "",
        "| N x K | M | shipped then | us | TMA 64/128/128 w4 s3 | s4 | TMA 128/128/128 w8 s4 | "
        "best with warp specialization | shipped / fastest TMA |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    ratios = []
    ws_4 = []
    for r in probe:
        allv = {k.removeprefix("tma "): v for k, v in r["all"].items() if isinstance(v, float)}
        plain = {k: v for k, v in allv.items() if not k.endswith(" ws")}
        ws = {k: v for k, v in allv.items() if k.endswith(" ws")}
        best = min(plain.values())
        ratios.append(r["shipped_us"] / best)
        ws_4 += [
            allv[k] / allv[k.removesuffix(" ws")]
            for k in ws
            if "w4" in k and k.removesuffix(" ws") in allv
        ]
        cells = [f1(plain.get(t)) for t in tiles]
        out.append(
            f"| {r['n']}x{r['k']} | {r['m']} | {cfg_short(parse_key(r['shipped']).as_dict())} "
            f"| {r['shipped_us']:.1f} | " + " | ".join(cells) + f" | {f1(min(ws.values()))} | "
            f"{r['shipped_us'] / best:.2f}x |"
        )
    by_call: dict[int, dict[str, Any]] = {}
    for c in (21, 22, 23):
        rows_c = load_jsonl(d16 / f"compare-call{c}.jsonl")
        tf = _tf_big(rows_c)
        tune = tuned_steps(logs16[c])
        by_call[c] = {
            "med": statistics.median(tf),
            "min": min(tf),
            "n700": sum(1 for x in tf if x >= 700),
            "n_big": len(tf),
            "tma": sum(1 for r in rows_c if (r["best"] or {}).get("TMA")),
            "n": len(rows_c),
            "tune": {tp: tune.get(f"fp8 TP{tp}", (0, 0, math.nan))[1:] for tp in ("1", "2")},
            "pre": precompiles(logs16[c]).get("fp8", (0, math.nan)),
        }
    out += [
        "",
        f"The fastest TMA tile ran {gm(ratios):.2f}x the shipped config's speed (geomean of "
        f"{len(ratios)} rows, {min(ratios):.2f}-{max(ratios):.2f}x); warp specialization made the "
        f"4-warp tile slower ({gm(ws_4):.2f}x its time, geomean) and changed little with 8 warps. "
        "So TMA became an option of our own FP8 files, `TMA` (`kernels_tuning/space.py`; "
        "`kernels/fp8_block.py` loads both operands through descriptors in the plain and the "
        "SWAP_AB path, split-K included). The engine files cannot hold it (SGLang's and vLLM's "
        "kernels load with pointers). The search tries it on the folded engine winner first "
        "(`strategies/budgeted.refine_split_k`), and the cross-check times the TMA forms of each "
        "item's winners from before its re-tune. Calls 21-23 re-tuned all 200 FP8 items with it "
        "(each resuming the cache of the one before, so every earlier set of winners was timed "
        "again by its polish): call 22 raised the own-file refinement budget from 10 to 20 "
        "evaluations (a full round of the climb around the TMA form); call 23 started the "
        "refinement from the engine winner's GROUP_SIZE_M as the space holds it (SGLang's "
        "default, G32, orders programs like G16 at 16-32 M tiles; `waste` keeps only G16, so "
        "until call 23 no own-file form of an item the default won was in the refinement's "
        "space; `space.canonical_group`).",
        "",
        "| call | own files at M >= 1024: median TFLOP/s (min) | at >= 700 | own-file winners "
        "with TMA | precompile | search TP1 / TP2 |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| before (call 12) | {statistics.median(_tf_big(fp8_c15)):.0f} "
        f"({min(_tf_big(fp8_c15)):.0f}) | {sum(1 for x in _tf_big(fp8_c15) if x >= 700)}/"
        f"{len(_tf_big(fp8_c15))} | - | - | - |",
    ]
    for c, b in by_call.items():
        t1, t2 = b["tune"].get("1", (0, math.nan)), b["tune"].get("2", (0, math.nan))
        out.append(
            f"| {c} | {b['med']:.0f} ({b['min']:.0f}) | {b['n700']}/{b['n_big']} | "
            f"{b['tma']}/{b['n']} | {b['pre'][0]} binaries, {b['pre'][1]:.0f} s | "
            f"{t1[1]:.0f} s ({t1[0]} evaluations) / {t2[1]:.0f} s ({t2[0]}) |"
        )
    out += [
        "",
        "Call 23's rows are the ones shipped and in the tables above. Time before (call 12's "
        "rows at M >= 96, call 13's at M <= 64: `data/call16/previous_compare.jsonl`) / call "
        "23's, geomean (min-max); cuBLAS per-tensor FP8, the same code in both, is the "
        "run-to-run control:",
        "",
        "| M | own file | engine file | cuBLAS (control) | own-file winners with TMA |",
        "| --- | --- | --- | --- | --- |",
    ]
    big23 = [r for r in fp8 if r["item"]["m"] >= 1024]
    n_s4 = sum(1 for r in big23 if (r["best"] or {}).get("num_stages") == 4)
    ex = max(probe, key=lambda r: r["shipped_us"] / r["all"]["tma m64n128k128w4s3"])
    ex_probe = ex["all"]["tma m64n128k128w4s3"]
    ex23 = next(
        r
        for r in fp8
        if (r["item"]["n"], r["item"]["k"], r["item"]["m"]) == (ex["n"], ex["k"], ex["m"])
    )
    bands = ((1, 16, "1-16"), (24, 64, "24-64"), (96, 512, "96-512"), (1024, 1 << 30, ">= 1024"))
    for b in _band_ratios(fp8_c15, fp8, bands, FP8_BAND_TIMES, "TMA"):
        out.append(
            f"| {b['label']} | {spread(b['own'])} | {spread(b['eng'])} | {spread(b['cub'])} | "
            f"{b['flag']}/{b['n']} |"
        )
    out += [
        "",
        f"In the shipped files {gate['tma']} of the {gate['entries']} entries use TMA. The gain "
        f"is smaller than the probe's: {n_s4}/{len(big23)} of call 23's winners at M >= 1024 run "
        "4 stages, and the stand-alone probe kernel runs the same tile faster than our kernel "
        f"with TMA ({ex['n']}x{ex['k']} at M = {ex['m']}: {ex_probe:.1f} us for the probe's "
        f"64/128/128 w4 s3 in call 19, {own_us(ex23):.1f} us for call 23's winner "
        f"{cfg_short(ex23['best'])}; different calls). The "
        "one difference found in their sm_90 TTGIR, the scale loads left outside the software "
        "pipeline in ours, was not it (call 24, next section); the probe kernel also specializes "
        "M, N and K and has no split-K epilogue. Not established.",
        "",
    ]
    return out


def not_shipped16_section(d16: Path) -> list[str]:
    """Calls 16-18 and 24: stream-K, a register cap, prefetched scales."""

    def probe_bands(name: str) -> dict[str, list[float]]:
        bands: dict[str, list[float]] = defaultdict(list)
        for r in json.loads((d16 / name).read_text()):
            label = "M <= 16" if r["m"] <= 16 else f"M = {r['m']}"
            bands[label].append(r["shipped_us"] / r["best_new_us"])
        return bands

    def cells(b: dict[str, list[float]]) -> str:
        return "; ".join(f"{k}: {spread(v)}" for k, v in b.items())

    sk1 = probe_bands("streamk_contiguous_probe.json")
    sk2 = probe_bands("streamk_probe.json")
    mr = probe_bands("maxnreg_probe.json")
    c23 = {row_key(r): r for r in load_jsonl(d16 / "compare-call23.jsonl")}
    c24 = load_jsonl(d16 / "compare-call24.jsonl")
    bands24: dict[str, list[float]] = defaultdict(list)
    ctl24: list[float] = []
    for r in c24:
        a = c23[row_key(r)]
        bands24["M <= 64" if r["item"]["m"] <= 64 else "M >= 96"].append(own_us(a) / own_us(r))
        ctl24.append(
            a["times_us"]["cublas_fp8_per_tensor"] / r["times_us"]["cublas_fp8_per_tensor"]
        )
    return [
        "## Stream-K, a register cap, prefetched scales (calls 16-18, 24; not shipped)",
        "",
        "Each probe timed the config shipped then and its variants for the 10 FP8 shapes "
        "(`data/call16/streamk_probe.py`; every config gated), then the shipped config and the "
        "fastest variant side by side twice (the faster kept). Shipped / fastest variant, "
        "geomean (min-max):",
        "",
        f"- **Stream-K** (`STREAM_K` programs per SM, 1-4; a persistent grid that shares the "
        f"(tile, K tile) iterations out evenly, partial tiles summed by the last program to "
        f"finish; `data/call16/streamk_maxnreg.patch`). Call 16, each program a contiguous range "
        f"of iterations: {cells(sk1)}. The programs in flight then work on tiles far apart, "
        f"with no L2 reuse. Call 17, whole waves of tiles round robin and only the last, partial "
        f"wave by iteration: {cells(sk2)}. The gain on the N = 5120 shapes at M = 1024 (1.6 "
        "waves of 64 x 128 tiles) was a few percent at most; decode sizes lost. 2 programs per "
        "SM was the best setting: the 64 x 128 tile takes 204 registers (236 with stream-K), "
        "two programs per SM.",
        f"- **A register cap** (Triton's `maxnreg` 168, three 4-warp programs per SM; call 18, "
        f"the shipped config with it, unfolded, and with stream-K 2, 3): {cells(mr)}.",
        f"- **Prefetched scales** (call 24; `data/call16/loop_stages.patch`): our K loop with "
        "TMA leaves the two scale loads synchronous in the sm_90 TTGIR (the probe kernel's "
        "are prefetched); giving the loop its own `num_stages` pipelines them. Call 24 re-timed "
        "call 23's candidates with it (cross-check and comparison only, nothing searched): "
        f"call 23's time / call 24's: {cells(bands24)}; cuBLAS control {spread(ctl24)}. Slower; "
        "reverted (the shipped files hold call 23's configs and its kernel).",
        "",
    ]


def _int4_bands(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """INT4 tuned and bf16 (the control) time old / new per M band, ATOMIC_REDUCE winners."""
    return _band_ratios(old, new, INT4_BANDS, INT4_BAND_TIMES, "ATOMIC_REDUCE")


def atomic_section(
    d25: Path, int4: list[dict[str, Any]], int4_c24: list[dict[str, Any]]
) -> list[str]:
    """Calls 25-32: two INT4 probes, a re-tune, the split-K epilogue probes, ATOMIC_REDUCE."""
    L = ["## Split-K by atomic adds, and two INT4 probes (calls 25-32)", ""]
    probe = json.loads((d25 / "int4_probe-call25.json").read_text())
    a_rows = [r for r in probe if r["m"] <= 16]
    cap = [
        min(v for k, v in r["all"].items() if v and "mr" not in k)
        / min(v for k, v in r["all"].items() if v and "mr128" in k)
        for r in a_rows
    ]

    def tile(key: str) -> tuple[int, int]:
        c = parse_key(key.split(" ")[0])
        return c.BLOCK_SIZE_M, c.BLOCK_SIZE_N

    b_rows = [r for r in probe if r["m"] > 16]
    b_ok = [
        r for r in b_rows if not (tile(r["shipped"])[0] >= 32 and tile(r["shipped"])[1] >= 128)
    ]
    bm = [
        r["all"][r["shipped"]] / min(v for k, v in r["all"].items() if v and k != r["shipped"])
        for r in b_ok
    ]
    L.append(
        "Two probes first (call 25, `data/call25/int4_probe.py`; every config gated, then timed). "
        f"**A register cap** (Triton's `maxnreg` 128, {len(a_rows)} items at M = 1 and 16): the "
        "shipped 16/256/128 w4 tile takes 161 registers (three 4-warp programs per SM) and "
        "16/256/64 w4 s3 fits 128 without spills (sm_90 compile on the CPU), yet the fastest "
        "capped config over BK 64/128, stages 2-6 and every split took "
        f"{1 / gm(cap):.2f}x the time of the fastest uncapped one (geomean, "
        f"{rel_range([1 / x for x in cap])}x). **The plane kernel with 32 or 64 tokens** "
        f"(`uses_planes` patched to take BM 32 and 64; M = 24, 32, 48, 64, {len(b_rows)} items; "
        f"{len(b_rows) - len(b_ok)} left out, whose shipped config the patch also moved onto the "
        "plane kernel): the fastest plane config with BM 32/64 ran at "
        f"{gm(bm):.2f}x the speed of the config shipped then (two 16-token plane tiles at M <= "
        f"32, the main kernel above; geomean, {rel_range(bm)}x; sm_90 compiles on the CPU: "
        "249-255 registers at BM 32 with BN 256, with spills at 4 warps). Neither is shipped."
    )
    L.append("")
    c26 = load_jsonl(d25 / "compare-call26.jsonl")
    L.append(
        "**Call 26** re-tuned the 200 INT4 items with the kernel as it was: the rows at M >= 48 "
        "were still call 3's, timed before the kernel's SWAP_AB change. Rows before / call 26's, "
        "geomean (min-max); bf16 `torch.matmul`, the same code in both, is the control:"
    )
    L.append("")
    L.append("| M | tuned | bf16 (control) |")
    L.append("| --- | --- | --- |")
    for b in _int4_bands(int4_c24, c26):
        t_, c_ = b["tuned"], b["bf16"]
        L.append(
            f"| {b['label']} | {gm(t_):.2f}x ({rel_range(t_)}) | {gm(c_):.2f}x ({rel_range(c_)}) |"
        )
    L.append("")
    fc = json.loads((d25 / "fixed_cost_probe-call31.json").read_text())
    L.append(
        "**Where the decode kernel's fixed cost goes** (call 31, `data/call25/fixed_cost_probe.py`):"
        " the plane kernel at N = 5120 with the shipped tile 16/256/128 w4 s3, K = 128 x "
        "SPLIT_K x tiles, so each program runs `tiles` K tiles; median of 5 rounds, the "
        "variants interleaved. `ordered`: the split-K epilogue shipped until then (each split "
        "stores its partial, the last to arrive loads all of them); `atomic`: the splits add "
        "theirs into one zeroed tile with fp32 atomic adds and the last loads that one tile; "
        "`4 at once`: the ordered sum with four partials loaded per step (same order, same "
        "result); `empty`: an empty kernel on the same grid. Microseconds:"
    )
    L.append("")
    L.append(
        "| M | SPLIT_K | K tiles per program | programs | ordered | atomic | 4 at once | empty |"
    )
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in fc:
        L.append(
            f"| {r['m']} | {r['split_k']} | {r['k_tiles_per_program']} | {20 * r['split_k']} | "
            f"{r['base']:.2f} | {r['red']:.2f} | {r['u4']:.2f} | {r['empty']:.2f} |"
        )
    L.append("")
    one = {(r["m"], r["split_k"]): r for r in fc if r["k_tiles_per_program"] == 1}
    L.append(
        "With one K tile per program and no split the kernel takes "
        f"{one[(1, 1)]['base']:.1f} us (an empty launch: {one[(1, 1)]['empty']:.1f}); split 6 "
        f"adds {one[(1, 6)]['base'] - one[(1, 1)]['base']:.1f} us at M = 1 and "
        f"{one[(16, 6)]['base'] - one[(16, 1)]['base']:.1f} at M = 16 (split 12: "
        f"{one[(1, 12)]['base'] - one[(1, 1)]['base']:.1f} and "
        f"{one[(16, 12)]['base'] - one[(16, 1)]['base']:.1f}), the atomic sum "
        f"{one[(1, 6)]['red'] - one[(1, 1)]['red']:.1f} and "
        f"{one[(16, 6)]['red'] - one[(16, 1)]['red']:.1f} (split 12: "
        f"{one[(1, 12)]['red'] - one[(1, 1)]['red']:.1f} and "
        f"{one[(16, 12)]['red'] - one[(16, 1)]['red']:.1f}). Loading four partials at once helps "
        "at M = 1 and not at M = 16. That fits the last program's loads being the cost (not "
        "profiled): at M = 1 a chain of dependent round trips to L2, at M = 16 SPLIT_K x 16 KB "
        "read through one SM; the atomic adds are done in L2, by all splits at once."
    )
    L.append("")

    def red_ratios(name: str, v: str) -> dict[str, list[float]]:
        rows_ = [r for r in json.loads((d25 / name).read_text()) if r.get("best_us")]
        out: dict[str, list[float]] = defaultdict(list)
        for r in rows_:
            us = r["best_us"]
            if "base" in us and v in us:
                out[r["kind"]].append(us["base"] / us[v])
        return out

    reps = {c: red_ratios(f"splitk_red_probe-call{c}.json", "red") for c in (29, 30, 31)}
    u4 = red_ratios("splitk_red_probe-call31.json", "u4")
    L.append(
        "The same variants on the shipped configs and their split-K neighbours "
        "(`data/call25/splitk_red_probe.py`: SPLIT_K 1-12 of the shipped config, every config "
        "gated in each variant, then each variant's fastest re-timed side by side twice, the "
        "faster kept; INT4 and FP8, six shapes, M = 1 and 16). The variant is a second "
        "`triton.jit` of the same kernel source with the epilogue swapped in its globals. "
        "Ordered time / variant time, geomean (min-max):"
    )
    L.append("")
    L.append("| call | kind | items | atomic | 4 at once |")
    L.append("| --- | --- | --- | --- | --- |")
    for c, rr in reps.items():
        for kd in ("int4", "fp8"):
            if kd in rr:
                xs = rr[kd]
                u = u4.get(kd, []) if c == 31 else []
                u_txt = f"{gm(u):.3f}x ({rel_range(u)})" if u else "-"
                L.append(
                    f"| {c} | {kd.upper()} | {len(xs)} | {gm(xs):.3f}x ({rel_range(xs)}) | {u_txt} |"
                )
    L.append("")
    L.append(
        "(Call 27 ran the first version of this probe: the second `triton.jit` lost the "
        "`tl.constexpr` annotations, every variant config failed to compile; call 28 printed "
        "that error.) FP8 gained little, so the atomic sum became an INT4 option only: "
        "`ATOMIC_REDUCE` "
        "(`kernels_tuning/kernels/_atomic.py`; a runtime argument of both INT4 kernels, no extra "
        "binaries; the workspace is one zeroed fp32 [M, N] tile that the last arriver zeroes "
        "again, cached per device like the counters). The order of the additions then depends "
        "on arrival, so outputs can differ from run to run in the last bits: "
        "`autotune kernels tune --deterministic` leaves it out of the space, and "
        "`shim.get_config(..., deterministic=True)` reads an entry with it as the same config "
        "with the ordered sum."
    )
    L.append("")
    n_atomic = sum(1 for r in int4 if (r["best"] or {}).get("ATOMIC_REDUCE"))
    n_split = sum(1 for r in int4 if (r["best"] or {}).get("SPLIT_K", 1) > 1)
    L.append(
        f"**Call 32** re-tuned the 200 INT4 items with it in the space (its cross-check also "
        "timed call 26's winners and their atomic forms); its rows and files are shipped. "
        f"{n_atomic} of the {len(int4)} winners use it ({n_split} use split-K). Call 26's time / "
        "call 32's, geomean (min-max):"
    )
    L.append("")
    L.append("| M | tuned | bf16 (control) | winners with ATOMIC_REDUCE |")
    L.append("| --- | --- | --- | --- |")
    bands32 = _int4_bands(c26, int4)
    for b in bands32:
        t_, c_ = b["tuned"], b["bf16"]
        L.append(
            f"| {b['label']} | {gm(t_):.2f}x ({rel_range(t_)}) | {gm(c_):.2f}x ({rel_range(c_)}) | "
            f"{b['flag']}/{b['n']} |"
        )
    L.append("")
    e2e = d25 / "e2e-call33"

    def atomic_evals(name: str) -> tuple[int, int]:
        ev = [r for r in load_jsonl(e2e / name) if r["t"] == "eval"]
        return sum(1 for r in ev if r["cfg"].get("ATOMIC_REDUCE")), len(ev)

    (a_n, a_all), (d_n, d_all) = (
        atomic_evals("cache.jsonl.gz"),
        atomic_evals("cache-deterministic.jsonl.gz"),
    )
    L.append(
        "End to end (call 33, `data/call25/e2e-call33/`): `autotune kernels tune --nk 5120,3072 "
        "--kind int4 --batch-sizes 1,16 --max-evals 16` on the H200 timed "
        f"{a_n} ATOMIC_REDUCE configs among its {a_all} evaluations, the same with "
        f"`--deterministic` {d_n} of {d_all}; both wrote their file (this small budget, without "
        "the other shapes' winners as seeds, found slower configs than the shipped ones)."
    )
    L.append("")
    probe_int4 = [x for rr in reps.values() for x in rr.get("int4", [])]
    tiny_t = bands32[0]["tuned"]
    # One item both the probe (call 31) and the re-tune timed: their atomic configs.
    p31 = {
        (r["n"], r["k"], r["m"]): r
        for r in json.loads((d25 / "splitk_red_probe-call31.json").read_text())
        if r.get("kind") == "int4"
    }

    def probe_red(key: tuple[int, int, int]) -> str | None:
        red = p31[key]["best"].get("red")
        if red is None:
            return None
        return cfg_short(parse_key(red.split(" ")[1]).with_(ATOMIC_REDUCE=1).as_dict())

    ex = next(
        (
            (key, r)
            for r in int4
            if (key := (r["item"]["n"], r["item"]["k"], r["item"]["m"])) in p31
            and r["best"]
            and probe_red(key) not in (None, cfg_short(r["best"]))
        ),
        None,
    )
    L.append(
        "The re-tune gains less than the probes: at M <= 16 the probes' atomic sum was "
        f"{gm(probe_int4):.2f}x faster (geomean of calls 29-31, {rel_range(probe_int4)}x, six "
        f"shapes), the re-tune's rows {gm(tiny_t):.2f}x against a control of "
        f"{gm(bands32[0]['bf16']):.2f}x. The budgeted search (at most 48 evaluations per "
        "item, in a space the atomic twins make larger) does not always land on the probe's "
        "config"
        + (
            f" ({ex[0][0]}x{ex[0][1]} at M = {ex[0][2]}: call 32 shipped "
            f"{cfg_short(ex[1]['best'])}, the probe's fastest atomic config was "
            f"{probe_red(ex[0])})."
            if ex
            else "."
        )
    )
    L.append("")
    return L


def fp8_decode_section(d25: Path) -> list[str]:
    """Calls 33-35: where our FP8 decode kernel's time goes next to cuBLAS's."""
    L = ["## FP8 at decode sizes: the split-K synchronization (calls 33-35)", ""]
    fc = json.loads((d25 / "fp8_fixed_cost_probe-call33.json").read_text())
    L.append(
        "Call 33 (`data/call25/fp8_fixed_cost_probe.py`): N = 5120 with the tile our FP8 files run "
        "at M <= 16 (16/64/128 w4 s4 SWAP_AB TMA), K = 128 x SPLIT_K x tiles so each program runs "
        "`tiles` K tiles, next to cuBLAS per-tensor FP8 on the same problem and an empty kernel "
        "on the same grid; median of 5 rounds, interleaved. Microseconds:"
    )
    L.append("")
    L.append("| M | SPLIT_K | K tiles per program | K | programs | ours | cuBLAS | empty |")
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in fc:
        L.append(
            f"| {r['m']} | {r['split_k']} | {r['k_tiles_per_program']} | {r['k']} | "
            f"{r['programs']} | {r['ours']:.2f} | {r['cublas']:.2f} | {r['empty']:.2f} |"
        )
    L.append("")
    by = {(r["m"], r["split_k"], r["k_tiles_per_program"]): r for r in fc}
    L.append(
        f"Without a split our kernel is as fast as cuBLAS or faster ({by[(1, 1, 1)]['ours']:.2f} "
        f"against {by[(1, 1, 1)]['cublas']:.2f} us at K = 128, M = 1); the split-K 4 versions of "
        "the same per-program work take "
        f"{by[(1, 4, 1)]['ours'] - by[(1, 1, 1)]['ours']:.1f}-"
        f"{by[(16, 4, 1)]['ours'] - by[(16, 1, 1)]['ours']:.1f} us more (M = 1, 16), and at "
        f"K = 3072 (5120x3072, the shape furthest from cuBLAS) {by[(1, 4, 6)]['ours']:.2f} and "
        f"{by[(16, 4, 6)]['ours']:.2f} us against cuBLAS's {by[(1, 4, 6)]['cublas']:.2f} and "
        f"{by[(16, 4, 6)]['cublas']:.2f}."
    )
    L.append("")
    eps = {c: json.loads((d25 / f"fp8_epilogue_probe-call{c}.json").read_text()) for c in (34, 35)}
    names = (
        "ordered",
        "no_sync",
        "counter_only",
        "relaxed",
        "two_kernels",
        "last_waits",
        "cublas",
    )
    L.append(
        "Calls 34 and 35 (`data/call25/fp8_epilogue_probe.py`) time variants of the split-K "
        "epilogue on that tile at SPLIT_K 4 (a second `triton.jit` of the kernel with the "
        "helper swapped): `ordered`, the shipped one (store the partial, barrier, acq_rel "
        "counter, the last to arrive loads all partials and writes C); `no_sync`, store the "
        "partial and write C from the program's own (wrong output, timed only); `counter_only`, "
        "the barrier and counter but no loads (wrong output); `relaxed`, `ordered` with a "
        "relaxed counter (no fences; racy in principle, right here); `two_kernels`, partials "
        "summed in split order by a second kernel; `last_waits`, the other splits bump the "
        "counter with a release add nobody waits for and the last split (dispatched after them) "
        "waits for the counter, then sums in split order (call 35 only). Median of 5 rounds, "
        "interleaved; in call 35 `relaxed`, `two_kernels` and `last_waits` also passed the gate on "
        "the output of the timed back-to-back replays. Microseconds:"
    )
    L.append("")
    L.append("| call | M | K | " + " | ".join(names) + " |")
    L.append("| --- | --- | --- | " + " | ".join("---" for _ in names) + " |")
    for c, rows in eps.items():
        for r in rows:
            cells = [f"{r[n]:.2f}" if n in r else "-" for n in names]
            L.append(f"| {c} | {r['m']} | {r['k']} | " + " | ".join(cells) + " |")
    L.append("")
    r35 = {(r["m"], r["k"]): r for r in eps[35]}
    big = [r35[(1, 3072)], r35[(16, 3072)]]
    L.append(
        "At 5120x3072 the kernel without any synchronization takes "
        f"{big[0]['no_sync']:.2f} and {big[1]['no_sync']:.2f} us (M = 1, 16), cuBLAS "
        f"{big[0]['cublas']:.2f} and {big[1]['cublas']:.2f}: at this shape the gap to cuBLAS is "
        f"the split-K synchronization, {big[0]['ordered'] - big[0]['no_sync']:.1f}-"
        f"{big[1]['ordered'] - big[1]['no_sync']:.1f} us, most of it the barrier and the acq_rel "
        f"counter ({big[0]['counter_only'] - big[0]['no_sync']:.1f}-"
        f"{big[1]['counter_only'] - big[1]['no_sync']:.1f} us); the fences alone cost "
        f"{big[0]['ordered'] - big[0]['relaxed']:.1f}-{big[1]['ordered'] - big[1]['relaxed']:.1f}"
        " us. The one variant faster than `ordered`, `relaxed`, drops the memory ordering the "
        "reduction relies on; the correct ones were not faster. None is shipped. The splits of a "
        "tile as one thread-block cluster, summing through distributed shared memory (no trip "
        "through L2 and no counter), were not faster either ([Split-K in a thread-block cluster]"
        "(#split-k-in-a-thread-block-cluster-calls-38-42-not-shipped)), nor were fewer splits "
        "with deeper pipelines ([Deeper software pipelines]"
        "(#deeper-software-pipelines-at-decode-sizes-call-45-not-shipped))."
    )
    L.append("")
    return L


def _cluster_rows(d38: Path) -> dict[str, list[dict[str, Any]]]:
    """Call 42's FP8 rows (6 shapes x M 1, 16) and call 40's INT4 rows (2 shapes x M 1, 16)."""
    fp8 = [r for r in load_jsonl(d38 / "cluster_probe-call42.jsonl") if r["kind"] == "fp8"]
    int4 = [r for r in load_jsonl(d38 / "cluster_probe-call40.jsonl") if r["kind"] == "int4"]
    for r in fp8 + int4:
        if not all(r["gate_after_timing"].values()) or any(v != "ok" for v in r["gates"].values()):
            sys.exit(f"{d38}: {r['kind']} {r['n']}x{r['k']} M={r['m']} has a failed gate")
        r["best"] = json.loads(r["best"].replace("'", '"'))  # the probe wrote str(dict)
    return {"fp8": fp8, "int4": int4}


def cluster_section(d38: Path) -> list[str]:
    """Calls 38-42: the split-K partials summed inside a thread-block cluster (DSMEM)."""
    rows = _cluster_rows(d38)
    L = ["## Split-K in a thread-block cluster (calls 38-42, not shipped)", ""]
    L.append(
        "`data/call38/cluster_probe.py`: the SPLIT_K programs of an output tile run as the CTAs "
        "of one thread-block cluster (cluster dims (SPLIT_K, 1, 1); the program's tile is "
        "`%clusterid.x`, its split `%cluster_ctarank`). Each split but the first writes its fp32 "
        "partial into a slot of the first one's shared memory (`mapa` + `st.shared::cluster`) "
        "and arrives on the cluster barrier with release semantics; the first waits with acquire "
        "semantics, adds the slots in split order (deterministic, like the shipped ordered sum) "
        "and writes C. No workspace in global memory and no counter. The slots lie past the end "
        "of Triton's own dynamic shared memory (the launch asks for that much more). Made as a "
        "second `triton.jit` of the shipped kernels with `tl.program_id` and the split-K "
        "epilogue swapped in its globals, launched as clusters by patching the compiled "
        "kernel's launch metadata. Every config was gated before it was timed and again on the "
        "output of the timed replays (all passed). FP8: the own-file decode tile 16/64/128 w4 "
        "SWAP_AB TMA with stages 4-5 and SPLIT_K 2, 3, 4, 6, 8 on the six shapes furthest from "
        "cuBLAS at M <= 16 (call 42); INT4: the shipped plane tile with those splits (call 40). "
        "`cluster`: the fastest cluster config of the first timings; `same, ordered`: that "
        "config with the shipped ordered sum; `same, cluster launch`: that, launched as "
        "clusters (FP8 only: what the cluster launch alone costs); `shipped`: the shipped "
        "config. Median of 5 rounds, interleaved. Microseconds:"
    )
    L.append("")
    L.append(
        "| kind | N x K | M | shipped | cluster | cluster config | same, ordered | "
        "same, cluster launch | baseline | shipped / cluster |"
    )
    L.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind in ("fp8", "int4"):
        for r in rows[kind]:
            best = r["best"]
            lo = r.get("cluster_launch_only")
            L.append(
                f"| {kind.upper()} | {r['n']}x{r['k']} | {r['m']} | {r['shipped']:.2f} | "
                f"{r['cluster']:.2f} | sk{best['SPLIT_K']} s{best['num_stages']} | "
                f"{r['same_ordered']:.2f} | {f'{lo:.2f}' if lo else '-'} | {r['baseline']:.2f} | "
                f"{r['shipped'] / r['cluster']:.2f} |"
            )
    L.append("")
    fp8, int4 = rows["fp8"], rows["int4"]

    def by_split(rs: list[dict[str, Any]]) -> str:
        per: dict[int, list[float]] = defaultdict(list)
        for r in rs:
            best = min(r["first"].values())
            for key, us in r["first"].items():
                per[json.loads(key)["SPLIT_K"]].append(us / best)
        return ", ".join(f"{k} {gm(v):.2f}x" for k, v in sorted(per.items()))

    L.append(
        "Baseline: cuBLAS per-tensor FP8 for FP8, bf16 `torch.matmul` for INT4. Shipped time / "
        f"cluster time: FP8 {short_spread([r['shipped'] / r['cluster'] for r in fp8])}, INT4 "
        f"{short_spread([r['shipped'] / r['cluster'] for r in int4])}; on the same config the ordered "
        f"sum's time / the cluster sum's: FP8 {short_spread([r['same_ordered'] / r['cluster'] for r in fp8])}"
        ", INT4 "
        f"{short_spread([r['same_ordered'] / r['cluster'] for r in int4])}. The cluster launch alone "
        "costs nothing on average at these sizes (FP8, ordered sum, plain launch / cluster "
        "launch: "
        f"{short_spread([r['same_ordered'] / r['cluster_launch_only'] for r in fp8])}), but larger "
        "clusters run much slower: first timing / the item's fastest cluster config, geomean "
        f"by SPLIT_K: FP8 {by_split(fp8)}; INT4 {by_split(int4)}. The INT4 slots are 16 KB per "
        "split (a 16 x 256 fp32 tile) on top of the plane kernel's 42 KB (sm_90 compile), so "
        "fewer programs fit on an SM (from that arithmetic; not profiled). The cluster winners use SPLIT_K "
        f"{'/'.join(sorted({str(r['best']['SPLIT_K']) for r in fp8}))}"
        " on FP8. So a sum through distributed shared memory does not remove the cost the "
        "`no_sync` variant of calls 34-35 left out; that points at the wait for the last split "
        "and the serial sum after it rather than at the trip through L2 (not measured further). "
        "Not shipped."
    )
    L.append("")
    L.append(
        "Calls 38 and 39 did not measure: 38 stopped on an error in the probe's own report, and "
        "in 39 (`cluster_probe-call39.jsonl`) every cluster config with SPLIT_K >= 3 failed the gate (the first version read the "
        "cluster size from a global of the program-id helper, which Triton's cache key does not "
        "see, so every size ran the SPLIT_K = 2 binary; the rank is now read from the hardware). "
        "Call 41's `same, cluster launch` column is discarded: that clone hashed like the shipped "
        "kernel, loaded its binary from Triton's disk cache and gave wrong output; call 42 "
        "repeated the FP8 rows with the fix."
    )
    L.append("")
    return L


PIPE_CASES = ((34816, 5120, 1), (34816, 5120, 16), (5120, 3072, 1), (5120, 3072, 16))
OPCODES = ("LOP3", "SHF", "HADD2", "HMUL2", "PRMT", "IMAD", "HMMA", "LDS", "LDGSTS")


def _ncu_blocks(text: str) -> list[str]:
    return text.split("  _awq_planes_kernel (")[1:]


def _ncu_value(block: str, name: str, after: str = "") -> float:
    start = block.index(after) if after else 0
    m = re.search(
        rf"^ {{4}}{re.escape(name)} +(?:%|inst/cycle|us)? +([\d.,]+)$", block[start:], re.M
    )
    if m is None:
        sys.exit(f"ncu output: no {name!r} after {after!r}")
    return float(m.group(1).replace(",", ""))


def pipes_section(d38: Path) -> list[str]:
    """Calls 43-44: the INT4 plane kernel's pipe use and SASS instruction mix (Nsight Compute)."""
    pipes = _ncu_blocks((d38 / "ncu_pipes-call43.txt").read_text())
    ops = _ncu_blocks((d38 / "ncu_opcodes-call44.txt").read_text())
    if len(pipes) != len(PIPE_CASES) or len(ops) != len(PIPE_CASES):
        sys.exit(f"{d38}: expected {len(PIPE_CASES)} kernels in each Nsight Compute file")
    active = "Pipe Utilization (% of active cycles)"
    rate = "Pipe Utilization (% of peak instructions executed over active cycles)"
    L = ["## The plane kernel's pipes and instruction mix (Nsight Compute, calls 43-44)", ""]
    L.append(
        "`data/call38/ncu_pipes_probe.py`: one launch each of the INT4 plane kernel with the shipped "
        "configs (split-K with ATOMIC_REDUCE) on the largest and the smallest shape at M = 1 and "
        "16, under Nsight Compute without locked clocks: call 43 the pipe utilization "
        "(`ComputeWorkloadAnalysis`), call 44 the executed SASS instructions per opcode "
        "(`sass__inst_executed_per_opcode`). Pipes: % of the pipe's active cycles (ALU: integer "
        "and logic; FMA: float, including the bf16x2 HADD2/HMUL2; Tensor: HMMA) and, for the FMA "
        "pipe's fp16 part and the load/store unit, % of peak instructions. Instructions: executed "
        "per thread and packed int32 word (8 weights; warp instructions x 32 / (N x K / 8))."
    )
    L.append("")
    head = ["", *[f"{n}x{k} M={m}" for n, k, m in PIPE_CASES]]
    L.append("| " + " | ".join(head) + " |")
    L.append("| " + " | ".join("---" for _ in head) + " |")
    rows: dict[str, list[str]] = defaultdict(list)
    per_word: list[dict[str, float]] = []
    for (n, k, _m), pb, ob in zip(PIPE_CASES, pipes, ops, strict=True):
        gx, gy = re.match(r"(\d+), (\d+), 1\)", pb).groups()  # type: ignore[union-attr]
        rows["grid (programs)"].append(f"{gx}x{gy} ({int(gx) * int(gy)})")
        rows["duration, us"].append(f"{_ncu_value(ob, 'gpu__time_duration.sum'):.1f}")
        rows["issue slots busy, %"].append(f"{_ncu_value(pb, 'Issue Slots Busy'):.0f}")
        for name in ("ALU", "FMA", "Tensor (FP)"):
            rows[f"{name}, % of active cycles"].append(f"{_ncu_value(pb, name, active):.0f}")
        for name in ("FMA (FP16)", "LSU"):
            rows[f"{name}, % of peak instructions"].append(f"{_ncu_value(pb, name, rate):.0f}")
        mix = dict(
            (op, float(v.replace(",", "")))
            for op, v in re.findall(r"\b([A-Z][A-Z0-9]*):\s+([\d,]+)", ob)
        )
        words = n * k / 8
        pw = {op: c * 32 / words for op, c in mix.items()}
        per_word.append(pw)
        rows["instructions per word, all"].append(f"{sum(pw.values()):.1f}")
        for op in OPCODES:
            rows[f"  {op}"].append(f"{pw.get(op, 0.0):.2f}")
        rows["  other"].append(f"{sum(v for o, v in pw.items() if o not in OPCODES):.1f}")
    for name, vals in rows.items():
        L.append(f"| {name} | " + " | ".join(vals) + " |")
    L.append("")
    big = per_word[0]
    deq = sum(big[o] for o in ("LOP3", "SHF", "HADD2", "HMUL2"))
    L.append(
        f"On 34816x5120 the kernel executes {sum(big.values()):.1f} instructions per thread and "
        f"packed word. The dequantization the asm asks for is 15 (per word 4 lop3, 3 shifts, 4 "
        f"bf16x2 subtractions, 4 multiplications; executed: {deq:.1f}); the MMAs "
        f"{big['HMMA']:.1f}. Around them: {big['PRMT']:.1f} PRMT, one per bf16 pair (presumably "
        "the operand relayout: the lop3 pairs run along N, the MMA's B operand pairs along K; "
        f"not read from the SASS), {big['IMAD']:.1f} IMAD and "
        f"{big['LDS'] + big['LDGSTS']:.1f} loads. No pipe is saturated: the ALU pipe is the "
        "busiest, at about half of its active cycles, and the issue slots are busy about half "
        "the time on the large shape and a quarter on the small one. With three 4-warp programs "
        "per SM on the large shape (registers, call 13) the warps' dependency chains are what is exposed (call 14's stall "
        "reasons), so cutting instructions alone does not pay (calls 11 and 15 cut 13% and 21% "
        "and did not get faster); more independent work per warp, or more warps, is the lever."
    )
    L.append("")
    return L


def deep_stages_section(d38: Path) -> list[str]:
    """Call 45: FP8 decode tiles with 6-20 pipeline stages (cuBLAS's way: no split, deep queue)."""
    rows = load_jsonl(d38 / "deep_stages_probe-call45.jsonl")
    for r in rows:
        bad = [v for v in r["gates"].values() if v != "ok"]
        if bad or not all(r["gate_after_timing"].values()):
            sys.exit(f"{d38}: {r['n']}x{r['k']} M={r['m']}: a failed gate in call 45")
    L = ["## Deeper software pipelines at decode sizes (call 45, not shipped)", ""]
    L.append(
        "cuBLAS per-tensor FP8 runs the small shapes without a split: 80 programs of 12 warps "
        "with 164 KB of shared memory each (call 13), a deep queue of tiles in flight per SM. Our "
        "space stops at 5 stages (SGLang's grid). `data/call38/deep_stages_probe.py` timed the "
        "own-file decode tile 16/64/128 w4 SWAP_AB TMA with 6, 8, 10, 12, 16 and 20 stages "
        "(10 KB each) and SPLIT_K 1-4, and 16/128/128 w8 with 6-10 stages and SPLIT_K 1-3 "
        "(num_stages is a compile option: no kernel change), on all ten shapes at M = 1 and 16; "
        f"every config gated ({sum(len(r['gates']) for r in rows)} passed), the fastest re-timed "
        "side by side with the shipped config and cuBLAS (median of 5 rounds, gated again on "
        "the timed replays' output). Microseconds:"
    )
    L.append("")
    L.append("| N x K | M | shipped | config | deepest-pipeline winner | config | cuBLAS |")
    L.append("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        sc, b = r["shipped_cfg"], r["best"]
        L.append(
            f"| {r['n']}x{r['k']} | {r['m']} | {r['shipped']:.2f} | sk{sc.get('SPLIT_K', 1)} "
            f"s{sc['num_stages']} | {r['deep']:.2f} | BN{b['BLOCK_SIZE_N']} w{b['num_warps']} "
            f"sk{b.get('SPLIT_K', 1)} s{b['num_stages']} | {r['cublas']:.2f} |"
        )
    L.append("")
    ratio = [r["shipped"] / r["deep"] for r in rows]
    small = next(r for r in rows if (r["n"], r["k"], r["m"]) == (5120, 3072, 1))

    def first(r: dict[str, Any], sk: int, st: int) -> float:
        return float(
            next(
                v
                for key, v in r["first"].items()
                if json.loads(key).get("SPLIT_K", 1) == sk
                and json.loads(key)["num_stages"] == st
                and json.loads(key)["BLOCK_SIZE_N"] == 64
            )
        )

    L.append(
        f"Shipped time / the deep winner's: {short_spread(ratio)}; every winner uses "
        f"{' or '.join(str(x) for x in sorted({r['best']['num_stages'] for r in rows}))} stages "
        "(6: the fewest tried). More stages made the kernel slower, with or without a split: at "
        f"5120x3072, M = 1, without a split {first(small, 1, 6):.1f} us at 6 stages, "
        f"{first(small, 1, 12):.1f} at 12 and {first(small, 1, 20):.1f} at 20 (first timings), "
        f"against cuBLAS's {small['cublas']:.2f}. So Triton's software pipeline, in which every "
        "warp both loads and computes, does not turn a deeper queue into bandwidth here as "
        "cuBLAS's separate producer and consumer warps appear to (an interpretation, not "
        "profiled). Triton 3.6's automatic warp "
        "specialization (`tl.range(..., warp_specialize=True)`) left this loop unchanged when "
        "compiled for sm_90 on the CPU (`data/call38/ws_compile_check.py`: no "
        "`ttg.warp_specialize` in its TTGIR; the option's docstring names Blackwell only). "
        "Not shipped."
    )
    L.append("")
    return L


if __name__ == "__main__":
    main()
