"""Render reports/kernels/README.md from the data of the H200 runs (reports/kernels/data/).

    .venv/bin/python benchmarks/kernels_report.py [--data reports/kernels/data]

No GPU needed: it reads compare.jsonl (side-by-side timings), exhaustive.jsonl (budgeted vs
exhaustive), cache.jsonl.gz (every evaluation), env.json and the progress logs, checks that every
shipped config passed the correctness gate, and computes the issue's goal figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels_tuning.space import KernelConfig  # noqa: E402

TP1 = {(14336, 5120), (5120, 6144), (16384, 5120), (34816, 5120), (5120, 17408)}


def gm(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        return [json.loads(line) for line in f if line.strip()]


def cfg_short(d: dict[str, int] | None) -> str:
    if not d:
        return "-"
    c = KernelConfig.from_dict(d)
    sk = f" sk{c.SPLIT_K}" if c.SPLIT_K > 1 else ""
    return (
        f"{c.BLOCK_SIZE_M}/{c.BLOCK_SIZE_N}/{c.BLOCK_SIZE_K} g{c.GROUP_SIZE_M} "
        f"w{c.num_warps} s{c.num_stages}{sk}"
    )


def f1(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f}" if x < 1000 else f"{x:,.0f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT / "reports/kernels/data")
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

    for r in rows:
        it = r["item"]
        r["tp"] = 1 if (it["n"], it["k"]) in TP1 else 2
    fp8 = [r for r in rows if r["item"]["kind"] == "fp8"]
    int4 = [r for r in rows if r["item"]["kind"] == "int4"]

    # ---- gate check of every shipped config -------------------------------------------------
    ok_evals: dict[str, set[KernelConfig]] = defaultdict(set)
    n_eval = n_fail = 0
    for rec in cache:
        if rec["t"] == "eval":
            n_eval += 1
            if rec.get("ok"):
                ok_evals[rec["item"]].add(KernelConfig.from_dict(rec["cfg"]))
            else:
                n_fail += 1
    latest: dict[str, dict[str, Any]] = {}
    fail_kinds: dict[str, int] = defaultdict(int)
    for rec in cache:
        if rec["t"] == "eval" and not rec.get("ok"):
            fail_kinds[str(rec.get("error", ""))[:40]] += 1
        if rec["t"] == "item":
            it = rec["item"]
            key = f"{it['kind']}:N={it['n']},K={it['k']},M={it['m']}" + (
                f",packing={it['packing']}" if it["kind"] == "int4" else ""
            )
            latest[key] = rec  # the last record of an item is the one the files hold
    shipped = unchecked = 0
    for key, rec in latest.items():
        for c in {
            json.dumps(c, sort_keys=True) for c in (rec.get("best"), rec.get("engine_best")) if c
        }:
            shipped += 1
            if KernelConfig.from_dict(json.loads(c)) not in ok_evals[key]:
                unchecked += 1

    # ---- goal figures -----------------------------------------------------------------------
    def t(r: dict[str, Any], name: str) -> float:
        return float(r["times_us"][name])

    def topt(r: dict[str, Any], name: str) -> float | None:
        v = r["times_us"].get(name)
        return float(v) if v else None

    def ours_fp8(r: dict[str, Any]) -> float:
        return min(x for x in (topt(r, "tuned"), topt(r, "tuned_splitk")) if x is not None)

    small = [r for r in fp8 if r["item"]["m"] <= 128]
    g1_eng = gm([t(r, "default") / t(r, "tuned") for r in small])
    g1_own = gm([t(r, "default") / ours_fp8(r) for r in small])
    g1_min = min(t(r, "default") / t(r, "tuned") for r in small)
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
    big = [r for r in fp8 if r["item"]["m"] >= 1024]
    tf = [r["flops"] / t(r, "tuned") / 1e6 for r in big]
    tf_cub = [r["flops"] / t(r, "cublas_fp8_per_tensor") / 1e6 for r in big]
    tf_bf16 = [r["flops"] / t(r, "bf16_matmul") / 1e6 for r in big]
    slower = [
        t(r, "tuned") / t(r, "default") for r in fp8 if t(r, "tuned") > 1.02 * t(r, "default")
    ]
    i_tiny = [r for r in int4 if r["item"]["m"] <= 16]
    g4 = [t(r, "bf16_matmul") / t(r, "tuned") for r in i_tiny]
    g5 = [t(r, "vllm_awq_defaults") / t(r, "tuned") for r in i_tiny]
    g5_all = [t(r, "vllm_awq_defaults") / t(r, "tuned") for r in int4]
    below15 = [r for r in int4 if t(r, "vllm_awq_defaults") / t(r, "tuned") < 1.5]
    i_tb = [r["bytes"] / t(r, "tuned") / 1e6 for r in i_tiny]
    i_big = [r for r in int4 if r["item"]["m"] >= 1024]
    i_tf = [r["flops"] / t(r, "tuned") / 1e6 for r in i_big]
    i_tf_bf16 = [r["flops"] / t(r, "bf16_matmul") / 1e6 for r in i_big]
    tb_own = [r["bytes"] / ours_fp8(r) / 1e6 for r in tiny]
    tb_eng = [r["bytes"] / t(r, "tuned") / 1e6 for r in tiny]
    tb_cub = [r["bytes"] / t(r, "cublas_fp8_per_tensor") / 1e6 for r in tiny]
    rat_own = [ours_fp8(r) / t(r, "cublas_fp8_per_tensor") for r in tiny]
    rat_eng = [t(r, "tuned") / t(r, "cublas_fp8_per_tensor") for r in tiny]
    ratios = [e["ratio"] for e in exh if e.get("ratio")]
    ev_b = sum(e["budgeted_evals"] for e in exh)
    ev_e = sum(e["exhaustive_evals"] for e in exh)
    pair_pct = [100 * e["budgeted_evals"] / e["exhaustive_evals"] for e in exh]
    stats = {
        "own_cub_lo": min(rat_own),
        "own_cub_hi": max(rat_own),
        "eng_cub_lo": min(rat_eng),
        "eng_cub_hi": max(rat_eng),
        "tb_own_lo": min(tb_own),
        "tb_own_hi": max(tb_own),
        "tb_eng_lo": min(tb_eng),
        "tb_cub_lo": min(tb_cub),
        "tb_cub_hi": max(tb_cub),
        "g1_eng": g1_eng,
        "g1_own": g1_own,
        "short": (1.5 / g1_eng - 1) * 100,
        "n_slow": len(slower),
        "slow_hi": (max(slower) - 1) * 100 if slower else 0.0,
        "tf_lo": min(tf),
        "tf_hi": max(tf),
        "n700": sum(1 for x in tf if x >= 700),
        "n_big": len(tf),
        "cub_lo": min(tf_cub),
        "cub_hi": max(tf_cub),
        "bf_lo": min(tf_bf16),
        "bf_hi": max(tf_bf16),
        "i_lo": min(g4),
        "i_hi": max(g4),
        "itb_lo": min(i_tb),
        "itb_hi": max(i_tb),
        "itf_lo": min(i_tf),
        "itf_hi": max(i_tf),
        "ibf_lo": min(i_tf_bf16),
        "ibf_hi": max(i_tf_bf16),
        "v_lo": min(g5),
        "v_gm": gm(g5),
        "va_lo": min(g5_all),
        "va_hi": max(g5_all),
        "n_below": len(below15),
        "below": ", ".join(
            f"{r['item']['n']}x{r['item']['k']} M={r['item']['m']}" for r in below15
        ),
        "r_lo": min(ratios),
        "r_hi": max(ratios),
        "pct": 100 * ev_b / ev_e,
        "pct_hi": max(pair_pct),
    }

    def seconds(pattern: str, text: str) -> float:
        m = re.search(pattern, text)
        return float(m.group(1)) if m else float("nan")

    pre_fp8 = seconds(r"precompile fp8: .*wall ([\d.]+)s", log1)
    pre_int4 = seconds(r"precompile int4: .*wall ([\d.]+)s", log1)
    tune = {
        key: seconds(rf"tuned {key}: .*evaluations, ([\d.]+)s", log1)
        for key in ("fp8 TP1", "int4 TP1", "fp8 TP2", "int4 TP2")
    }
    evals = {key: int(seconds(rf"tuned {key}: .*items, (\d+) evaluations", log1)) for key in tune}
    retune = {key: seconds(rf"tuned {key}: .*evaluations, ([\d.]+)s", log2) for key in tune}
    polish_line = re.search(r"polish: .*", log3)
    prov = env["fp8"]

    L: list[str] = []
    w = L.append
    w("# Triton GEMM kernel tuning on one NVIDIA H200: Qwen3.8-27B, FP8 W8A8 block and INT4 W4A16")
    w("")
    w(
        f"Machine: {prov['gpu_name']} ({prov['sm_count']} SMs, {prov['l2_bytes'] // 2**20} MiB L2), "
        f"driver {prov['driver']}, CUDA {prov['cuda']}, torch {prov['torch']}, Triton "
        f"{prov['triton']}. Three device calls: a full run (precompile, search of all 400 items, "
        "comparison, budgeted vs exhaustive), a second call that re-tuned the 120 items with "
        "M <= 16 after a timing fix, and a third that cross-checked every item against its "
        "neighbours' winners (`runner.polish`) and re-measured the comparison table, which is "
        "what the tables below show (see Method). Generated by `benchmarks/kernels_report.py` "
        "from `reports/kernels/data/`; the tuned files are in `kernels_tuning/configs/` (SGLang "
        "and vLLM names for FP8, our own names for split-K FP8 and INT4; see "
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
    w("| goal | target | measured | met |")
    w("| --- | --- | --- | --- |")
    w(
        f"| FP8 tuned vs SGLang default (BM64 BN128 BK128 G32 w4 s3), M <= 128, geomean | >= 1.5x | "
        f"engine files (no split-K): **{g1_eng:.2f}x** (min {g1_min:.2f}x); our split-K files: "
        f"**{g1_own:.2f}x** | engine files: no ({(1.5 / g1_eng - 1) * 100:.0f}% short); own files: "
        f"{'yes' if g1_own >= 1.5 else 'no'} |"
    )
    worst_tb = min(x[4] for x in g2_rows)
    worst_rat = max(x[7] for x in g2_rows)
    n_tb = sum(1 for x in g2_rows if x[4] >= 3.2)
    n_rat = sum(1 for x in g2_rows if x[7] <= 1.1)
    w(
        f"| FP8 M <= 16: bandwidth | >= 3.2 TB/s on every shape | {n_tb}/{len(g2_rows)} shapes; "
        f"worst {worst_tb:.2f} TB/s (own files), range in the table below | no |"
    )
    w(
        f"| FP8 M <= 16: vs cuBLAS per-tensor FP8 | within 1.1x on every shape | {n_rat}/"
        f"{len(g2_rows)} shapes; worst {worst_rat:.2f}x (own files) | no |"
    )
    n700 = sum(1 for x in tf if x >= 700)
    w(
        f"| FP8 M >= 1024 | >= 700 TFLOP/s | median {sorted(tf)[len(tf) // 2]:.0f}, min "
        f"{min(tf):.0f}, max {max(tf):.0f} TFLOP/s; {n700}/{len(tf)} (shape, M) at >= 700 | "
        f"{'yes' if n700 == len(tf) else 'partly'} |"
    )
    w(
        f"| INT4 M <= 16 vs bf16 `torch.matmul` | >= 2x | geomean **{gm(g4):.2f}x** (min "
        f"{min(g4):.2f}x, max {max(g4):.2f}x) | no |"
    )
    w(
        f"| INT4 vs vLLM AWQ-Triton defaults (32/32/32, split-K 8) | >= 1.5x | M <= 16: geomean "
        f"**{gm(g5):.2f}x** (min {min(g5):.2f}x); all M: geomean {gm(g5_all):.2f}x (min "
        f"{min(g5_all):.2f}x) | {'yes at M <= 16' if min(g5) >= 1.5 else 'geomean only'}"
        f"{'; not on every larger M' if min(g5_all) < 1.5 else ''} |"
    )
    w(
        f"| Budgeted vs exhaustive | within 2% on >= 8 pairs, <= 10% of evaluations | "
        f"{len(ratios)} pairs: budgeted/exhaustive time {min(ratios):.3f} to {max(ratios):.3f}; "
        f"{ev_b} vs {ev_e} evaluations ({100 * ev_b / ev_e:.1f}% overall, per pair "
        f"{min(e['budgeted_evals'] / e['exhaustive_evals'] for e in exh) * 100:.1f}% to "
        f"{max(e['budgeted_evals'] / e['exhaustive_evals'] for e in exh) * 100:.1f}%) | "
        f"{'yes' if max(ratios) <= 1.02 else 'no'}"
        f"{' (one pair above 10% of its own space)' if max(pair_pct) > 10 else ''} |"
    )
    w(
        f"| All TP1 shapes x 20 batch sizes, one H200 | <= 20 min | FP8: {pre_fp8 + tune['fp8 TP1']:.0f}"
        f" s (precompile {pre_fp8:.0f} s + search {tune['fp8 TP1']:.0f} s); INT4: "
        f"{pre_int4 + tune['int4 TP1']:.0f} s | yes |"
    )
    w(
        f"| Every shipped config passed the correctness gate | all | {shipped - unchecked}/{shipped} "
        f"(distinct engine-file and own-file winners of the 400 items, each with a passing gated evaluation of that item on record) | "
        f"{'yes' if unchecked == 0 else 'no'} |"
    )
    w("")
    w("Where goals are missed, by how much and why is in [Misses](#misses).")
    w("")
    w("## FP8 at M <= 16, per shape (worst over M = 1, 2, 3, 4, 8, 16)")
    w("")
    w(
        "| N x K | TP | TB/s engine file | TB/s own (split-K) file | TB/s cuBLAS | time vs cuBLAS, "
        "engine | time vs cuBLAS, own |"
    )
    w("| --- | --- | --- | --- | --- | --- | --- |")
    for n, k, tp, tbe, tbo, cub, re_, ro in g2_rows:
        w(f"| {n}x{k} | {tp} | {tbe:.2f} | {tbo:.2f} | {cub:.2f} | {re_:.2f}x | {ro:.2f}x |")
    w("")
    w("## FP8 W8A8 block-wise, per shape and M (microseconds, bf16 output)")
    w("")
    w(
        "`tuned`: the engine-file config (no split-K); `own`: our split-K file where it differs; "
        "`default`: SGLang's fallback; `cuBLAS`: `torch._scaled_mm` per-tensor FP8; `bf16`: "
        "`torch.matmul` on bf16 weights. Rate: TB/s (all bytes moved once) for M <= 64, TFLOP/s "
        "above, of the faster of tuned/own."
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
        "`tuned`: our kernel, tuned (split-K allowed); `default`: our kernel's fallback "
        "(16/64/128 w4 s4); `ours@vLLM`: our kernel with vLLM's values (32/32/32 split-K 8, bf16); "
        "`vLLM`: vLLM's AWQ-Triton algorithm with its defaults (fp16, zeroed [8,M,N] buffer + sum; "
        "`kernels_tuning/kernels/vllm_awq_like.py`); `bf16`: `torch.matmul` on the dequantized "
        "weights. Rate: TB/s of all bytes (int4 weights, scales, zeros, activations, output) for "
        "M <= 64, TFLOP/s above."
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
                    f"{rate} | {cfg_short(r['best'])} |"
                )
    w("")
    w("## Budgeted vs exhaustive")
    w("")
    w(
        "Stratified sample (one pair per M bucket <= 16, 24-128, 256-1024, >= 1536, per kind, "
        "fixed seed). The exhaustive search times every config of the same pre-filtered space; "
        "then the two winners are re-timed side by side, interleaved, 3 rounds, median. Ratio = "
        "budgeted winner's time / exhaustive winner's time (below 1: the exhaustive pick was a "
        "noise winner the budgeted one beats on re-timing)."
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
    w(f"| precompile FP8 ({286} binaries, 14 processes) | {pre_fp8:.1f} | - |")
    w(
        f"| precompile INT4 ({275} binaries, in the background while FP8 TP1 is tuned) | "
        f"{pre_int4:.1f} | - |"
    )
    for key, s in tune.items():
        w(f"| search {key}, 100 items | {s:.1f} | {evals[key]} |")
    w("")
    if polish_line:
        w(f"Third call, neighbour cross-check (`runner.polish`): `{polish_line.group(0)}`.")
        w("")
    w(
        f"Second call (re-tune of the {4 * 30} items with M <= 16 after the timing fix): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in retune.items())
        + ". "
        f"Evaluations on record: {n_eval}, "
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
    w(METHOD)
    w(MISSES.format(**stats))
    args.out.write_text("\n".join(L) + "\n")
    print(f"wrote {args.out}")


METHOD = """## Method

