"""Print the planner and roofline calibration table against FIELD-NOTES C1-C4.

    .venv/bin/python benchmarks/calibration.py

Predicted vs measured, with the ratio, for the SGLang 0.5.17 / RTX 4080 SUPER 32G / AWQ-INT4
calibration case. No GPU and no process: this is the analytic model the simulator serves.
"""

from __future__ import annotations

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


def row(name: str, predicted: float, measured: float) -> None:
    fmt = ",.0f" if measured >= 1000 else ".2f"
    print(
        f"| {name:38s} | {predicted:>11{fmt}} | {measured:>11{fmt}} | {predicted / measured:6.3f} |"
    )


def main() -> None:
    print("| measure (FIELD-NOTES)                  |   predicted |    measured |  ratio |")
    print("|---|---|---|---|")
    p1 = plan_sglang(CARD, GPU, {**BASE, "mem_fraction_static": 0.88}, version="0.5.17")
    p2 = plan_sglang(CARD, GPU, K1, version="0.5.17")
    row("C1 row 1 KV pool tokens (mfs 0.88)", p1.kv_pool_tokens, 183_838)
    row("C1 row 1 mamba slots (default)", p1.mamba_slots, 34)
    row("C1 row 1 ssm_state GB", p1.mamba_ssm_gib, 4.92)
    row("C1 row 2 KV pool tokens (mfs 0.92, 6)", p2.kv_pool_tokens, 356_237)
    row("C1 row 2 mamba slots", p2.mamba_slots, 6)
    row("C1 row 2 ssm_state GB", p2.mamba_ssm_gib, 0.98)
    row("C1 row 2 max running requests", p2.max_running_requests, 2)
    m = PerfModel(CARD, GPU, p2, config=K1)
    row("C2 decode 1 stream tok/s", m.decode_tok_s(1), 41.4)
    row("C2 decode 1 stream at 64K tok/s", m.decode_tok_s(1, 65536), 37.0)
    row("C2 decode 2 streams tok/s", m.decode_tok_s(2), 74.8)
    for n, meas, label in [
        (512, 1736.8, "pp512"),
        (8704, 1884.0, "pp8.5k"),
        (34816, 1684.3, "pp34k"),
        (69632, 1459.8, "pp68k"),
    ]:
        row(f"C2 prefill {label} tok/s", m.prefill_tok_s(n), meas)
    pn = plan_sglang(CARD, GPU, NGRAM, version="0.5.17")
    row("C4 NGRAM KV pool tokens", pn.kv_pool_tokens, 271_673)
    mn = PerfModel(CARD, GPU, pn, config=NGRAM)
    for kind, meas in [("code", 56.1), ("extraction", 75.1), ("prose", 47.2)]:
        row(f"C4 NGRAM decode {kind} tok/s", mn.decode_tok_s(1, kind=kind), meas)
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
    row("C3 17.9K cold prefill s", cold, 10.2)
    row("C3 replay (16,384 from host) s", warm, 1.25)
    print(f"\nC3 host replay speed-up over cold: {cold / warm:.1f}x (goal >= 5x)")


if __name__ == "__main__":
    main()
