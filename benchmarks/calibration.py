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
from autotune.planner.hicache_perf import repeat_prefix
from autotune.planner.perf import PerfModel, PrefillChunk
from autotune.sweep.known_good import KNOWN_GOOD, flags_to_config

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
    # The replay (SGLang 0.5.17, planner/hicache_perf.py): 16,384 tokens (the last chunk
    # boundary holding a mamba state) and that state come from host in the admitting round while
    # one 1,516-token step runs, waiting layer by layer for the copy.
    reused = repeat_prefix(17900, mh.plan.chunked_prefill_size)
    tail = mh.prefill_step_s([PrefillChunk(17900 - reused, reused)])
    warm = mh.request_overhead_s + tail + mh.load_back_s(reused, tail)
    yield Row("C3 17.9K cold prefill s", cold, 10.2)
    yield Row("C3 replay (16,384 from host) s", warm, 1.25)
    # What the host cache saves, cold minus replay: the part the HiCache model predicts. Both
    # rows also hold whatever per-request time the notes' client counted beyond prefill (not
    # stated there), which this difference cancels.
    yield Row("C3 time the host cache saves (cold - replay) s", cold - warm, 10.2 - 1.25)
    pn = plan_sglang(CARD, GPU, NGRAM, version="0.5.17")
    yield Row("C4 NGRAM KV pool tokens", pn.kv_pool_tokens, 271_673)
    mn = PerfModel(CARD, GPU, pn, config=NGRAM)
    for kind, meas in [("code", 56.1), ("extraction", 75.1), ("prose", 47.2)]:
        yield Row(f"C4 NGRAM decode {kind} tok/s", mn.decode_tok_s(1, kind=kind), meas, ACCEPT)
    yield from c5_rows()


# FIELD-NOTES C5: two RX 7900 XTX (TP 2, PCIe 4.0 x16), a ROCm fork of SGLang 0.5.18, the K3 flags.
K3 = next(k for k in KNOWN_GOOD if k.id == "K3")
CARD5 = BUILTIN_CARDS["qwen3.8-27b-autoround-gptq-int4"]
GPU5 = get_gpu("rx-7900xtx-24g")
# The measured command line (FIELD-NOTES K3, autotune.sweep.known_good); TP is the plan's.
C5 = {k: v for k, v in flags_to_config(K3.flags).items() if k != "tp_size"}
C5_DECODE = {0: 78.4, 16384: 71.7, 32768: 64.9, 65536: 61.3, 131072: 42.0}
C5_PREFILL = {4096: 1869.0, 16384: 1715.0, 32768: 1477.0, 65536: 1136.0, 130_000: 777.0}
C5_STREAMS = {1: 67.6, 2: 118.9, 4: 176.0}
# The constants fit_c5.py fits, and the C5 points each is fitted on.
C5_FITS = {
    0: "perf.VENDOR_EFF['rdna'] decode",
    131072: "attention.KERNELS['rdna']['triton'].decode",
    4096: "perf.VENDOR_EFF['rdna'] prefill",
    130_000: "attention.KERNELS['rdna']['triton'].prefill",
}
# The pack's loaded size is not C5's: a public log of the same pack on the same two GPUs
# (builtin qwen3.8-27b-autoround-gptq-int4); C5 states no `Load weight end` line.
C5_ASSUMED = "weights as loaded from another public log of the pack (server-forge)"


def c5_model() -> PerfModel:
    plan = plan_sglang(CARD5, GPU5, C5, version="0.5.18", tp=2, host_free_gib=64)
    return PerfModel(CARD5, GPU5, plan, config=C5)


def c5_rows() -> Iterator[Row]:
    """C5's rows: the KV pool, decode by depth, prefill by length (their fitted points marked),
    and how decode scales with streams (measured at an unstated depth: the ratio to one stream)."""
    m = c5_model()
    yield Row(
        "C5 KV pool tokens (TP2, 2 x RX 7900 XTX)", m.plan.kv_pool_tokens, 257_024, why=C5_ASSUMED
    )
    # the HiCache KV host pool's bytes a token (17.9 GB over 514K tokens, both as rounded in the
    # notes): 0.5.18 packs the MTP draft's layer in with the target's 16 (planner.sglang_draft)
    host_tokens, host_gb = m.plan.host_pool_tokens, m.plan.host_pool_gb
    host = host_gb * 1e9 / host_tokens if host_tokens and host_gb else None
    yield Row("C5 HiCache KV host bytes a token", host, 17.9e9 / 514_000)
    for depth, meas in C5_DECODE.items():
        name = f"C5 decode 1 stream MTP-3 at {depth // 1000}K tok/s"
        yield Row(name, m.decode_tok_s(1, max(depth, 256)), meas, C5_FITS.get(depth, ""))
    for n, meas in C5_PREFILL.items():
        fit = C5_FITS.get(n, "")
        yield Row(f"C5 prefill {n // 1000}K tok/s", m.prefill_tok_s(n), meas, fit)
    one = m.decode_tok_s(1, 4096)
    for streams in (2, 4):
        meas = C5_STREAMS[streams] / C5_STREAMS[1]
        yield Row(
            f"C5 decode {streams} streams / 1 stream", m.decode_tok_s(streams, 4096) / one, meas
        )


# The same pack on the same two GPUs in another public setup (github.com/unknownue/server-forge,
# nodes/ubuntu-server-node-2/bench/results, 2026-09-19; SGLang's gfx1100 fork): the three pools
# its startup logs gave, with the flags its notes state (K3's otherwise; no HiCache, page size
# not stated). Its 1.48 GiB of "mamba state cache" is K3's bf16 state with the MTP verify
# buffers; its notes say SGLang there "allocated 579 MiB less than budgeted". Not FIELD-NOTES:
# printed apart, as evidence for the pack's loaded size, never fitted on.
PACK_LAUNCHES = (
    (0.85, 4, 195_013),
    (0.90, 4, 232_392),
    (0.96, 2, 284_777),
)
_NOT_STATED = ("enable_hierarchical_cache", "hicache_ratio", "hicache_io_backend")
_NOT_STATED += ("hicache_write_policy", "page_size", "schedule_policy")


def pack_launch_rows() -> Iterator[Row]:
    base = {k: v for k, v in C5.items() if k not in _NOT_STATED}
    base.update(chunked_prefill_size=4096, max_prefill_tokens=16384)
    for mfs, running, logged in PACK_LAUNCHES:
        cfg = {**base, "mem_fraction_static": mfs, "max_running_requests": running}
        plan = plan_sglang(CARD5, GPU5, cfg, version="0.5.18", tp=2, host_free_gib=64)
        yield Row(f"server-forge KV pool tokens (mfs {mfs:.2f})", plan.kv_pool_tokens, logged)


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
    print("\nC5's pack on C5's GPUs in another public setup (evidence, not FIELD-NOTES):")
    print("| measure | predicted | logged | ratio | |")
    print("|---|---|---|---|---|")
    for r in pack_launch_rows():
        print(format_row(r))


if __name__ == "__main__":
    main()
