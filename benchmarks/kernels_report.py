"""Render reports/kernels/README.md from the data of the H200 runs (reports/kernels/data/).

    .venv/bin/python benchmarks/kernels_report.py [--data reports/kernels/data]

No GPU needed: it reads compare.jsonl (side-by-side timings, each row from the last call that
measured its item), exhaustive.jsonl (budgeted vs exhaustive), cache.jsonl.gz (every evaluation of
calls 1-4 and 6; call 7 searched nothing), small_m.json (call 5's SWAP_AB A/B), env.json (the
kernel fingerprints of the calls that last wrote each kind's files), the progress logs and
pytest-gpu.log, checks that every config in the shipped files (kernels_tuning/configs/) passed the
correctness gate, and computes the issue's goal figures.
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
from kernels_tuning.space import GRID, KernelConfig  # noqa: E402

TP1 = {(14336, 5120), (5120, 6144), (16384, 5120), (34816, 5120), (5120, 17408)}
FILE_RE = re.compile(r"N=(\d+),K=(\d+),device_name=[^,]+,dtype=(fp8_w8a8|int4_w4a16)")
PACKING_RE = re.compile(r"packing=(awq|gptq)")
# The device calls that appended a `retune` record to the cache, in order: call 4 (SWAP_AB in the
# space, FP8 and INT4 at M <= 32) and call 6 (INT4 at M <= 32 with the PTX plane kernel).
RETUNE_CALLS = (4, 6)


def gm(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        return [json.loads(line) for line in f if line.strip()]


def cfg_short(d: dict[str, int] | None, packing: str | None = None) -> str:
    """BM/BN/BK g w s [skN] [swap]; for INT4 (`packing` given) ` planes` where
    `int4_w4a16.w4a16_matmul` dispatches the config to the PTX plane kernel."""
    if not d:
        return "-"
    c = KernelConfig.from_dict(d)
    sk = f" sk{c.SPLIT_K}" if c.SPLIT_K > 1 else ""
    swap = " swap" if c.SWAP_AB else ""
    planes = " planes" if packing is not None and uses_planes(c, packing) else ""
    return (
        f"{c.BLOCK_SIZE_M}/{c.BLOCK_SIZE_N}/{c.BLOCK_SIZE_K} g{c.GROUP_SIZE_M} "
        f"w{c.num_warps} s{c.num_stages}{sk}{swap}{planes}"
    )


def f1(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f}" if x < 1000 else f"{x:,.0f}")


def item_key(kind: str, n: int, k: int, m: int, packing: str = "awq") -> str:
    """The cache's item key (kernels_tuning.runner.WorkItem.key)."""
    return f"{kind}:N={n},K={k},M={m}" + (f",packing={packing}" if kind == "int4" else "")


