"""Print the planner and roofline calibration table against FIELD-NOTES C1-C5.

    .venv/bin/python benchmarks/calibration.py

Predicted vs measured, with the ratio and the constants fitted on that very row (a fitted row is
not evidence), for the SGLang 0.5.17 / RTX 4080 SUPER 32G / AWQ-INT4 calibration case (C1-C4)
and the second case, TP2 on two RX 7900 XTX (C5). No GPU and no process: this is the analytic
model the simulator serves. benchmarks/fidelity.py prints the same rows beside the public
launches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from autotune.hardware import get_gpu
from autotune.models import BUILTIN_CARDS
from autotune.planner import plan_sglang
from autotune.planner.perf import PerfModel, PrefillChunk

CARD = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]
GPU = get_gpu("rtx-4080-super-32g")
BASE = dict(kv_cache_dtype="fp8_e4m3", page_size=1, context_length=131072, max_running_requests=2)
K1 = {**BASE, "mem_fraction_static": 0.92, "max_mamba_cache_size": 6}
NGRAM = {
    **K1,
    "speculative_algorithm": "NGRAM",
    "speculative_num_steps": 5,
    "speculative_num_draft_tokens": 6,
}
# The constants each row fitted (autotune/planner/sglang.py, perf.py).
RESERVE = "sglang.DEFAULT_RESERVE_MIB"
DECODE = "perf.EFF_BANDWIDTH, STEP_OVERHEAD_S, REQ_STEP_OVERHEAD_S"
PREFILL = "perf.EFF_PREFILL_MAX, PREFILL_HALF_CHUNK, EFF_ATTENTION, REQUEST_OVERHEAD_S"
ACCEPT = "perf.ACCEPT_P['NGRAM']"


class Row(NamedTuple):
    name: str
    predicted: float | None  # None: not predicted (`why` says so)
    measured: float
    fitted: str = ""  # constants fitted on this row; "" = evidence
    why: str = ""


def rows() -> Iterator[Row]:
    """Every FIELD-NOTES C measurement the model predicts, in the notes' order."""
    p1 = plan_sglang(CARD, GPU, {**BASE, "mem_fraction_static": 0.88}, version="0.5.17")
    p2 = plan_sglang(CARD, GPU, K1, version="0.5.17")
    yield Row("C1 row 1 KV pool tokens (mfs 0.88)", p1.kv_pool_tokens, 183_838, RESERVE)
    yield Row("C1 row 1 mamba slots (default)", p1.mamba_slots, 34)
    yield Row("C1 row 1 ssm_state GB", p1.mamba_ssm_gib, 4.92)
    yield Row("C1 row 2 KV pool tokens (mfs 0.92, 6)", p2.kv_pool_tokens, 356_237, RESERVE)
    yield Row("C1 row 2 mamba slots", p2.mamba_slots, 6)
    yield Row("C1 row 2 ssm_state GB", p2.mamba_ssm_gib, 0.98)
    yield Row("C1 row 2 max running requests", p2.max_running_requests, 2)
    m = PerfModel(CARD, GPU, p2, config=K1)
    yield Row("C2 decode 1 stream tok/s", m.decode_tok_s(1), 41.4, DECODE)
    yield Row("C2 decode 1 stream at 64K tok/s", m.decode_tok_s(1, 65536), 37.0, DECODE)
    yield Row("C2 decode 2 streams tok/s", m.decode_tok_s(2), 74.8, DECODE)
    for n, meas, label in [
        (512, 1736.8, "pp512"),
        (8704, 1884.0, "pp8.5k"),
        (34816, 1684.3, "pp34k"),
        (69632, 1459.8, "pp68k"),
    ]:
        yield Row(f"C2 prefill {label} tok/s", m.prefill_tok_s(n), meas, PREFILL)
    hc = {**K1, "enable_hierarchical_cache": True, "hicache_size": 12}
    mh = PerfModel(
        CARD, GPU, plan_sglang(CARD, GPU, hc, version="0.5.17", host_free_gib=64), config=hc
    )
    cold = mh.prefill_s(17900)
    warm = (
        mh.restore_s(16384)
        + mh.request_overhead_s
        + mh.prefill_step_s([PrefillChunk(17900 - 16384, 16384)])
    )
    yield Row("C3 17.9K cold prefill s", cold, 10.2)
    yield Row("C3 replay (16,384 from host) s", warm, 1.25)
    pn = plan_sglang(CARD, GPU, NGRAM, version="0.5.17")
    yield Row("C4 NGRAM KV pool tokens", pn.kv_pool_tokens, 271_673)
    mn = PerfModel(CARD, GPU, pn, config=NGRAM)
    for kind, meas in [("code", 56.1), ("extraction", 75.1), ("prose", 47.2)]:
        yield Row(f"C4 NGRAM decode {kind} tok/s", mn.decode_tok_s(1, kind=kind), meas, ACCEPT)
    no_card = (
        "no card for C5's checkpoint (W4A16 GPTQ of Qwen3.8-27B with its MTP layer kept bf16): "
        "its loaded size per part is not in FIELD-NOTES"
    )
    yield Row("C5 KV pool tokens (TP2, 2 x RX 7900 XTX)", None, 257_024, why=no_card)
    yield Row("C5 decode 1 stream MTP-3 tok/s", None, 78.4, why=no_card)
    yield Row("C5 prefill 4K tok/s", None, 1_869, why=no_card)


def format_row(r: Row) -> str:
    fmt = ",.0f" if r.measured >= 1000 else ".2f"
    pred = "-" if r.predicted is None else format(r.predicted, fmt)
    ratio = "-" if r.predicted is None else f"{r.predicted / r.measured:.3f}"
    note = f"fit: {r.fitted}" if r.fitted else r.why
    return f"| {r.name} | {pred} | {format(r.measured, fmt)} | {ratio} | {note} |"


def main() -> None:
    print("| measure (FIELD-NOTES) | predicted | measured | ratio | fitted on this row |")
    print("|---|---|---|---|---|")
    table = list(rows())
    for r in table:
        print(format_row(r))
    cold = next(r for r in table if r.name.startswith("C3 17.9K")).predicted or 0.0
    warm = next(r for r in table if r.name.startswith("C3 replay")).predicted or 1.0
    print(f"\nC3 host replay speed-up over cold: {cold / warm:.1f}x (goal >= 5x)")
    evidence = [r for r in table if r.predicted is not None and not r.fitted]
    worst = max(evidence, key=lambda r: abs((r.predicted or 0) / r.measured - 1))
    print(
        f"evidence rows (not fitted): {len(evidence)}, worst {worst.name} "
        f"{(worst.predicted or 0) / worst.measured:.3f}; not predicted: "
        f"{sum(r.predicted is None for r in table)}"
    )


if __name__ == "__main__":
    main()