- **Kernels** (`kernels_tuning/kernels/`): our own Triton kernels. FP8 follows the contract of
  SGLang's `w8a8_block_fp8_matmul` (A fp8 [M,K] with per-token 1x128 scales, B fp8 [N,K] with
  [128,128] block scales, one scale pair per K tile, bf16 out) plus an in-kernel split-K (partials
  in an fp32 workspace, the last-arriving program of a tile reduces them in fixed order and resets
  its counter: one launch). INT4 W4A16 reads AWQ (and GPTQ) packing, dequantizes by OR-ing the
  nibble into the mantissa of 128.0 (no int->float convert), fp32 accumulation, same split-K.
  M, GROUP_SIZE_M and SPLIT_K are runtime arguments: one binary per (BM, BN, BK, warps, stages).
- **Space**: SGLang's grid (BM 16-256, BN 32-256, BK 64/128/256, G 1/16/32/64, warps 4/8,
  stages 2-5) plus SPLIT_K 1-16, filtered before any compile: BK divides the 128 group (removes
  BK 256), shared memory (modelled on 28 sm_90 compiles, wgmma keeps `stages` buffers), the
  accumulator must fit 128 registers per thread, BM above M rounded up to a power of two (min 16)
  is waste, GROUP_SIZE_M values equivalent at this M are duplicates, split-K only below 4 waves
  of output tiles. The engine default is always a candidate.
