"""Render reports/kernels/README.md from reports/kernels/data/measurements.csv.

    .venv/bin/python benchmarks/kernels_report.py            # write README.md
    .venv/bin/python benchmarks/kernels_report.py --check    # exit 1 if README.md is out of date
    .venv/bin/python benchmarks/kernels_report.py --import-run OUT --source "call 46" [--commit SHA]

No GPU needed. The dataset holds one row per entry of the shipped files (the folders
`kernels_tuning/configs/autotune/` and `sglang/<release>/`, one (file, M) each): the shipped
config, its side-by-side times against the defaults and baselines, its search figures and where
they come from. The prose is `benchmarks/kernels_report.md.in`; SGLang's rows are rendered by
`benchmarks/engine_kernels_report.py`. Both fail when a shipped entry has no row or another
config than its row.

`--import-run OUT` replaces the rows of a GPU run's items: `OUT/compare.jsonl` of
`benchmarks/kernels_gpu_run.py` (our kernels) or `OUT/compare-<release>.jsonl[.gz]` and
`OUT/summary.json` of `benchmarks/engine_kernels_gpu_run.py` (SGLang). Install the run's configs
into `kernels_tuning/configs/` first: the config, the search figures and the environment are read
from the shipped files and their provenance sidecars.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import re
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels_tuning.kernels.int4_awq_planes import uses_planes  # noqa: E402
from kernels_tuning.space import KernelConfig  # noqa: E402

DATA = ROOT / "reports/kernels/data/measurements.csv"
CONFIGS = ROOT / "kernels_tuning/configs"
# The commit whose tree still holds the probe-by-probe history (calls 1-45, E1-E5).
HISTORY = "a18def0abad79ec8f3f0d83f56097eb3bc2052a8"
COLUMNS = (
    "folder", "gpu", "kind", "tp", "projection", "n", "k", "m", "config",
    "us", "default_us", "cublas_fp8_us", "bf16_us", "vllm_awq_us", "ours_vllm_config_us",
    "previous_us", "x_default", "bytes", "flops", "rounds", "gate", "rel_err",
    "switched_to_default", "search_us", "evaluations", "space", "kernel_fingerprint", "date",
    "driver", "cuda", "torch", "triton", "source", "commit",
)  # fmt: skip
TP1 = {(14336, 5120), (5120, 6144), (16384, 5120), (34816, 5120), (5120, 17408)}
PROJECTIONS = ("gate_up_proj", "down_proj", "in_proj_qkvz", "qkv_proj", "o_proj+out_proj")
FILE_RE = re.compile(r"N=(\d+),K=(\d+),device_name=[^,]+,dtype=(fp8_w8a8|int4_w4a16)")
FLAGS = {"swap": "SWAP_AB", "fold": "FOLD_SCALES", "tma": "TMA", "atomic": "ATOMIC_REDUCE"}
# compare.jsonl's names for the times of a row, by CSV column.
TIMES = {
    "default_us": "default",
    "cublas_fp8_us": "cublas_fp8_per_tensor",
    "bf16_us": "bf16_matmul",
    "vllm_awq_us": "vllm_awq_defaults",
    "ours_vllm_config_us": "ours_vllm_config",
    "previous_us": "previous",
}


# ---- configs ---------------------------------------------------------------------------------


def cfg_short(d: dict[str, int]) -> str:
    """BM/BN/BK gG wW sS [skN] [swap] [fold] [tma] [atomic]: the dataset's config column."""
    c = KernelConfig.from_dict(d)
    s = f"{c.BLOCK_SIZE_M}/{c.BLOCK_SIZE_N}/{c.BLOCK_SIZE_K} g{c.GROUP_SIZE_M} "
    s += f"w{c.num_warps} s{c.num_stages}" + (f" sk{c.SPLIT_K}" if c.SPLIT_K > 1 else "")
    return s + "".join(f" {flag}" for flag, key in FLAGS.items() if getattr(c, key))


