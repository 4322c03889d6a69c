"""Planner fidelity on real launches: public SGLang and vLLM startup logs (tests/data/real_launches)
replayed through the parsers and the planner; predicted vs logged KV pool tokens, weights, mamba
slots and max running requests, per record and as a distribution.

    .venv/bin/python benchmarks/fidelity.py [--blind] [--markdown] [--records DIR]

--blind ignores the free memory the log states before weights (the planner then starts from the
GPU catalog, as before a first launch). Records whose figures were used to fit a planner constant
are marked `fit` and left out of the distribution (a fitted row is not evidence).
"""

from __future__ import annotations

import argparse
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from autotune.calibration.records import LaunchRecord, load_records
from autotune.calibration.replay import Replay, replay

RECORDS = Path(__file__).resolve().parents[1] / "tests" / "data" / "real_launches"
# Records a planner constant was fitted on (name -> constant): not evidence for it.
FITTED: dict[str, str] = {
    "v-llama-3.1-8b-instruct-rtx3090-tp1": "vllm_legacy.WHOLE_DEVICE_NON_TORCH_MIB",
    "v-llama-3.1-8b-instruct-rtx3090-tp1-2": "vllm_legacy.WHOLE_DEVICE_NON_TORCH_MIB",
    "repo-llama-3.3-70b-instruct-gguf-q4km-w7900-tp1": "vllm_legacy.WHOLE_DEVICE_NON_TORCH_MIB",
    "repo-llama-3.1-8b-instruct-mi300x-tp8": "vllm_legacy.ROCM_TP_NON_TORCH_MIB",
    "more-llama-3.1-8b-instruct-h100-tp2": "vllm_memory.HOPPER_TP_NON_TORCH_MIB_0_18",
    # Its card's quantization split is assumed between two bounds this launch's weights chose.
    "more-nemotron-3-super-120b-a12b-nvfp4-gb10-tp1": "the Super NVFP4 card's quantization",
    # Hopper's NCCL size was extended to sm_100 on these launches' evidence (no B200 figure).
    "dc-glm-4.5-air-fp8-gb200-tp4": "vllm_memory.NVLINK_ARCHS (sm_100)",
    "field-mimo-v2-flash-b200-tp4": "vllm_memory.NVLINK_ARCHS (sm_100)",
    "field-deepseek-v3.2-exp-b200-tp8-dp8-main": "vllm_memory.NVLINK_ARCHS (sm_100)",
    "field-deepseek-v3.2-exp-b200-tp8-dp8": "vllm_memory.NVLINK_ARCHS (sm_100)",
    # The NVFP4 card's "no KV-cache scheme" was read off this launch's own KV per token.
    "vllm/repo-laguna-s-2.1-nvfp4-gb10-tp1": "the Laguna NVFP4 card's KV cache dtype",
}
BANDS = (0.05, 0.15)


def fitted(rec: LaunchRecord) -> bool:
    """Whether a constant or card value was chosen on this record (FITTED: by name, or by
    engine/name where both engines have a record of that name)."""
    return rec.name in FITTED or f"{rec.engine}/{rec.name}" in FITTED