- **Gate**: every candidate's output (NaN-poisoned buffer) is compared with the dequantize-then-
  fp32-matmul reference: relative Frobenius error <= 5e-3 and |err| <= 1e-2 |ref| + 2e-3 rms(ref)
  element-wise; split-K candidates are checked again on the output of the timed replays.
- **Timing**: CUDA graph of back-to-back launches (about 0.4 ms per replay, at most 64), inputs
  rotated over sets totalling >= 3x the 60 MiB L2 (cold L2 for every launch), ~3 ms of warm-up
  replays, median of 5 replays; baselines through the same harness. The comparison table times
  every candidate twice, interleaved, and keeps the faster median.
- **Search**: Optuna TPE (multivariate, ordinal indices) per (shape, M), seeded with the engine
  default and the winners of the neighbouring M of the same shape and of other shapes at the same
  M, then a +-1-step hill climb; budget 10% of the space, clamped to 8..40 evaluations. FP8 first
  searches the engine space (no split-K, which is what goes into the SGLang/vLLM files), then
  tries split-K around that winner for our own file (10 more evaluations at most).
- **Three calls.** In the first run, the first evaluations after each new shape's weights were
  generated ran up to 2x slow: the H200 drops its clocks when idle, and a timing of a 10-20 us
  kernel started from that state. Within a shape the search numbers were consistent (the same
  config agreed to 1-3% across M), but the comparison table, which opens each item with the
  tuned config, was not. `bench.time_graph` now replays ~3 ms before timing; the second call
  re-tuned the 120 items with M <= 16 (the first items of each shape). Items are searched in
  increasing M, so each saw only its smaller neighbour's winner; the third call timed each item's
  winners side by side with those of both neighbouring M (`runner.polish`, 2-6 configs per item,
  fresh measurements, the fastest kept) and re-measured the whole comparison table. The
  exhaustive comparison is from the first run.