def parse_cfg(s: str) -> dict[str, int]:
    """The inverse of cfg_short."""
    tile, *rest = s.split()
    bm, bn, bk = (int(x) for x in tile.split("/"))
    d = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk}
    keys = {"g": "GROUP_SIZE_M", "w": "num_warps", "s": "num_stages", "sk": "SPLIT_K"}
    for tok in rest:
        if tok in FLAGS:
            d[FLAGS[tok]] = 1
        else:
            m = re.fullmatch(r"([a-z]+)(\d+)", tok)
            if m is None or m.group(1) not in keys:
                raise ValueError(f"config {s!r}: unknown part {tok!r}")
            d[keys[m.group(1)]] = int(m.group(2))
    return d


def shipped(configs: Path) -> dict[tuple[str, str, int, int, int], tuple[str, dict[str, Any]]]:
    """Every entry of the shipped files: (folder, kind, N, K, M) -> (config, its sidecar)."""
    out = {}
    for path in sorted(configs.glob("**/*.json")):
        name = FILE_RE.search(path.name)
        if name is None or path.name.endswith(".provenance.json"):
            continue
        side = path.with_name(path.name[: -len(".json")] + ".provenance.json")
        prov = json.loads(side.read_text()) if side.exists() else {}
        kind = "fp8" if name.group(3) == "fp8_w8a8" else "int4"
        folder = path.parent.relative_to(configs).as_posix()
        for m, d in json.loads(path.read_text()).items():
            key = (folder, kind, int(name.group(1)), int(name.group(2)), int(m))
            out[key] = (cfg_short(d), prov)
    return out


def mismatches(rows: list[dict[str, str]], configs: Path) -> list[str]:
    """Shipped entries without a row, rows without a shipped entry, and rows whose config is not
    the shipped one."""
    ship = shipped(configs)
    have = {key(r): r["config"] for r in rows}
    out = [f"{k}: shipped, no row" for k in sorted(set(ship) - set(have))]
    out += [f"{k}: a row, not shipped" for k in sorted(set(have) - set(ship))]
    out += [
        f"{k}: row {have[k]!r}, shipped {ship[k][0]!r}"
        for k in sorted(set(have) & set(ship))
        if have[k] != ship[k][0]
    ]
    return out


# ---- the dataset -----------------------------------------------------------------------------


def key(r: dict[str, str]) -> tuple[str, str, int, int, int]:
    return (r["folder"], r["kind"], int(r["n"]), int(r["k"]), int(r["m"]))


def load(path: Path = DATA) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def save(rows: Iterable[dict[str, str]], path: Path = DATA) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in sorted(rows, key=key):
            w.writerow(r)


def num(x: float | None, fmt: str = ".4f") -> str:
    return "" if x is None or not math.isfinite(x) else f"{x:{fmt}}"


def import_run(run: Path, configs: Path, source: str, commit: str) -> list[dict[str, str]]:
    """Dataset rows from a GPU run's comparison rows and the shipped files (see the docstring)."""
    ship = shipped(configs)
    sets: list[tuple[str, Path, list[str]]] = []
    if (run / "compare.jsonl").exists():
        sets.append(("autotune", run / "compare.jsonl", []))
    summary = (
        json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    )
    for path in sorted(run.glob("compare-*.jsonl*")):
        version = re.sub(r"\.jsonl(\.gz)?$", "", path.name)[len("compare-") :]
        sw = summary.get("releases", {}).get(version, {}).get("switched_to_default", [])
        sets.append((f"sglang/{version}", path, [json.dumps(s, sort_keys=True) for s in sw]))
    out = []
    for folder, path, switched in sets:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rt") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        for c in rows:
            it, t = c["item"], c["times_us"]
            k = (folder, it["kind"], it["n"], it["k"], it["m"])
            if k not in ship:
                sys.exit(f"{path}: {k} is in no shipped file; install the run's configs first")
            config, prov = ship[k]
            sw = json.dumps(it, sort_keys=True) in switched
            # The shipped config's name in the row: our FP8 file's own winner where it differs
            # from the engine-space one; an entry the confirmation set back ships the default.
            name = "default" if sw else "tuned"
            if folder == "autotune" and t.get("tuned_splitk"):
                name = "tuned_splitk"
            entry = prov.get("entries", {}).get(str(it["m"]), {})
            us, default = t.get(name), t.get("default")
            out.append(
                {
                    "folder": folder,
                    "gpu": prov.get("gpu_name", ""),
                    "kind": it["kind"],
                    "tp": "1" if (it["n"], it["k"]) in TP1 else "2",
                    "projection": it.get("label", ""),
                    "n": str(it["n"]),
                    "k": str(it["k"]),
                    "m": str(it["m"]),
                    "config": config,
                    "us": num(us),
                    **{col: num(t.get(name_)) for col, name_ in TIMES.items()},
                    "x_default": num(default / us if us and default else None),
                    "bytes": str(c["bytes"]),
                    "flops": str(c["flops"]),
                    "rounds": str(c["rounds"]),
                    "gate": "fail" if name in c["errors"] or us is None else "pass",
                    "rel_err": num(c["rel_err"].get(name), ".3g"),
                    "switched_to_default": str(int(sw)),
                    "search_us": num(entry.get("us")),
                    "evaluations": str(entry.get("evaluations", "")),
                    "space": str(entry.get("space", "")),
                    "kernel_fingerprint": prov.get("engine_kernel_fingerprint")
                    or prov.get("kernel_sha256", ""),
                    "date": prov.get("date", ""),
                    **{x: prov.get(x, "") for x in ("driver", "cuda", "torch", "triton")},
                    "source": source,
                    "commit": commit,
                }
            )
    return out


