"""The report's tables drawn from the trials: winner vs baseline per scenario, the top
configurations as changes from the baseline, and the failures grouped by class."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.report.collect.data import (
    SIDE_FIGURES,
    TOP_N,
    Comparison,
    Direction,
    FailureGroup,
    RankedTrial,
    TrialInfo,
)
from autotune.report.collect.quality import quality_figures


def change_pct(base: float | None, new: float | None) -> float | None:
    if base is None or new is None or base == 0:
        return None
    return (new - base) / abs(base) * 100.0


def compare_scenarios(
    baseline: TrialInfo | None, winner: TrialInfo | None, scenarios: Sequence[str]
) -> list[Comparison]:
    out: list[Comparison] = []
    if winner is None:
        return out
    for name in scenarios:
        w = winner.scenarios.get(name)
        b = baseline.scenarios.get(name) if baseline is not None else None
        if w is None and b is None:
            continue
        ref = w or b
        assert ref is not None
        pct = change_pct(b.main.mean if b else None, w.main.mean if w else None)
        better = None if pct is None else (pct > 0) == ref.main.higher_is_better
        side = {
            f: (b.figures.get(f) if b else None, w.figures.get(f) if w else None)
            for f in SIDE_FIGURES
            if f != ref.main.figure
            and ((b and b.figures.get(f) is not None) or (w and w.figures.get(f) is not None))
        }
        out.append(
            Comparison(
                scenario=name,
                kind=ref.kind,
                figure=ref.main.figure,
                higher_is_better=ref.main.higher_is_better,
                baseline=b.main if b else None,
                winner=w.main if w else None,
                change_pct=pct,
                better=better if pct is not None and abs(pct) > 1e-9 else None,
                side=side,
            )
        )
    return out


def config_changes(
    base: Mapping[str, Any] | None, config: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """Fields whose value differs from the baseline's (a missing field is the engine's
    default, None)."""
    base = base or {}
    keys = sorted(set(base) | set(config))
    return {k: (base.get(k), config.get(k)) for k in keys if base.get(k) != config.get(k)}


def top_trials(
    trials: Sequence[TrialInfo],
    baseline: TrialInfo | None,
    winner: TrialInfo | None,
    direction: Direction,
) -> list[RankedTrial]:
    done = [t for t in trials if t.status == "complete" and t.value is not None]
    sign = 1.0 if direction == "maximize" else -1.0
    done.sort(key=lambda t: (-sign * (t.value or 0.0), t.number or 0))
    if winner is None:  # no feasible winner: the closest trials (least violation) first
        done.sort(key=lambda t: sum(max(v, 0.0) for v in t.constraints.values()))
    base_cfg = baseline.config if baseline is not None else None
    base_val = baseline.value if baseline is not None else None
    return [
        RankedTrial(
            rank=i + 1,
            number=t.number,
            value=t.value,
            values=t.values,
            change_pct=change_pct(base_val, t.value),
            changes=config_changes(base_cfg, t.config),
            winner=winner is not None and t.id == winner.id,
            baseline=t.baseline,
            feasible=t.feasible,
            quality=quality_figures(t),
        )
        for i, t in enumerate(done[:TOP_N])
    ]


def failure_groups(trials: Sequence[TrialInfo]) -> list[FailureGroup]:
    groups: dict[str, list[TrialInfo]] = defaultdict(list)
    for t in trials:
        if t.failure is not None:
            groups[t.failure.failure_class].append(t)
    out: list[FailureGroup] = []
    for cls, ts in groups.items():
        example = next((t for t in ts if t.failure and t.failure.log_tail), ts[0])
        f = example.failure
        assert f is not None
        out.append(
            FailureGroup(
                failure_class=cls,
                count=len(ts),
                trials=[t.number for t in ts],
                example_trial=example.number,
                example_reason=f.reason,
                example_evidence=f.evidence,
                example_log_tail=f.log_tail,
                example_log=example.log_path,
            )
        )
    out.sort(key=lambda g: (-g.count, g.failure_class))
    return out
