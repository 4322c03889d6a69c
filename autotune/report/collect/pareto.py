"""The Pareto front: throughput vs TTFT p95 on the objective's scenario, or the objectives
themselves in a multi-objective sweep."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.report.collect.data import Direction, ParetoPoint, ReportData


def _objective_scenario(data: ReportData) -> str | None:
    owner, dot, _ = data.objective_metric.rpartition(".")
    if dot and owner in data.scenarios:
        return owner
    tput = [s for s in data.scenarios if _kind_of(data, s) == "throughput"]
    return tput[0] if tput else (data.scenarios[0] if data.scenarios else None)


def _kind_of(data: ReportData, scenario: str) -> str | None:
    for t in data.trials:
        s = t.scenarios.get(scenario)
        if s is not None and s.kind:
            return s.kind
    return None


def pareto_points(data: ReportData) -> tuple[list[ParetoPoint], tuple[str, str]]:
    """Throughput vs TTFT p95 on the objective's scenario (or the objectives themselves when
    the sweep was multi-objective with two of them); the non-dominated trials marked."""
    done = [t for t in data.trials if t.status == "complete"]
    if data.multi_objective:
        dirs = [d for _, d in data.objectives]
        pts = [
            ParetoPoint(number=t.number, values=list(t.values))
            for t in done
            if t.values is not None and len(t.values) == len(dirs)
        ]
        front = pareto_front([p.values for p in pts], dirs)
        for i in front:
            pts[i].on_front = True
        axes = (
            (f"{data.objectives[1][0]}", f"{data.objectives[0][0]}")
            if len(dirs) >= 2
            else data.pareto_axes
        )
        return pts, axes
    scen = _objective_scenario(data)
    if scen is None:
        return [], data.pareto_axes
    pts = []
    for t in done:
        s = t.scenarios.get(scen)
        if s is None:
            continue
        tput = s.figures.get("output_tok_s")
        ttft = s.figures.get("ttft_p95_s")
        if tput is None or ttft is None:
            continue
        pts.append(
            ParetoPoint(number=t.number, values=[tput, ttft], throughput=tput, ttft_p95_s=ttft)
        )
    for i in pareto_front([p.values for p in pts], ["maximize", "minimize"]):
        pts[i].on_front = True
    return pts, (f"{scen}: TTFT p95 (s)", f"{scen}: output tok/s")


def pareto_front(points: Sequence[Sequence[float]], directions: Sequence[Direction]) -> list[int]:
    """Indices of the non-dominated points (ties are kept)."""
    signs = [1.0 if d == "maximize" else -1.0 for d in directions]
    scored = [[s * v for s, v in zip(signs, p, strict=True)] for p in points]

    def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
        return all(x >= y for x, y in zip(a, b, strict=True)) and any(
            x > y for x, y in zip(a, b, strict=True)
        )

    return [
        i
        for i, p in enumerate(scored)
        if not any(dominates(q, p) for j, q in enumerate(scored) if j != i)
    ]