def gate_check(cache: list[dict[str, Any]], config_root: Path) -> dict[str, Any]:
    """Every (file, M) entry of the shipped files against the cache: the config must have a
    passing gated evaluation of that item after the item's last `retune` marker (a re-tune
    searches afresh after a kernel change, so older evaluations do not count), and should be the
    latest result of the item (engine files: its engine-space winner; our files: its winner)."""
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
    entries = files = swapped = split = planes = 0
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
        "planes": planes,
        "unchecked": unchecked,
        "stale": stale,
    }


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
    rows = load_jsonl(d / "compare.jsonl")
    exh = load_jsonl(d / "exhaustive.jsonl")
    cache = load_jsonl(d / "cache.jsonl.gz")
    env = json.loads((d / "env.json").read_text())
    log1 = (d / "progress-run1.log").read_text()
    log2 = (d / "progress-run2.log").read_text()
    log3 = (d / "progress-run3.log").read_text()
    log4 = (d / "progress-run4.log").read_text()
    log6 = (d / "progress-run6.log").read_text()
    small = json.loads((d / "small_m.json").read_text())
    pytest_log = (d / "pytest-gpu.log").read_text()

    # The items calls 4 and 6 re-tuned: their `retune` markers in the cache. An item's
    # comparison row is from the last call that re-tuned it; the other rows are call 3's.
    marks = [i for i, rec in enumerate(cache) if rec["t"] == "retune"]
    if len(marks) != len(RETUNE_CALLS):
        sys.exit(
            f"{d / 'cache.jsonl.gz'}: {len(marks)} `retune` records, expected "
            f"{len(RETUNE_CALLS)} (calls {RETUNE_CALLS}); update RETUNE_CALLS"
        )
    bounds = [*marks, len(cache)]
    span = {c: cache[bounds[i] + 1 : bounds[i + 1]] for i, c in enumerate(RETUNE_CALLS)}
    retuned = {c: set(cache[i]["items"]) for c, i in zip(RETUNE_CALLS, marks, strict=True)}
    call_of: dict[str, int] = {}
    for c in RETUNE_CALLS:
        call_of |= dict.fromkeys(retuned[c], c)
    for r in rows:
        it = r["item"]
        r["tp"] = 1 if (it["n"], it["k"]) in TP1 else 2
        r["call"] = call_of.get(item_key(it["kind"], it["n"], it["k"], it["m"], it["packing"]), 3)
    m_retuned = sorted({int(re.findall(r"M=(\d+)", key)[0]) for key in retuned[4]})
    m4_max = max(m_retuned) if m_retuned else 0
    m6_max = max((r["item"]["m"] for r in rows if r["call"] == 6), default=0)
    n4 = sum(1 for r in rows if r["call"] == 4)
    n6 = sum(1 for r in rows if r["call"] == 6)
    kinds6 = sorted({r["item"]["kind"] for r in rows if r["call"] == 6})
    fp8 = [r for r in rows if r["item"]["kind"] == "fp8"]
    int4 = [r for r in rows if r["item"]["kind"] == "int4"]

    # ---- gate check of every shipped config -------------------------------------------------
    gate = gate_check(cache, args.configs)
    n_eval = sum(1 for rec in cache if rec["t"] == "eval")
    n_eval_call = {c: sum(1 for rec in span[c] if rec["t"] == "eval") for c in RETUNE_CALLS}
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
    tf = [r["flops"] / t(r, "tuned") / 1e6 for r in big]
    tf_cub = [r["flops"] / t(r, "cublas_fp8_per_tensor") / 1e6 for r in big]
    tf_bf16 = [r["flops"] / t(r, "bf16_matmul") / 1e6 for r in big]
    x8 = call8_stats(d / "call8", fp8)
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
        return 2.0 * (n * k + m * k + m * n)

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
    i_mid = [r for r in int4 if 16 < r["item"]["m"] <= m6_max and r["call"] == 6]
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
    # SWAP_AB in the winners of call 4's re-tune (FP8: own files only, its comparison rows;
    # INT4: its search results in the cache, since call 6 replaced those rows).
    sw_fp8 = [r for r in fp8 if r["call"] == 4]
    sw_int4 = list(latest_items(span[4], "int4").values())
    n_sw_fp8 = sum(1 for r in sw_fp8 if (r["best"] or {}).get("SWAP_AB"))
    n_sw_int4 = sum(1 for r in sw_int4 if (r["best"] or {}).get("SWAP_AB"))
    # Call 6's INT4 winners: SWAP_AB, and which run the plane kernel.
    i6 = [r for r in int4 if r["call"] == 6]
    n_sw6 = sum(1 for r in i6 if (r["best"] or {}).get("SWAP_AB"))
    # INT4 rows not re-tuned in call 6 whose config the plane kernel now takes (timed before it).
    old_planes = [
        f"{r['item']['n']}x{r['item']['k']} M={r['item']['m']}"
        for r in int4
        if r["call"] != 6 and r["best"] and uses_planes(KernelConfig.from_dict(r["best"]), "awq")
    ]
    n_pl6 = sum(
        1 for r in i6 if r["best"] and uses_planes(KernelConfig.from_dict(r["best"]), "awq")
    )
    ab = small_m_summary(small, args.configs)
    m12 = m1_vs_m2(span[4])

    def rng(xs: list[float], fmt: str = ".2f") -> str:
        return f"{min(xs):{fmt}}-{max(xs):{fmt}}" if xs else "-"

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

    stats = {
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

    def tuned_steps(log: str) -> dict[str, tuple[int, int, float]]:
        """`tuned KIND TPn` lines: (items, evaluations, wall s)."""
        return {
            f"{m.group(1)} TP{m.group(2)}": (int(m.group(3)), int(m.group(4)), float(m.group(5)))
            for m in re.finditer(
                r"tuned (\w+) TP(\d+): (\d+)/\d+ items, (\d+) evaluations, ([\d.]+)s", log
            )
        }

    def precompiles(log: str) -> dict[str, tuple[int, float]]:
        return {
            m.group(1): (int(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"precompile (\w+): (\d+) ok, \d+ failed, wall ([\d.]+)s", log)
        }

    tune4, tune6 = tuned_steps(log4), tuned_steps(log6)
    pre4, pre6 = precompiles(log4), precompiles(log6)
    polish4 = re.search(r"polish: .*", log4)
    polish6 = re.search(r"polish: .*", log6)
    compare4 = int(seconds(r"compare: (\d+) items", log4)) if "compare:" in log4 else 0
    compare6 = int(seconds(r"compare: (\d+) items", log6)) if "compare:" in log6 else 0
    gpu_tests = re.search(r"(\d+) passed", pytest_log)
    prov = env["fp8"]
    src_sha = {k: kernel_source_sha256(k) for k in ("fp8", "int4")}
    fingerprints = {k: env[k]["kernel_sha256"] == src_sha[k] for k in src_sha}
    # The shipped sidecars' fingerprints against the source (what test_shim.py checks).
    side_sha = {
        (q := json.loads(f.read_text()))["kernel"]: q["kernel_sha256"]
        for f in args.configs.glob("*/*" + PROVENANCE_SUFFIX)
    }
    sides_ok = all(v == src_sha.get(k) for k, v in side_sha.items())

    L: list[str] = []
    w = L.append
    w("# Triton GEMM kernel tuning on one NVIDIA H200: Qwen3.8-27B, FP8 W8A8 block and INT4 W4A16")
    w("")
    w(
        f"Machine: {prov['gpu_name']} ({prov['sm_count']} SMs, {prov['l2_bytes'] // 2**20} MiB L2), "
        f"driver {prov['driver']}, CUDA {prov['cuda']}, torch {prov['torch']}, Triton "
        f"{prov['triton']}. Eight device calls: (1) a full run (precompile, search of all 400 "
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
        "re-tuned and compared but not shipped ([Call 8](#call-8-one-multiply-add-per-rescale-"
        "experiment-not-shipped)). The tables below hold call 7's "
        f"rows for {'/'.join(k.upper() for k in kinds6)} at M <= {m6_max} ({n6} items), call 4's for the other items with M <= {m4_max} ({n4}) "
        "and call 3's for the others. Generated by `benchmarks/kernels_report.py` from `reports/kernels/data/`; "
        "the tuned files are in `kernels_tuning/configs/` (SGLang and vLLM names for FP8, our "
        "own names for FP8 with split-K / SWAP_AB and for INT4; see "
        "`kernels_tuning/configs/README.md`)."
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
        f"in one call (INT4 M <= {m6_max}: call 7; FP8 M <= {m4_max}: call 4; above: call 3); a "
        "figure over several M may combine rows of two calls."
    )
    w("")
    w("| goal | target | measured | met |")
    w("| --- | --- | --- | --- |")
    w(
        f"| FP8 tuned vs SGLang default (BM64 BN128 BK128 G32 w4 s3), M <= 128, geomean | >= 1.5x | "
        f"engine files (no split-K, no SWAP_AB): **{g1_eng:.2f}x** (min {g1_min:.2f}x); our own "
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
    w(
        f"| FP8 M >= 1024 | >= 700 TFLOP/s | median {sorted(tf)[len(tf) // 2]:.0f}, min "
        f"{min(tf):.0f}, max {max(tf):.0f} TFLOP/s; {n700}/{len(tf)} (shape, M) at >= 700"
        + (
            f" (call 8, a kernel change not shipped: median {x8['tf_med']:.0f}, "
            f"{x8['n700']}/{x8['n_big']} at >= 700; see [Call 8](#call-8-one-multiply-add-per-"
            "rescale-experiment-not-shipped))"
            if x8
            else ""
        )
        + f" | {'yes' if n700 == len(tf) else 'partly' if n700 else 'no'} |"
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
        + f" | {'yes' if pre_fp8 + tune['fp8 TP1'] <= 1200 and pre_int4 + tune['int4 TP1'] <= 1200 else 'no'} |"
    )
    n_bad = len(gate["unchecked"])
    w(
        f"| Every shipped config passed the correctness gate | all | {gate['entries'] - n_bad}/"
        f"{gate['entries']} (every (file, M) entry of the {gate['files']} files in "
        f"`kernels_tuning/configs/`, {gate['swapped']} of them SWAP_AB, {gate['split']} "
        f"split-K and {gate['planes']} INT4 on the plane kernel, has a passing gated evaluation of that item on record, after the item's last "
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
        w(f"## SWAP_AB at decode sizes (call 5, M = {', '.join(map(str, (fa or ia)['ms']))})")
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
            f"{n_sw6}/{len(i6)} and the plane kernel for {n_pl6}/{len(i6)}. Per (shape, M) "
            "rows: `data/small_m.log`."
        )
    w("")
    w("## FP8 W8A8 block-wise, per shape and M (microseconds, bf16 output)")
    w("")
    w(
        "`tuned`: the engine-file config (no split-K, no SWAP_AB); `own`: our own file's config "
        "(split-K and SWAP_AB allowed) where it differs; `default`: SGLang's fallback; `cuBLAS`: "
        "`torch._scaled_mm` per-tensor FP8; `bf16`: `torch.matmul` on bf16 weights. Rate: TB/s "
        "(all bytes moved once) for M <= 64, TFLOP/s above, of the faster of tuned/own. Config: "
        "BM/BN/BK, GROUP_SIZE_M, warps, stages, `skN` SPLIT_K, `swap` SWAP_AB."
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
        f"`tuned`: our kernel, tuned (split-K and SWAP_AB allowed; M <= {m6_max}: tuned in call 6 and timed in call 7, with "
        "the plane kernel available); `default`: our kernel's "
        "fallback (16/64/128 w4 s4); `ours@vLLM`: our kernel with vLLM's values (32/32/32 "
        "split-K 8, bf16); `vLLM`: vLLM's AWQ-Triton algorithm with its defaults (fp16, zeroed "
        "[8,M,N] buffer + sum; `kernels_tuning/kernels/vllm_awq_like.py`); `bf16`: "
        "`torch.matmul` on the dequantized weights. Rate: TB/s of all bytes (int4 weights, "
        "scales, zeros, activations, output) for M <= 64, TFLOP/s above. Config: as for FP8; "
        "`planes`: `int4_w4a16.w4a16_matmul` runs it on the PTX plane kernel "
        "(`int4_awq_planes.uses_planes`: AWQ, BM 16, BN >= 128, no SWAP_AB); the other "
        "configs, the default and ours@vLLM run the main kernel."
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
    for key, s in tune.items():
        w(f"| search {key}, 100 items | {s:.1f} | {evals[key]} |")
    w("")
    w(
        f"Second call (re-tune of the {4 * 30} items with M <= 16 after the timing fix): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in retune.items())
        + "."
    )
    if polish_line:
        w(f"Third call, neighbour cross-check (`runner.polish`): `{polish_line.group(0)}`.")
    w("")
    later = {
        4: (
            "Fourth",
            f"re-tune of the {len(retuned[4])} items with M <= {m4_max}, SWAP_AB in the space; "
            "the cache of calls 1-3 as the start",
            tune4,
            pre4,
            polish4,
            compare4,
        ),
        6: (
            "Sixth",
            f"re-tune of the {len(retuned[6])} {'/'.join(k.upper() for k in kinds6)} items with "
            f"M <= {m6_max} with the PTX plane kernel in place; the cache of calls 1-4 as the "
            "start",
            tune6,
            pre6,
            polish6,
            compare6,
        ),
    }
    for call, (nth, what, tune_c, pre_c, polish_c, compare_c) in later.items():
        if not tune_c:
            continue
        m_max = m4_max if call == 4 else m6_max
        w(
            f"{nth} call ({what}, the re-tuned items' earlier evaluations and results set aside "
            "by a `retune` record):"
        )
        w("")
        w("| step | wall s | evaluations |")
        w("| --- | --- | --- |")
        for kd, (nb, wall) in pre_c.items():
            w(
                f"| precompile {kd.upper()} ({nb} binaries, BM <= {max(16, m_max)}) | {wall:.1f} | - |"
            )
        for key, (ni, ne, wall) in tune_c.items():
            w(f"| search {key}, {ni} items | {wall:.1f} | {ne} |")
        if polish_c:
            m = re.search(
                r"(\d+) items cross-checked, (\d+) timings, ([\d.]+)s", polish_c.group(0)
            )
            if m:
                w(
                    f"| cross-check (`runner.polish`), {m.group(1)} items | {m.group(3)} | "
                    f"{m.group(2)} |"
                )
        w("")
        w(f"Comparison: {compare_c} items re-measured.")
        w("")
    w(
        f"Evaluations on record: {n_eval} ("
        + ", ".join(f"{n} in call {c}" for c, n in n_eval_call.items())
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
                "takes, so those rows and files still describe what runs"
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
        )
    )
    if x8:
        L.extend(CALL8.format(**x8).rstrip("\n").split("\n"))
        w("")
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


def call8_stats(d8: Path, shipped_fp8: list[dict[str, Any]]) -> dict[str, Any]:
    """Call 8: the FP8 kernel with the tile's weight scale folded into the token scales
    (call8/bs_scalar.patch), re-tuned and compared; its rows against the shipped rows of the
    same items. Empty when the folder is absent."""
    if not (d8 / "compare.jsonl").exists():
        return {}
    new = {json.dumps(r["item"], sort_keys=True): r for r in load_jsonl(d8 / "compare.jsonl")}
    old = {json.dumps(r["item"], sort_keys=True): r for r in shipped_fp8}
    pairs = [(old[k], r) for k, r in new.items() if k in old]
    missing = sorted(
        (r["item"]["n"], r["item"]["k"], r["item"]["m"]) for k, r in old.items() if k not in new
    )

    def best(r: dict[str, Any]) -> float:
        return min(v for kk, v in r["times_us"].items() if kk.startswith("tuned") and v)

    def bucket(lo: int, hi: int, key: str | None) -> str:
        xs = [
            (o["times_us"][key] / n["times_us"][key]) if key else best(o) / best(n)
            for o, n in pairs
            if lo <= n["item"]["m"] <= hi
        ]
        return f"{gm(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f}, {len(xs)} items)" if xs else "-"

    big = [n for _, n in pairs if n["item"]["m"] >= 1024]
    tfs = sorted(n["flops"] / best(n) / 1e6 for n in big)
    by_shape: dict[tuple[int, int], list[int]] = defaultdict(list)
    for n, k, m in missing:
        by_shape[(n, k)].append(m)
    log = (d8 / "progress.log").read_text()
    gpu = re.search(r"(\d+) passed", (d8 / "pytest-gpu.log").read_text())
    return {
        "n_items": len(pairs),
        "n_missing": len(missing),
        "missing": "; ".join(
            f"{n}x{k} M = {', '.join(map(str, ms)) if len(ms) < 20 else 'all 20'}"
            for (n, k), ms in sorted(by_shape.items())
        ),
        "def_small": bucket(1, 64, "default"),
        "def_mid": bucket(96, 512, "default"),
        "def_big": bucket(1024, 1 << 30, "default"),
        "tun_small": bucket(1, 64, None),
        "tun_mid": bucket(96, 512, None),
        "tun_big": bucket(1024, 1 << 30, None),
        "tf_med": tfs[len(tfs) // 2] if tfs else 0.0,
        "tf_rng": f"{tfs[0]:.0f}-{tfs[-1]:.0f}" if tfs else "-",
        "n700": sum(1 for x in tfs if x >= 700),
        "n_big": len(tfs),
        "evals": sum(int(x) for x in re.findall(r"items, (\d+) evaluations", log)),
        "gpu_tests": gpu.group(1) if gpu else "?",
    }


CALL8 = """## Call 8: one multiply-add per rescale (experiment, not shipped)

The FP8 kernels rescale the accumulator after every K tile, and that waits for the tile's MMA,
so its length is exposed on every K tile. SGLang's and vLLM's `_w8a8_block_fp8_matmul` (and our
kernel) do it as `acc += dot(a, b) * a_s[:, None] * b_s[None, :]`: two multiplies and an add
per accumulator element. With BLOCK_SIZE_N dividing the 128-column weight block the tile's
weight scale is one number, so it can be folded into the token scales: `acc += dot(a, b) *
(a_s * b_s)[:, None]`, one multiply-add (`data/call8/bs_scalar.patch`). Call 8 re-tuned FP8 with
that kernel ({evals} evaluations) and compared {n_items} of the 200 items before the session's
device time ran out ({n_missing} TP2 items not reached: {missing}); `pytest -m gpu` passed
({gpu_tests}). Shipped time / call 8 time on the same items (geomean, range):

| M | same default config (kernel effect) | each call's tuned config |
| --- | --- | --- |
| 1-64 | {def_small} | {tun_small} |
| 96-512 | {def_mid} | {tun_mid} |
| >= 1024 | {def_big} | {tun_big} |

At M >= 1024 the patched kernel's tuned configs run {tf_rng} TFLOP/s, median {tf_med:.0f},
{n700}/{n_big} (shape, M) at >= 700 (the goal). Not shipped: the engine files are read by
SGLang's and vLLM's kernels, which keep the two-multiply rescale, so configs must be tuned on a
kernel that rescales like theirs; and {n_missing} items were not re-tuned. To ship it: add it to
our kernel as an own-file option (like SPLIT_K), re-tune those items (one device call), and
offer the one-line change to SGLang and vLLM, whose files would then be re-tuned with it.
"""


METHOD = """## Method

- **Kernels** (`kernels_tuning/kernels/`): our own Triton kernels. FP8 follows the contract of
  SGLang's `w8a8_block_fp8_matmul` (A fp8 [M,K] with per-token 1x128 scales, B fp8 [N,K] with
  [128,128] block scales, one scale pair per K tile, bf16 out) plus an in-kernel split-K (partials
  in an fp32 workspace, the last-arriving program of a tile reduces them in fixed order and resets
  its counter: one launch). INT4 W4A16 reads AWQ (and GPTQ) packing, dequantizes by OR-ing the
  nibble into the mantissa of 128.0 (no int->float convert), fp32 accumulation, same split-K.
  M, GROUP_SIZE_M and SPLIT_K are runtime arguments: one binary per (BM, BN, BK, warps, stages,
  SWAP_AB). SWAP_AB (a constexpr, in our own files only) computes the transposed tile
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
- **Space**: SGLang's grid (BM 16-256, BN 32-256, BK 64/128/256, G 1/16/32/64, warps 4/8,
  stages 2-5) plus SPLIT_K 1-16 and SWAP_AB 0/1, filtered before any compile: BK divides the
  128 group (removes BK 256), shared memory (modelled on 28 sm_90 compiles, wgmma keeps `stages`
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
  every candidate twice, interleaved, and keeps the faster median.
- **Search**: Optuna TPE (multivariate, ordinal indices) per (shape, M), seeded with the engine
  default and the winners of the neighbouring M of the same shape and of other shapes at the same
  M, then a +-1-step hill climb; budget 10% of the space, clamped to 8..48 evaluations
  (`TuneParams`). FP8 first searches the engine space (no split-K, no SWAP_AB: what goes into the
  SGLang/vLLM files), then tries split-K and SWAP_AB around that winner for our own file (10
  more evaluations, 10 more where swapped configs exist). INT4 searches SWAP_AB as part of its
  space.
- **Six calls.** In the first run, the first evaluations after each new shape's weights were
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
  so the INT4 sidecars carry the final source's fingerprint; its rows replace call 6's in the
  tables. Figures in [Tuning cost](#tuning-cost). The
  exhaustive comparison is from the first run.
- **Provenance**: each file has a sidecar with GPU, SM count, driver, CUDA, torch, Triton, the
  kernel fingerprint (sha256 of the kernel modules' syntax tree without docstrings, so
  reformatting does not change it) and per-M times; `kernels_tuning.output.load_config_file`
  warns when they differ from the current machine, and a CPU test fails when the shipped
  sidecars no longer match the kernel source (`tests/kernels_tuning/test_shim.py`). The
  fingerprints recorded by call 4 (FP8 {fp8_sha}...) and call 7 (INT4 {int4_sha}...):
  {sha_match}. Calls 1-7 used the same machine type, driver, CUDA, torch and Triton.
- **GPU tests**: `tests/kernels_tuning/test_gpu.py` (bf16 correctness of both kernels and both
  packings incl. split-K, SWAP_AB and the plane kernel, back-to-back split-K launches in one
  graph, timing stability, the gate rejecting a wrong kernel): {gpu_tests} passed on the H200
  in the seventh call (`pytest -m gpu tests/kernels_tuning`, `data/pytest-gpu.log`).
"""

MISS_FP8_SMALL = """- **FP8 at M <= 16 is {own_cub}x the time of cuBLAS per-tensor FP8 with our own files
  ({eng_cub}x with the engine files, which can use neither split-K nor SWAP_AB), and reaches
  {tb_own} TB/s against cuBLAS's {tb_cub}.** The gap grows as the weights shrink (own files,
  worst over M <= 16):
  - at >= 3.2 TB/s: {g_hit};
  - within 10% of 3.2 TB/s: {g_near};
  - further off: {g_far}.

  On the small shapes fixed per-launch costs and partial last waves weigh most (cuBLAS slows
  down there too), and per-tensor FP8 skips the per-tile rescale (`acc += dot * a_s * b_s`)
  that block scaling needs.
  The engine-file configs go down to {tb_eng_lo:.2f} TB/s ({eng_worst}). SWAP_AB (call 4) helps
  a little: in the A/B of call 5 the swapped kernel is faster than the plain one on
  {fa_faster}/{fa_rows} (shape, M) (swap/plain geomean {fa_sp_gm:.2f}, range {fa_sp}), which
  takes the geomean time vs cuBLAS from {fa_plain:.2f}x to {fa_swap:.2f}x; the search put it in
  {n_sw_fp8}/{n_fp8_4} of our FP8 files' entries at M <= {m4_max}. That wgmma on the weight rows
  gains this little suggests the MMA form was not what held these shapes back. A plain
  SPLIT_K=1 config runs slower at M=1 than at M=2 (call 4, time at M=1 / time at M=2:
  {m12_plain}); swapped configs do not ({m12_swap}); cause not established. Not tried:
  stream-K.
"""

MISS_FP8_DEFAULT = """- **FP8 tuned vs default at M <= 128 is {g1_eng:.2f}x for the engine files**, {short:.0f}%
  short of 1.5x; our own files reach {g1_own:.2f}x. At large M the default is already near the
  best tile: {n_slow} items (M = {slow_ms}) came out {slow_pct}% slower than the default in the
  comparison (the default is a seed of every search, so it lost narrowly in the search).
"""

MISS_FP8_BIG = """- **FP8 at M >= 1024 runs {tf} TFLOP/s**; {n700}/{n_big} (shape, M) reach 700.
  cuBLAS per-tensor FP8 runs {cub_tf} and bf16 cuBLAS {bf_tf}.
  The rescale after every K tile waits for each tile's MMA, so its length is exposed on every
  K tile: call 8 shortened it to one multiply-add and passed 700 on most items, in a kernel the
  engine files cannot use (see Call 8). A per-tensor or DeepGEMM-style kernel goes further.
"""

MISS_INT4_BF16 = """- **INT4 W4A16 at M <= 16 runs at {i_x}x the speed of bf16 `torch.matmul` (geomean
  {i_gm:.2f}x), not 2x** ({itb} TB/s of all bytes). These rows are call 7's (call 6's configs), with the PTX plane
  kernel ({n_pl6}/{n6} re-tuned winners at M <= {m6_max} run it, {n_sw6} use SWAP_AB); on the
  same {n_gain} items its search winners are {i_gain}x faster than call 4's (geomean
  {i_gain_gm:.2f}x). Per shape (M <= 16):
  - worst M at >= 1.5x: {i_hi};
  - worst M below 1.5x: {i_lo}.

  A least-squares line through the M <= 16 rows puts our time at {i_a:.1f} us + bytes /
  {i_bw:.1f} TB/s, bf16 `torch.matmul`'s at {b_a:.1f} us + bytes / {b_bw:.1f} TB/s (its bytes are
  4x ours). The plane kernel pays {fix_ratio:.1f}x bf16's fixed cost per call and streams at
  {bw_ratio:.0%} of its rate, so the small shapes ({i_lo_us} us kernels), where the fixed part
  weighs most, miss by most: 2x at {i_small} would mean {i_need:.1f} us a call, against bf16's own
  fixed cost of {b_a:.1f} us. The N = 5120 shapes have 5120 / {i_bn_max} = {n_tiles} column
  tiles for {sms} SMs and their winners use
  split-K {sk_narrow} (the wider shapes: {sk_wide}), whose fp32 partials and final reduction
  add traffic and a tail. All {n_i_best} winners at M <= 16 use BN {i_bn} (the space's largest:
  {grid_bn}). Plausible next steps, none measured: wider tiles (BN 512: more weight
  bytes in flight per program, fewer programs), a persistent or stream-K schedule (one wave,
  K split without the workspace round trip), and BM 32 in the plane kernel: `uses_planes`
  needs BM 16, so at M = {i_mid_ms} the winners run two 16-token tiles that each dequantize
  the whole weight ({i_mid_vs16}x the M <= 16 time, {i_mid_x}x bf16). GPTQ packing still runs
  the main kernel (the plane kernel is AWQ only). At M >= 1024 (call 3, main kernel) it runs
  {itf} TFLOP/s against bf16 cuBLAS's {ibf} (vLLM switches to dequantize + cuBLAS at >= 256
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


if __name__ == "__main__":
    main()