# ---- figures ---------------------------------------------------------------------------------


def f(r: dict[str, str], col: str) -> float:
    return float(r[col])


def gm(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def f1(x: float | None) -> str:
    return "-" if x is None else (f"{x:.1f}" if x < 1000 else f"{x:,.0f}")


def opt(r: dict[str, str], col: str) -> float | None:
    return float(r[col]) if r[col] else None


def rate(r: dict[str, str]) -> str:
    """TB/s of all bytes moved once at M <= 64, TFLOP/s above."""
    if int(r["m"]) <= 64:
        return f"{f(r, 'bytes') / f(r, 'us') / 1e6:.2f} TB/s"
    return f"{f(r, 'flops') / f(r, 'us') / 1e6:.0f} TF/s"


def display_cfg(r: dict[str, str]) -> str:
    """The config, with ` planes` where the INT4 kernel runs it on the PTX plane kernel."""
    c = KernelConfig.from_dict(parse_cfg(r["config"]))
    return r["config"] + (" planes" if r["kind"] == "int4" and uses_planes(c, "awq") else "")


def by_shape(rows: list[dict[str, str]]) -> dict[tuple[int, int], list[dict[str, str]]]:
    """Rows per (N, K), TP1 first, then in PROJECTIONS order; each list by M."""
    out: dict[tuple[int, int], list[dict[str, str]]] = {}
    order = sorted(rows, key=lambda r: (r["tp"], PROJECTIONS.index(r["projection"]), int(r["m"])))
    for r in order:
        out.setdefault((int(r["n"]), int(r["k"])), []).append(r)
    return out


def shape_tables(rows: list[dict[str, str]], kind: str) -> str:
    cols = {
        "fp8": ("default", "cuBLAS FP8", "bf16", "default / us", "us / cuBLAS"),
        "int4": ("default", "ours@vLLM", "vLLM", "bf16", "bf16 / us", "vLLM / us"),
    }[kind]
    out = []
    for (n, k), rs in by_shape(rows).items():
        head = ("M", "us", *cols, "rate", "config")
        out += [f"### TP{rs[0]['tp']} {rs[0]['projection']} N={n} K={k}", ""]
        out += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for r in rs:
            us = f(r, "us")
            if kind == "fp8":
                cells = [opt(r, c) for c in ("default_us", "cublas_fp8_us", "bf16_us")]
                ratios = [f(r, "default_us") / us, us / f(r, "cublas_fp8_us")]
            else:
                cells = [
                    opt(r, c)
                    for c in ("default_us", "ours_vllm_config_us", "vllm_awq_us", "bf16_us")
                ]
                ratios = [f(r, "bf16_us") / us, f(r, "vllm_awq_us") / us]
            line = [r["m"], f1(us), *map(f1, cells), *(f"{x:.2f}" for x in ratios)]
            out.append("| " + " | ".join([*line, rate(r), display_cfg(r)]) + " |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def rng(xs: list[float], fmt: str = ".2f") -> str:
    lo, hi = f"{min(xs):{fmt}}", f"{max(xs):{fmt}}"
    return lo if lo == hi else f"{lo}-{hi}"


def render(rows: list[dict[str, str]]) -> str:
    own = [r for r in rows if r["folder"] == "autotune"]
    fp8 = [r for r in own if r["kind"] == "fp8"]
    int4 = [r for r in own if r["kind"] == "int4"]

    def yes(ok: bool) -> str:
        return "yes" if ok else "**no**"

    # FP8 at M <= 16, per shape: worst TB/s (ours and cuBLAS's) and worst time / cuBLAS's.
    m16 = []
    for (n, k), rs in by_shape([r for r in fp8 if int(r["m"]) <= 16]).items():
        tb = min(f(r, "bytes") / f(r, "us") / 1e6 for r in rs)
        tb_cub = min(f(r, "bytes") / f(r, "cublas_fp8_us") / 1e6 for r in rs)
        worst = max(f(r, "us") / f(r, "cublas_fp8_us") for r in rs)
        m16.append((n, k, rs[0]["tp"], tb, tb_cub, worst))
    m16.sort(key=lambda x: -x[0] * x[1])
    fp8_m16 = ["| N x K | TP | TB/s | TB/s cuBLAS | time / cuBLAS |", "|" + " --- |" * 5]
    fp8_m16 += [f"| {n}x{k} | {tp} | {a:.2f} | {b:.2f} | {c:.2f}x |" for n, k, tp, a, b, c in m16]
    small = [r for r in fp8 if int(r["m"]) <= 128]
    x_def = [f(r, "x_default") for r in small]
    tf = [f(r, "flops") / f(r, "us") / 1e6 for r in fp8 if int(r["m"]) >= 1024]
    i16 = [r for r in int4 if int(r["m"]) <= 16]
    x_bf16 = [f(r, "bf16_us") / f(r, "us") for r in i16]
    x_vllm16 = [f(r, "vllm_awq_us") / f(r, "us") for r in i16]
    x_vllm = [f(r, "vllm_awq_us") / f(r, "us") for r in int4]
    n_tb, n_cub = sum(x[3] >= 3.2 for x in m16), sum(x[5] <= 1.1 for x in m16)
    passed = sum(r["gate"] == "pass" for r in own)
    goals = [
        "| goal | target | measured | met |",
        "| --- | --- | --- | --- |",
        f"| FP8 vs SGLang's default config on our kernel (BM64 BN128 BK128 G32 w4 s3), M <= 128, "
        f"geomean | >= 1.5x | **{gm(x_def):.2f}x** (min {min(x_def):.2f}x) | {yes(gm(x_def) >= 1.5)} |",
        f"| FP8 M <= 16: bandwidth | >= 3.2 TB/s on every shape | {n_tb}/{len(m16)} shapes; worst "
        f"{min(x[3] for x in m16):.2f} TB/s | {yes(n_tb == len(m16))} |",
        f"| FP8 M <= 16: vs cuBLAS per-tensor FP8 | within 1.1x on every shape | {n_cub}/{len(m16)} "
        f"shapes; worst {max(x[5] for x in m16):.2f}x | {yes(n_cub == len(m16))} |",
        f"| FP8 M >= 1024 | >= 700 TFLOP/s | median **{statistics.median(tf):.0f}**, min "
        f"{min(tf):.0f}, max {max(tf):.0f} TFLOP/s; {sum(x >= 700 for x in tf)}/{len(tf)} at >= 700 "
        f"| {yes(min(tf) >= 700)} |",
        f"| INT4 M <= 16 vs bf16 `torch.matmul` | >= 2x | geomean **{gm(x_bf16):.2f}x** (min "
        f"{min(x_bf16):.2f}x, max {max(x_bf16):.2f}x) | {yes(gm(x_bf16) >= 2)} |",
        f"| INT4 vs vLLM's AWQ Triton GEMM with its defaults (32/32/32, split-K 8) | >= 1.5x | M <= 16: "
        f"geomean **{gm(x_vllm16):.2f}x** (min {min(x_vllm16):.2f}x); all M: geomean "
        f"{gm(x_vllm):.2f}x (min {min(x_vllm):.2f}x) | {yes(min(x_vllm) >= 1.5)} |",
        f"| every shipped entry passed the correctness gate in the run that timed it | all | "
        f"{passed}/{len(own)} | {yes(passed == len(own))} |",
    ]

    def count(rs: list[dict[str, str]], pred: Any) -> int:
        return sum(1 for r in rs if pred(KernelConfig.from_dict(parse_cfg(r["config"]))))

    shipped_lines = ["| files | entries | configs using | search (per entry) | timed in |"]
    shipped_lines.append("|" + " --- |" * 5)
    for kind, rs, name in (("fp8", fp8, "FP8 W8A8"), ("int4", int4, "INT4 W4A16 AWQ")):
        uses = [
            ("split-K", count(rs, lambda c: c.SPLIT_K > 1)),
            ("SWAP_AB", count(rs, lambda c: c.SWAP_AB)),
            ("FOLD_SCALES", count(rs, lambda c: c.FOLD_SCALES)),
            ("TMA", count(rs, lambda c: c.TMA)),
            ("ATOMIC_REDUCE", count(rs, lambda c: c.ATOMIC_REDUCE)),
            (
                "the plane kernel",
                count(rs, lambda c: uses_planes(c, "awq")) if kind == "int4" else 0,
            ),
        ]
        ev = [int(r["evaluations"]) for r in rs]
        sp = [int(r["space"]) for r in rs]
        when = sorted({(r["source"], r["date"][:10]) for r in rs})
        shipped_lines.append(
            f"| {name}: {len({(r['n'], r['k']) for r in rs})} | {len(rs)} | "
            + ", ".join(f"{label} {n}" for label, n in uses if n)
            + f" | {statistics.median(ev):.0f} evaluations (median; {min(ev)}-{max(ev)}) of a "
            f"space of {statistics.median(sp):.0f} (median) | "
            + ", ".join(f"{s} ({d})" for s, d in when)
            + " |"
        )
    env = sorted({(r["gpu"], r["driver"], r["cuda"], r["torch"], r["triton"]) for r in own})
    machine = "; ".join(
        f"{g}, driver {d}, CUDA {c}, torch {t}, Triton {tr}" for g, d, c, t, tr in env
    )
    tmpl = (ROOT / "benchmarks" / "kernels_report.md.in").read_text()
    return tmpl.format(
        machine=machine,
        shipped="\n".join(shipped_lines),
        goals="\n".join(goals),
        fp8_m16="\n".join(fp8_m16),
        fp8_m16_range=rng([x[5] for x in m16]),
        fp8_tables=shape_tables(fp8, "fp8"),
        int4_tables=shape_tables(int4, "int4"),
        history=HISTORY,
        short=HISTORY[:7],
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--configs", type=Path, default=CONFIGS)
    ap.add_argument("--out", type=Path, default=ROOT / "reports/kernels/README.md")
    ap.add_argument("--check", action="store_true", help="exit 1 if --out is not what it renders")
    ap.add_argument("--import-run", type=Path, metavar="OUT", help="a GPU run's output folder")
    ap.add_argument("--source", default="", help="with --import-run: the run's name")
    ap.add_argument("--commit", default="", help="with --import-run: the commit of its raw data")
    args = ap.parse_args()
    if args.import_run:
        new = import_run(args.import_run, args.configs, args.source, args.commit)
        keep = {key(r): r for r in load(args.data)} if args.data.exists() else {}
        save({**keep, **{key(r): r for r in new}}.values(), args.data)
        print(f"{args.data}: {len(new)} rows imported from {args.import_run}")
    rows = load(args.data)
    problems = mismatches(rows, args.configs)
    for p in problems[:20]:
        print(f"{args.data}: {p}", file=sys.stderr)
    if len(problems) > 20:
        print(f"{args.data}: {len(problems) - 20} more", file=sys.stderr)
    text = render(rows)
    return write_or_check(args.out, text, problems, check=args.check, generator=__file__)


def write_or_check(
    out: Path, text: str, problems: list[str], *, check: bool, generator: str
) -> int:
    """Write `text` to `out` (exit 0), or with `check` compare instead: 1 when the dataset has
    problems or the page is stale (regenerate it with `generator`)."""
    if check:
        if problems or not out.exists() or out.read_text() != text:
            if not problems:
                print(f"{out} is out of date: run {Path(generator).name}", file=sys.stderr)
            return 1
        return 0
    if problems:
        return 1
    out.write_text(text)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
