"""The report's output-quality section: the guard's reference, its limits, the winner's drift
from the reference, the worst example (the winner's answer beside the reference's from where
they part) and the engine defects it found (autotune.quality)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune.quality.guard import SCENARIO
from autotune.report.collect.data import QualityExample, QualityReport, TrialInfo

if TYPE_CHECKING:
    from autotune.store.db import Store

SHOWN_TOKENS = 12  # tokens shown from the first divergence on


def quality_figures(t: TrialInfo) -> dict[str, float | None] | None:
    s = t.scenarios.get(SCENARIO)
    return dict(s.figures) if s is not None else None


def _answers(store: Store, trial_id: int) -> dict[str, Any] | None:
    for m in store.get_measurements(trial_id):
        if m.scenario == SCENARIO:
            result = (m.metrics or {}).get("result") or {}
            answers = result.get("answers")
            if isinstance(answers, Mapping):
                return {"answers": answers, "drift": result.get("drift")}
    return None


def quality_report(
    store: Store,
    notes: Mapping[str, Any],
    spec: Any,
    trials: list[TrialInfo],
    winner: TrialInfo | None,
) -> QualityReport | None:
    """None when no trial answered the probe set (the guard was off)."""
    guarded = [t for t in trials if SCENARIO in t.scenarios]
    if not guarded:
        return None
    ref_no = notes.get("quality_reference")
    quality = getattr(spec, "quality", None)
    q = quality.model_dump() if quality is not None else {}
    out = QualityReport(
        reference_trial=ref_no if isinstance(ref_no, int) else None,
        limits={k: q.get(k) for k in ("max_kl", "min_token_agreement") if k in q},
        guarded_trials=len(guarded),
        rejected_trials=sum(
            any(k.startswith("quality") and v > 0 for k, v in t.constraints.items())
            for t in trials
        ),
        defects=list(notes.get("quality_defects") or []),
    )
    if winner is None:
        return out
    out.winner = quality_figures(winner)
    ref = next((t for t in trials if t.number == out.reference_trial), None)
    mine, theirs = _answers(store, winner.id), _answers(store, ref.id) if ref else None
    drift = (mine or {}).get("drift")
    if mine and theirs and isinstance(drift, Mapping) and drift.get("worst_probe"):
        probe = str(drift["worst_probe"])
        pos = next(
            (
                p.get("first_divergence")
                for p in drift.get("probes", [])
                if p.get("probe") == probe
            ),
            None,
        )
        start = pos or 0
        a = (theirs["answers"].get(probe) or {}).get("tokens") or []
        b = (mine["answers"].get(probe) or {}).get("tokens") or []
        out.example = QualityExample(
            probe=probe,
            position=pos,
            reference=[str(x) for x in a[start : start + SHOWN_TOKENS]],
            winner=[str(x) for x in b[start : start + SHOWN_TOKENS]],
        )
    return out
