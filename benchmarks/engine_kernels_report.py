"""Render reports/kernels/engine-kernels.md from the H200 data in reports/kernels/data/.

    .venv/bin/python benchmarks/engine_kernels_report.py            # write engine-kernels.md
    .venv/bin/python benchmarks/engine_kernels_report.py --check    # exit 1 if it is out of date

No GPU needed. It reads the shipped entries' rows of data/measurements.csv (folders
sglang/<release>: the confirmation run's side-by-side times of the shipped entry, the release's
default, the entry of the files shipped before, cuBLAS per-tensor FP8 and bf16, timed interleaved
on the release's own kernel; an entry the confirmation switched to the default holds the
default), the wider-space probe (data/engine/probe.json) and the vLLM AWQ plugin run
(data/engine/vllm_awq_plugin.json), and computes the issue's goal figures.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels_report import (  # noqa: E402
    CONFIGS,
    DATA,
    HISTORY,
    load,
    mismatches,
    parse_cfg,
    write_or_check,
)

ROOT = Path(__file__).resolve().parents[1]
TP1 = {(14336, 5120), (5120, 6144), (16384, 5120), (34816, 5120), (5120, 17408)}
NAMES = {
    (14336, 5120): "qkv_proj",
    (5120, 6144): "o_proj+out_proj",
    (16384, 5120): "in_proj_qkvz",
    (34816, 5120): "gate_up_proj",
    (5120, 17408): "down_proj",
}


def geo(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def rows_as_shipped(rows: list[dict[str, str]], version: str) -> list[dict[str, Any]]:
    """The confirmation rows of a release's shipped entries (an entry switched to the default
    holds the default and its time: one config, one binary)."""
    out = []
    for r in rows:
        if r["folder"] != f"sglang/{version}":
            continue
        times = {
            "tuned": float(r["us"]),
            "default": float(r["default_us"]),
            "previous": float(r["previous_us"]) if r["previous_us"] else None,
            "cublas_fp8_per_tensor": float(r["cublas_fp8_us"]),
            "bf16_matmul": float(r["bf16_us"]),
        }
        out.append(
            {
                "item": {"n": int(r["n"]), "k": int(r["k"]), "m": int(r["m"])},
                "times_us": times,
                "errors": {} if r["gate"] == "pass" else {"shipped": "correctness gate"},
                "switched": r["switched_to_default"] == "1",
                "engine_best": parse_cfg(r["config"]),
            }
        )
    return out


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def t(r: dict[str, Any], name: str) -> float:
        return float(r["times_us"][name])

    s16 = [r for r in rows if r["item"]["m"] <= 16]
    s128 = [r for r in rows if r["item"]["m"] <= 128]
    per_shape: dict[tuple[int, int], list[float]] = {}
    for r in s16:
        key = (r["item"]["n"], r["item"]["k"])
        per_shape.setdefault(key, []).append(t(r, "tuned") / t(r, "cublas_fp8_per_tensor"))
    return {
        "rows": len(rows),
        "m16_vs_default": geo([t(r, "default") / t(r, "tuned") for r in s16]),
        "m128_vs_default": geo([t(r, "default") / t(r, "tuned") for r in s128]),
        "worst_vs_default": min(t(r, "default") / t(r, "tuned") for r in rows),
        "m16_vs_cublas": geo([t(r, "tuned") / t(r, "cublas_fp8_per_tensor") for r in s16]),
        "m16_vs_cublas_worst": max(x for xs in per_shape.values() for x in xs),
        "m16_vs_cublas_shape": {k: (geo(v), max(v)) for k, v in sorted(per_shape.items())},
        "m16_vs_bf16": geo([t(r, "bf16_matmul") / t(r, "tuned") for r in s16]),
        "m128_vs_previous": geo(
            [t(r, "previous") / t(r, "tuned") for r in s128 if r["times_us"].get("previous")]
        ),
        "switched": sum(1 for r in rows if r["switched"]),
        "gate_errors": sum(len(r["errors"]) for r in rows),
    }


def cfg_key(c: dict[str, Any]) -> str:
    return (
        f"BM{c['BLOCK_SIZE_M']} BN{c['BLOCK_SIZE_N']} G{c['GROUP_SIZE_M']} "
        f"w{c['num_warps']} s{c['num_stages']}"
        + (f" SPLIT_K={c['SPLIT_K']}" if c.get("SPLIT_K", 1) > 1 else "")
        + (" SWAP_AB" if c.get("SWAP_AB") else "")
    )


def side_by_side(rows: list[dict[str, Any]], default_key: str) -> list[str]:
    out = [
        "| N x K | M | default us | shipped us | previous files us | cuBLAS FP8 us | bf16 us "
        "| default / shipped | shipped / cuBLAS | shipped entry |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in sorted(rows, key=lambda r: (r["item"]["n"], r["item"]["k"], r["item"]["m"])):
        t = r["times_us"]
        it = r["item"]
        entry = default_key if r["switched"] else cfg_key(r["engine_best"])
        if entry == default_key:
            entry = "default"
        prev = f"{t['previous']:.1f}" if t.get("previous") else "-"
        out.append(
            f"| {it['n']}x{it['k']} | {it['m']} | {t['default']:.1f} | {t['tuned']:.1f} | {prev}"
            f" | {t['cublas_fp8_per_tensor']:.1f} | {t['bf16_matmul']:.1f} "
            f"| {t['default'] / t['tuned']:.2f}x | {t['tuned'] / t['cublas_fp8_per_tensor']:.2f}x"
            f" | {entry}{' (confirmation)' if r['switched'] else ''} |"
        )
    return out


def render(data: Path, measurements: list[dict[str, str]]) -> str:
    probe = json.loads((data / "probe.json").read_text())
    awq = json.loads((data / "vllm_awq_plugin.json").read_text())
    tmpl = (ROOT / "benchmarks" / "engine_kernels_report.md.in").read_text()
    shipped = {v: rows_as_shipped(measurements, v) for v in ("0.5.17", "0.5.23")}
    fig: dict[str, Any] = {}
    for v, rows in shipped.items():
        tp1 = [r for r in rows if (r["item"]["n"], r["item"]["k"]) in TP1]
        tp2 = [r for r in rows if (r["item"]["n"], r["item"]["k"]) not in TP1]
        fig[v] = {"tp1": figures(tp1), "tp2": figures(tp2)}
    f23, f17 = fig["0.5.23"]["tp1"], fig["0.5.17"]["tp1"]

    def yes(ok: bool) -> str:
        return "yes" if ok else "**no**"

    goals = [
        "| goal (TP1 shapes, H200, one confirmation run) | target | measured | met |",
        "| --- | --- | --- | --- |",
        f"| 0.5.23, M <= 16, shipped vs cuBLAS per-tensor FP8, every shape | <= 1.15x "
        f"| worst {f23['m16_vs_cublas_worst']:.2f}x | {yes(f23['m16_vs_cublas_worst'] <= 1.15)} |",
        f"| 0.5.23, M <= 16, shipped vs cuBLAS, geomean | <= 1.05x | {f23['m16_vs_cublas']:.3f}x "
        f"| {yes(f23['m16_vs_cublas'] <= 1.05)} |",
        f"| 0.5.23, M <= 16, speedup over the default, geomean | >= 2.0x "
        f"| {f23['m16_vs_default']:.2f}x | {yes(f23['m16_vs_default'] >= 2.0)} |",
        f"| 0.5.23, M <= 128, speedup over the default, geomean | >= 1.6x "
        f"| {f23['m128_vs_default']:.2f}x | {yes(f23['m128_vs_default'] >= 1.6)} |",
        f"| 0.5.23, every (shape, M) >= 0.98x the default | all | worst "
        f"{f23['worst_vs_default']:.3f}x | {yes(f23['worst_vs_default'] >= 0.98)} |",
        f"| 0.5.17, M <= 128, speedup over the default, geomean | >= 1.4x "
        f"| {f17['m128_vs_default']:.2f}x | {yes(f17['m128_vs_default'] >= 1.4)} |",
        f"| 0.5.17, every (shape, M) >= 0.98x the default | all | worst "
        f"{f17['worst_vs_default']:.3f}x | {yes(f17['worst_vs_default'] >= 0.98)} |",
        f"| vLLM AWQ Triton GEMM through the plugin vs its built-in configs, M <= 16, geomean "
        f"| >= 1.5x | {awq['summary']['geomean_ratio_m_le_16']:.2f}x "
        f"(min {awq['summary']['min_ratio_m_le_16']:.2f}x), {awq['summary']['rows']} rows, "
        f"outputs gated: {'all passed' if awq['summary']['checks_ok'] else 'FAILED'} "
        f"| {yes(awq['summary']['geomean_ratio_m_le_16'] >= 1.5)} |",
    ]
    per_release = []
    for v in ("0.5.23", "0.5.17"):
        per_release += [
            f"### SGLang {v}",
            "",
            "| figure | TP1 | TP2 |",
            "| --- | ---: | ---: |",
        ]
        for key, label in (
            ("m16_vs_default", "M <= 16: default / shipped (geomean)"),
            ("m128_vs_default", "M <= 128: default / shipped (geomean)"),
            ("worst_vs_default", "worst (shape, M): default / shipped"),
            ("m16_vs_cublas", "M <= 16: shipped / cuBLAS per-tensor FP8 (geomean)"),
            ("m16_vs_cublas_worst", "M <= 16: shipped / cuBLAS (worst)"),
            ("m16_vs_bf16", "M <= 16: bf16 matmul / shipped (geomean)"),
            ("m128_vs_previous", "M <= 128: previous files / shipped (geomean)"),
            ("switched", "entries the confirmation set to the default"),
            ("gate_errors", "correctness-gate failures"),
        ):
            a, b = fig[v]["tp1"][key], fig[v]["tp2"][key]
            fmt = "{:d}" if isinstance(a, int) else "{:.3f}"
            per_release.append(f"| {label} | {fmt.format(a)} | {fmt.format(b)} |")
        per_release.append("")
        per_shape = fig[v]["tp1"]["m16_vs_cublas_shape"]
        per_release.append(
            "M <= 16, shipped / cuBLAS by TP1 shape (geomean, worst): "
            + "; ".join(
                f"{NAMES[k]} {k[0]}x{k[1]}: {g:.2f}x, {w:.2f}x" for k, (g, w) in per_shape.items()
            )
            + "."
        )
        per_release.append("")
    default_key = "BM64 BN128 G32 w4 s3"
    tables = []
    for v in ("0.5.23", "0.5.17"):
        tables += [f"### SGLang {v}", "", *side_by_side(shipped[v], default_key), ""]
    probe_lines = [
        "| M | shipped us | best of the wider grid us | cuBLAS FP8 us | shipped / cuBLAS "
        "| wider best |",
        "| ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in probe:
        t = r["times_us"]
        probe_lines.append(
            f"| {r['item']['m']} | {t['shipped']:.1f} | {t['tuned']:.1f} "
            f"| {t['cublas_fp8_per_tensor']:.1f} | {t['shipped'] / t['cublas_fp8_per_tensor']:.2f}x"
            f" | {cfg_key(r['engine_best'])} |"
        )
    awq_lines = [
        "| projection | N x K | M | plugin route | config | vLLM us | plugin us | vLLM / plugin |",
        "| --- | --- | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for r in awq["rows"]:
        awq_lines.append(
            f"| {r['label']} | {r['n']}x{r['k']} | {r['m']} | {r['route']} | {r['config']} "
            f"| {r['us']['vllm']:.1f} | {r['us']['plugin']:.1f} | {r['ratio']:.2f}x |"
        )
    return tmpl.format(
        goals="\n".join(goals),
        per_release="\n".join(per_release),
        tables="\n".join(tables),
        probe="\n".join(probe_lines),
        awq="\n".join(awq_lines),
        history=HISTORY,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT / "reports/kernels/data/engine")
    ap.add_argument("--measurements", type=Path, default=DATA)
    ap.add_argument("--configs", type=Path, default=CONFIGS)
    ap.add_argument("--out", type=Path, default=ROOT / "reports/kernels/engine-kernels.md")
    ap.add_argument("--check", action="store_true", help="exit 1 if --out is not what it renders")
    args = ap.parse_args()
    rows = load(args.measurements)
    problems = [p for p in mismatches(rows, args.configs) if "'sglang/" in p]
    for p in problems[:20]:
        print(f"{args.measurements}: {p}", file=sys.stderr)
    text = render(args.data, rows)
    return write_or_check(args.out, text, problems, check=args.check, generator=__file__)


if __name__ == "__main__":
    sys.exit(main())
