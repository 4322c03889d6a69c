"""vLLM's profiling-run activation peak on real launches: the planner's estimate vs what the log
states (V1's "torch peak memory increase", V0's "PyTorch activation peak memory takes"), with
the batch shape (max_num_seqs rows sampled, max_num_batched_tokens) and vocabulary behind it.

    .venv/bin/python benchmarks/vllm_activation.py [--records DIR]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from autotune.calibration.records import load_records
from autotune.calibration.replay import card_of, replay

RECORDS = Path(__file__).resolve().parents[1] / "tests" / "data" / "real_launches"
_PEAK = re.compile(
    r"(?:torch peak memory increase:|PyTorch activation peak memory takes|the peak memory "
    r"usage of activations(?: is)?|activation peak memory takes)\s*([\d.]+)\s*GiB",
    re.IGNORECASE,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=Path, default=RECORDS)
    args = ap.parse_args()
    head = "| record | version | tp | seqs | tokens | vocab | planned GiB | logged GiB | ratio |"
    print(head)
    print("|---" * 9 + "|")
    for rec in load_records(args.records):
        if rec.engine != "vllm":
            continue
        m = _PEAK.search(rec.log)
        if m is None:
            continue
        logged = float(m.group(1))
        r = replay(rec)
        card = card_of(rec)
        plan = r.plan
        act = getattr(plan, "activation_gib", None) if plan else None
        seqs = getattr(plan, "max_num_seqs", None) if plan else None
        toks = getattr(plan, "max_num_batched_tokens", None) if plan else None
        cells = [
            rec.name,
            rec.version + ("*" if rec.version_from in ("date", "build") else ""),
            str(rec.tp),
            str(seqs or "-"),
            str(toks or "-"),
            str(card.vocab_size if card else "-"),
            "-" if act is None else f"{act:.2f}",
            f"{logged:.2f}",
            "-" if act is None else f"{act / logged:.2f}",
        ]
        print("| " + " | ".join(cells) + " |" + ("" if plan else f" ({r.skipped})"))


if __name__ == "__main__":
    main()