def _fmt(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def _row(r: Replay) -> str:
    rec, plan = r.record, r.plan
    cells = [
        rec.name,
        rec.engine,
        rec.version + ("*" if rec.version_from in ("date", "build") else ""),
        (rec.gpu or "not stated")[:24],
        str(rec.tp),
        rec.family,
        rec.quantization,
        _fmt(r.observed_kv),
        _fmt(plan.kv_pool_tokens if plan else None),
        _fmt(r.kv_ratio, ".3f"),
        _fmt(r.observed.weights_gib, ".2f"),
        _fmt(plan.weights_gib if plan else None, ".2f"),
        "fit" if fitted(rec) else (r.skipped or "; ".join(filter(None, (r.note, _unstated(rec))))),
    ]
    return "| " + " | ".join(cells) + " |"


def _unstated(rec: LaunchRecord) -> str:
    return f"unstated: {', '.join(rec.unstated)}" if rec.unstated else ""


def _within(errors: list[float], of: int) -> str:
    return ", ".join(
        f"within {b:.0%}: {sum(e <= b for e in errors)}/{of} ({sum(e <= b for e in errors) / of:.1%})"
        for b in BANDS
    )


def _distribution(replays: list[Replay], engine: str) -> list[str]:
    """KV-token errors over the predicted records, over every record (an unpredicted one counts
    as a miss), over the records that state every input a prediction needs (KV dtype, which
    memory size; a missing card or catalog GPU still counts as a miss) and over the predicted
    ones whose launch ran nothing the planner leaves out."""
    mine = [r for r in replays if r.record.engine == engine and not fitted(r.record)]
    scored = [r for r in mine if r.kv_ratio is not None]
    if not scored:
        return [f"{engine}: {len(mine)} records, none predicted"]
    errors = [abs((r.kv_ratio or 0) - 1) for r in scored]
    plain = [abs((r.kv_ratio or 0) - 1) for r in scored if not r.record.unmodelled]
    stated = [r for r in mine if not r.unstated]
    stated_errors = [abs((r.kv_ratio or 0) - 1) for r in stated if r.kv_ratio is not None]
    return [
        f"{engine}: {len(mine)} records (fitted ones left out), {len(scored)} predicted; KV tokens "
        f"|error| median {statistics.median(errors):.1%}, max {max(errors):.1%}",
        f"  of the predicted: {_within(errors, len(errors))}",
        f"  of all records (unpredicted = miss): {_within(errors, len(mine))}",
        f"  of the {len(stated)} whose source states the launch's inputs (unpredicted = miss): "
        f"{_within(stated_errors, len(stated))}",
        f"  of the predicted with nothing unmodelled: {_within(plain, max(len(plain), 1))}",
    ]


def _misses(replays: list[Replay]) -> list[str]:
    """Predicted records off by more than the first band, worst first, with what the source
    says the launch ran that the planner leaves out, and the record's planner gap."""
    off = [
        r
        for r in replays
        if r.kv_ratio is not None and abs(r.kv_ratio - 1) > BANDS[0] and not fitted(r.record)
    ]
    off.sort(key=lambda r: -abs((r.kv_ratio or 0) - 1))
    return [
        f"- {r.record.name} ({r.record.engine} {r.record.version}): {r.kv_ratio:.3f}"
        + (f"; unmodelled: {'; '.join(r.record.unmodelled)}" if r.record.unmodelled else "")
        + (f"; unstated: {', '.join(r.record.unstated)}" if r.record.unstated else "")
        + (f"; planner gap: {'; '.join(r.record.planner_gap)}" if r.record.planner_gap else "")
        for r in off
    ]


def _other_figures(replays: list[Replay]) -> list[str]:
    """Mamba slots and max running requests, logged vs predicted, where a log states them."""
    rows = []
    for r in replays:
        o, p = r.observed, r.plan
        if p is None:
            continue
        for label, seen, guess in (
            ("mamba slots", o.mamba_slots, p.mamba_slots),
            ("max running requests", o.max_running_requests, p.max_running_requests),
        ):
            if seen:
                rows.append(f"- {r.record.name}: {label} {seen:,} logged, {guess:,} predicted")
    return rows


def _breakdown(replays: list[Replay]) -> list[str]:
    recs = [r.record for r in replays]
    lines = []
    keys: tuple[tuple[str, Callable[[LaunchRecord], object]], ...] = (
        ("engines", lambda x: x.engine),
        ("versions", lambda x: f"{x.engine} {x.version}"),
        ("GPUs", lambda x: x.gpu or "not stated"),
        ("families", lambda x: x.family),
        ("quantization", lambda x: x.quantization),
        ("TP", lambda x: f"tp{x.tp}"),
        ("vendors", lambda x: x.gpu_vendor),
    )
    for label, key in keys:
        counts = Counter(key(x) for x in recs)
        lines.append(f"{label}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=Path, default=RECORDS)
    ap.add_argument("--blind", action="store_true", help="ignore the logged free memory")
    args = ap.parse_args()
    replays = [replay(rec, blind=args.blind) for rec in load_records(args.records)]
    print(
        "| record | engine | version | GPU | TP | family | quant | KV logged | KV predicted "
        "| ratio | weights logged | weights predicted | note |"
    )
    print("|" + "---|" * 13)
    for r in replays:
        print(_row(r))
    print()
    for engine in ("sglang", "vllm"):
        print("\n".join(_distribution(replays, engine)))
    print()
    print(f"misses beyond {BANDS[0]:.0%}:")
    print("\n".join(_misses(replays)))
    print()
    print("FIELD-NOTES measurements (benchmarks/calibration.py; a fitted row is not evidence):")
    from calibration import format_row, rows  # benchmarks/ is this script's folder

    for fn_row in rows():
        print(format_row(fn_row))
    print()
    print("real llama-server runs (benchmarks/fidelity_llamacpp.py; reports/llamacpp-h200):")
    from fidelity_llamacpp import main as llamacpp_table  # benchmarks/ is this script's folder

    llamacpp_table([])
    print()
    print("real speeds (benchmarks/fidelity_speed.py; tests/data/real_speeds):")
    from fidelity_speed import summary_lines  # benchmarks/ is this script's folder

    print("\n".join(summary_lines()))
    print()
    print("mamba slots and max running requests, where logged:")
    print("\n".join(_other_figures(replays)))
    print()
    print("\n".join(_breakdown(replays)))
    skipped = Counter((r.skipped or "").split(":")[0] for r in replays if r.skipped)
    if skipped:
        print("not predicted: " + ", ".join(f"{k} ({v})" for k, v in skipped.items()))


if __name__ == "__main__":
    main()
