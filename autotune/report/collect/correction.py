"""The planner's KV prediction launch by launch: what the gate predicted, what it corrected the
prediction to from the launches before (sweep/planning.py), and what the engine allocated."""

from __future__ import annotations

from autotune.report.collect.data import CorrectionRow, PlannerCorrection, ReportData


def planner_correction(data: ReportData) -> PlannerCorrection | None:
    """Rows for every launched trial with a predicted and an allocated pool, in launch order;
    None when there are none."""
    rows = []
    for t in sorted(data.trials, key=lambda t: (t.started_at is None, t.started_at, t.id)):
        pred, launch = t.prediction or {}, t.launch or {}
        predicted, allocated = pred.get("kv_pool_tokens"), launch.get("kv_pool_tokens")
        if not predicted or not allocated:
            continue
        rows.append(
            CorrectionRow(
                label=t.label,
                predicted=int(predicted),
                corrected=pred.get("kv_pool_tokens_corrected"),
                allocated=int(allocated),
            )
        )
    return PlannerCorrection(rows=rows) if rows else None
