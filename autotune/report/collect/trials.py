"""One stored trial read into a TrialInfo: its config and parameters (secrets redacted), the
planner's prediction, the launch record, its failure and its measurements."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autotune.report.collect.data import LOG_TAIL_LINES, FailureInfo, TrialInfo, num
from autotune.report.collect.measurements import summarize_measurements
from autotune.report.launch import Redactor, redact_mapping

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.store.models import FailureRow, TrialRow


def _plan_of(prediction: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The planner's Plan dict: nested under `plan` (sweep.planning.Assessment.prediction) or
    the prediction itself."""
    if not prediction:
        return None
    nested = prediction.get("plan")
    if isinstance(nested, Mapping):
        return dict(nested)
    return dict(prediction) if "bound_by" in prediction else None


def trial_info(store: Store, t: TrialRow, failure: FailureRow | None, red: Redactor) -> TrialInfo:
    red.add_from(t.config)
    red.add_from(t.params)
    record = t.launch or {}
    # sweep.driver stores {"report": LaunchReport, "source", "vram_peak_mib", ...}; accept a
    # bare LaunchReport too.
    report = record.get("report") if "report" in record else (record or None)
    info = TrialInfo(
        id=t.id or 0,
        number=t.number,
        status=t.status,
        config=redact_mapping(t.config),
        params=redact_mapping(t.params),
        value=t.value,
        values=t.values,
        plan=_plan_of(t.prediction),
        prediction=redact_mapping(t.prediction) if t.prediction else None,
        launch=dict(report) if isinstance(report, Mapping) else None,
        source=str(record["source"]) if record.get("source") else None,
        vram_peak_mib=num(record.get("vram_peak_mib")),
        constraints={
            str(k): float(v)
            for k, v in (record.get("constraints") or {}).items()
            if num(v) is not None
        },
        started_at=t.started_at,
        finished_at=t.finished_at,
        duration_s=t.duration_s,
        log_path=t.log_path,
        command=_command(record.get("command")),
    )
    if failure is not None:
        info.failure = FailureInfo(
            failure_class=failure.failure_class,
            reason=red.text(failure.reason),
            evidence=red.text(failure.evidence) if failure.evidence else None,
            log_tail=red.text(_tail(failure.log_tail)) if failure.log_tail else None,
        )
    info.scenarios = summarize_measurements(store.get_measurements(t.id or 0))
    return info


def _command(record: object) -> dict[str, Any] | None:
    """The trial's command record with its variables redacted once more (a record written
    before the one secret rule, or by hand, is not trusted to hold none)."""
    if not isinstance(record, Mapping):
        return None
    out = dict(record)
    for key in ("env", "inherited"):
        if isinstance(out.get(key), Mapping):
            out[key] = redact_mapping(out[key], env=True)
    return out


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
