"""Fit the GDN prefill constants on the H200 probe of SGLang's chunked GDN kernel.

    .venv/bin/python benchmarks/fit_gdn_prefill.py [benchmarks/results/gdn_prefill_probe/h200.json]

The probe (benchmarks/gdn_prefill_probe.py) timed one Gated DeltaNet layer's
chunk_gated_delta_rule, replayed from a CUDA graph, over a grid of token counts and heads per
rank. perf prices a layer as GDN_LAYER_S + tokens x (GDN_TOKEN_S + value heads x
GDN_TOKEN_HEAD_S): a per-token part that few heads leave exposed (the state is carried over
the chunks one after another) and a part that grows with the heads the SMs share. The three are
fitted here by least squares on the relative error. Prints the values to put in the code and
the worst point's ratio; it changes nothing itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

PROBE = Path(__file__).resolve().parent / "results" / "gdn_prefill_probe" / "h200.json"


def fit(path: Path = PROBE) -> tuple[float, float, float, float]:
    """(GDN_LAYER_S, GDN_TOKEN_S, GDN_TOKEN_HEAD_S, worst |ratio - 1|) from a probe's JSON."""
    rows = [r for r in json.loads(path.read_text())["gdn"] if r.get("graph_ms")]
    y = np.array([r["graph_ms"] * 1e-3 for r in rows])
    t = np.array([r["tokens"] for r in rows], dtype=float)
    th = t * np.array([r["value_heads"] for r in rows], dtype=float)
    x = np.c_[np.ones_like(t), t, th]
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)  # relative error
    worst = float(np.max(np.abs(x @ coef / y - 1)))
    layer_s, token_s, token_head_s = (float(c) for c in coef)
    return layer_s, token_s, token_head_s, worst


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else PROBE
    layer_s, token_s, token_head_s, worst = fit(path)
    print(f"GDN_LAYER_S = {layer_s * 1e6:.0f}e-6")
    print(f"GDN_TOKEN_S = {token_s * 1e9:.1f}e-9")
    print(f"GDN_TOKEN_HEAD_S = {token_head_s * 1e9:.2f}e-9")
    print(f"worst point: {worst:.1%} off")


if __name__ == "__main__":
    main()