- **Provenance**: each file has a sidecar with GPU, SM count, driver, CUDA, torch, Triton, the
  kernel fingerprint (sha256 of the kernel modules' syntax tree without docstrings, so
  reformatting does not change it; the kernels are the code that ran, whose file sha256 on the
  device was dbab502a... for FP8 and 299c651c... for INT4, only reformatted since) and per-M
  times; `kernels_tuning.output.load_config_file` warns when they differ from the current
  machine, and a CPU test fails when the shipped sidecars no longer match the kernel source.
- **GPU tests**: `tests/kernels_tuning/test_gpu.py` (bf16 correctness of both kernels and both
  packings incl. split-K, 200 back-to-back split-K launches in one graph, timing stability): 35
  passed on the H200 in the first run (`data/pytest-gpu.log`).
"""

MISSES = """## Misses

- **FP8 at M <= 16 is {own_cub_lo:.2f}x to {own_cub_hi:.2f}x the time of cuBLAS per-tensor FP8
  with our split-K files ({eng_cub_lo:.2f}x to {eng_cub_hi:.2f}x with the engine files, which
  cannot use split-K), and reaches {tb_own_lo:.2f} to {tb_own_hi:.2f} TB/s against cuBLAS's
  {tb_cub_lo:.2f} to {tb_cub_hi:.2f}.** Only the large weights (gate_up 34816x5120 at M >= 3) get
  near 3.6-3.7 TB/s; the 5120-wide and TP2 shapes (8-30 MB of weights, 7-30 us per call) lose
  to fixed per-launch costs and partial last waves, and per-tensor FP8 skips the per-tile
  rescale (`acc += dot * a_s * b_s`) that block scaling needs. The engine-file configs go down to
  {tb_eng_lo:.2f} TB/s at M=1. At M=1 the same SPLIT_K=1 config runs 5-30% slower than at M=2
  (seen in the searches and the cross-check; cause not established on the device). Not tried for
  lack of device time: a swap-AB variant for M <= 16 (N on the MMA's M side), stream-K.
- **FP8 tuned vs default at M <= 128 is {g1_eng:.2f}x for the engine files**, {short:.0f}% short of
  1.5x; our split-K files reach {g1_own:.2f}x. At M >= 1024 the default is already near the best
  tile: {n_slow} large-M items came out 2-{slow_hi:.0f}% slower than the default in the
  comparison (the default is a seed of every search, so it lost narrowly in the search).
- **FP8 at M >= 1024 runs {tf_lo:.0f}-{tf_hi:.0f} TFLOP/s**; {n700}/{n_big} (shape, M) reach 700.
  cuBLAS per-tensor FP8 runs {cub_lo:.0f}-{cub_hi:.0f} and bf16 cuBLAS {bf_lo:.0f}-{bf_hi:.0f}.
  The rescale after every K tile keeps Triton's wgmma pipeline from chaining the MMAs; a
  per-tensor or DeepGEMM-style kernel is the way past this, not tuning.
- **INT4 W4A16 at M <= 16 runs at {i_lo:.2f}x to {i_hi:.2f}x the speed of bf16 `torch.matmul`,
  not 2x** ({itb_lo:.2f}-{itb_hi:.2f} TB/s of all bytes). The weights are a quarter of bf16's, but
  the kernel is bound by dequantization and the register -> shared -> MMA relayout of each
  dequantized tile. The known fix is Marlin's: dequantize two nibbles per 32-bit operation
  (AWQ's interleaved order puts columns 2p and 2p+1 in nibbles p and p+4, made for `lop3` on
  `0x000F000F | 0x43004300`) via inline PTX, and feed the MMA from registers. Not attempted:
  it needs several device iterations. At M >= 1024 it runs {itf_lo:.0f}-{itf_hi:.0f} TFLOP/s
  against bf16 cuBLAS's {ibf_lo:.0f}-{ibf_hi:.0f} (vLLM switches to dequantize + cuBLAS at
  >= 256 tokens for the same reason).
- **INT4 vs vLLM's AWQ-Triton defaults**: at M <= 16 the goal holds on every item (geomean
  {v_gm:.2f}x, min {v_lo:.2f}x). Over all M the range is {va_lo:.2f}x to {va_hi:.2f}x;
  {n_below} mid-size items stay under 1.5x: {below}.
- **Budgeted vs exhaustive** is within {r_lo:.3f}-{r_hi:.3f} on the 8 pairs with {pct:.1f}% of
  the evaluations overall; per pair up to {pct_hi:.1f}%, because the budget has a floor of 8
  evaluations and the smallest space (FP8, M <= 16) has 64 configs.
- **Not run on the GPU**: GPTQ packing is checked for correctness on the GPU (tests) but not
  tuned; the Ray executor (no ray on the device machine; tested with CPU actors); TP4/TP8.
"""


if __name__ == "__main__":
    main()
