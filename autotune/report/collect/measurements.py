"""A trial's stored measurements summarized per scenario: the main figure over every repeat
of every run, and the mean of each flat figure (simulator results rescaled to simulated-GPU
units)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.report.collect.data import ScenarioSummary, Spread, num
from autotune.sweep.trial import rescale  # simulator wall-clock -> simulated-GPU units

if TYPE_CHECKING:
    from autotune.store.models import MeasurementRow


def _result_dict(metrics: Mapping[str, Any]) -> Mapping[str, Any]:
    # A ScenarioResult dump, or sweep.trial.ScenarioMeasurement around one.
    inner = metrics.get("result")
    return inner if isinstance(inner, Mapping) and "main" in inner else metrics


def _flat_figures(
    res: Mapping[str, Any], metrics: Mapping[str, Any], scale: float
) -> dict[str, float | None]:
    """The stored flat figures (already in simulated-GPU units), completed from the raw
    ScenarioResult (wall-clock units under the simulator: rescaled here)."""
    figs: dict[str, float | None] = {}
    raw = res.get("figures")
    if isinstance(raw, Mapping):
        figs.update({str(k): rescale(str(k), num(v), scale) for k, v in raw.items()})
    stats = res.get("stats")
    if isinstance(stats, Mapping):
        for lat in ("ttft", "itl", "tpot", "e2e"):
            st = stats.get(lat)
            if isinstance(st, Mapping):
                for q in ("mean", "p50", "p90", "p95", "p99"):
                    figs.setdefault(f"{lat}_{q}_s", rescale("x_s", num(st.get(q)), scale))
    stored = metrics.get("figures")
    if isinstance(stored, Mapping) and stored is not raw:
        figs.update({str(k): num(v) for k, v in stored.items()})
    return figs


def summarize_measurements(rows: Sequence[MeasurementRow]) -> dict[str, ScenarioSummary]:
    """Per scenario: the main figure over every repeat of every run, and mean side figures."""
    by: dict[str, list[MeasurementRow]] = defaultdict(list)
    for m in rows:
        by[m.scenario].append(m)
    out: dict[str, ScenarioSummary] = {}
    for name, ms in by.items():
        values: list[float] = []
        figure, higher, kind, conc = "value", True, None, None
        fig_lists: dict[str, list[float]] = defaultdict(list)
        requests = errors = 0
        for m in ms:
            res = _result_dict(m.metrics or {})
            # Under the simulator the raw result is in wall-clock units (sweep.trial).
            scale = num(res.get("sim_time_scale")) or 1.0
            main = res.get("main")
            vals: list[float] = []
            if isinstance(main, Mapping):
                figure = str(main.get("figure") or figure)
                higher = bool(main.get("higher_is_better", higher))
                raw = [num(x) for x in main.get("values") or []] or [num(main.get("mean"))]
                vals = [v for v in (rescale(figure, x, scale) for x in raw) if v is not None]
            if not vals and m.value is not None:
                vals = [float(m.value)]
            values += vals
            kind = str(res.get("kind")) if res.get("kind") else kind
            sc = res.get("scenario")
            if isinstance(sc, Mapping) and sc.get("concurrency") is not None:
                conc = int(sc["concurrency"])
            stats = res.get("stats")
            if isinstance(stats, Mapping):
                requests += int(stats.get("requests") or 0)
                errors += int(stats.get("errors") or 0)
            for k, v in _flat_figures(res, m.metrics or {}, scale).items():
                if v is not None:
                    fig_lists[k].append(v)
        out[name] = ScenarioSummary(
            scenario=name,
            kind=kind,
            concurrency=conc,
            main=Spread.of(figure, higher, values, len(ms)),
            figures={k: statistics.fmean(v) for k, v in fig_lists.items()},
            requests=requests,
            errors=errors,
        )
    return out
