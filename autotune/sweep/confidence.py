"""What the sweep knows of each configuration's true value when launches are noisy: every run
of a configuration (its search run, confirmation re-runs, finalist re-runs) pooled into an
estimate with an interval, and the winner chosen by its lower confidence bound, not by one lucky
run.

Work is on the log scale with the sign of the objective (higher is better): real engines vary by
a share of their figure (3-5 % from launch to launch), so log-spreads pool across
configurations that differ in speed. A configuration's estimate is the mean of its log runs up
to two runs, the median from three (a straggler run does not drag it down); the spread sigma is
pooled over every configuration run more than once, shrunk toward a prior of 4 % (worth 4
degrees of freedom) while few repeats exist.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

PRIOR_SIGMA = 0.04  # launch-to-launch spread before the sweep has measured its own
PRIOR_DOF = 4.0  # how many degrees of freedom the prior is worth
Z_SELECT = 1.0  # the winner: the best mean minus one standard error
Z_REPORT = 1.96  # the interval the report states (about 95 %)


@dataclass
class Estimate:
    """One configuration's runs (objective values in the engine's units, feasible ones)."""

    number: int  # the trial that first ran it
    config: dict[str, Any]
    values: list[float] = field(default_factory=list)
    row_id: int | None = None
    # per run, the worst of the spec's own bounds (sweep/study.user_constraints: > 0 broken)
    margins: list[float] = field(default_factory=list)

    @property
    def margin(self) -> float:
        """The centre of its runs' worst-bound margins, as the value's: the mean up to two
        runs, the median from three (a straggler launch, slow in every figure, breaks a TTFT
        limit the configuration meets; it must not outvote the other two)."""
        if len(self.margins) >= 3:
            return statistics.median(self.margins)
        return statistics.fmean(self.margins)

    def margin_se(self, sigma: float) -> float:
        """The standard error of `margin`: a median's is sqrt(pi / 2) times a mean's (its
        efficiency on normal runs), so three runs' median is not taken as surer than it is."""
        n = len(self.margins)
        widen = math.sqrt(math.pi / 2) if n >= 3 else 1.0
        return widen * sigma / math.sqrt(max(n, 1))

    @property
    def feasible(self) -> bool:
        """Within the spec's bounds on the centre of its runs (a bound measured near its
        limit can break on the next launch; the runs decide, not the first one)."""
        return not self.margins or self.margin <= 0

    def within_bounds(self, sigma: float, z: float = Z_SELECT) -> bool:
        """Within the spec's bounds with confidence: the centre margin plus z standard errors
        (a configuration that meets a TTFT limit only on a lucky launch is not a winner)."""
        if not self.margins:
            return True
        return self.margin + z * self.margin_se(sigma) <= 0

    def within_probability(self, sigma: float) -> float:
        """How likely the configuration's true figures meet the spec's bounds, given its runs
        (normal on the centre margin with the launch spread; 1 without bounds)."""
        if not self.margins:
            return 1.0
        return NormalDist().cdf(-self.margin / max(self.margin_se(sigma), 1e-9))

    def at_risk(self, sigma: float) -> bool:
        """Within two launch spreads of a bound: the next launch may well break it."""
        return bool(self.margins) and self.margin > -2 * sigma

    @property
    def n(self) -> int:
        return len(self.values)

    def score(self, maximize: bool) -> float:
        """The centre on the signed log scale (higher is better)."""
        logs = [_log(v) * (1.0 if maximize else -1.0) for v in self.values]
        if not logs:
            return -math.inf
        return statistics.median(logs) if len(logs) >= 3 else statistics.fmean(logs)

    def bound(self, sigma: float, maximize: bool, z: float = Z_SELECT) -> float:
        """The lower confidence bound on the signed log scale."""
        return self.score(maximize) - z * sigma / math.sqrt(max(self.n, 1))

    def interval(self, sigma: float, maximize: bool, z: float = Z_REPORT) -> tuple[float, float]:
        """(low, high) of the true value in the objective's units."""
        sign = 1.0 if maximize else -1.0
        centre = self.score(maximize) * sign
        half = z * sigma / math.sqrt(max(self.n, 1))
        return math.exp(centre - half), math.exp(centre + half)

    def centre(self, maximize: bool) -> float:
        return math.exp(self.score(maximize) * (1.0 if maximize else -1.0))


def _log(v: float) -> float:
    return math.log(max(v, 1e-12))


def pooled_sigma(estimates: Iterable[Estimate]) -> float:
    """The launch-to-launch spread (relative), pooled over configurations run more than once
    and shrunk toward PRIOR_SIGMA."""
    ss, dof = PRIOR_SIGMA**2 * PRIOR_DOF, PRIOR_DOF
    for e in estimates:
        if e.n < 2:
            continue
        logs = [_log(v) for v in e.values]
        mean = statistics.fmean(logs)
        ss += sum((x - mean) ** 2 for x in logs)
        dof += e.n - 1
    return math.sqrt(ss / dof)


def winner(estimates: Sequence[Estimate], sigma: float, maximize: bool) -> Estimate | None:
    """The configuration with the best lower confidence bound among those within the spec's
    bounds with confidence (ties: the earlier trial).

    Under bounds (a TTFT limit), a configuration that breaks them is worth nothing to the user,
    so the lower bound is discounted by the chance that its runs met them by luck: of two
    configurations within one launch spread of each other, the one further inside the limit
    wins (the winner's curse picks the one whose lucky runs made both its figure and its
    margin look better). When no configuration meets the bounds with confidence, the ones
    that meet them on the centre of their runs are ranked the same way (`confident` then says
    so in the note)."""
    ok = [e for e in estimates if e.within_bounds(sigma)] or [e for e in estimates if e.feasible]
    if not ok:
        return None

    def rank(e: Estimate) -> tuple[float, int]:
        p = e.within_probability(sigma)
        return e.bound(sigma, maximize) + math.log(max(p, 1e-12)), -e.number

    return max(ok, key=rank)


def ambiguous(a: Estimate, b: Estimate, sigma: float, maximize: bool, z: float = 2.0) -> bool:
    """Whether the runs so far cannot tell `a` from `b` apart (their difference is within z
    standard errors)."""
    gap = abs(a.score(maximize) - b.score(maximize))
    return gap < z * sigma * math.sqrt(1.0 / max(a.n, 1) + 1.0 / max(b.n, 1))


def selection_note(
    estimates: Sequence[Estimate], sigma: float, maximize: bool
) -> dict[str, Any] | None:
    """What the report states of the winner: its runs, centre and 95 % interval, the spread."""
    best = winner(estimates, sigma, maximize)
    if best is None:
        return None
    lo, hi = best.interval(sigma, maximize)
    return {
        "winner": best.number,
        "runs": best.n,
        "values": [round(v, 4) for v in best.values],
        "estimate": round(best.centre(maximize), 4),
        "ci95": [round(lo, 4), round(hi, 4)],
        "sigma": round(sigma, 5),
        "configurations_rerun": sum(1 for e in estimates if e.n > 1),
    } | (
        {
            "bounds_confident": best.within_bounds(sigma),
            "bounds_probability": round(best.within_probability(sigma), 3),
        }
        if best.margins
        else {}
    )


def figures_by_repeat(measurements: Iterable[Any]) -> dict[int, dict[str, float]]:
    """Each run's figures as SCENARIO.FIGURE -> value (repeat -> figures), from a trial's
    stored measurements."""
    out: dict[int, dict[str, float]] = {}
    for m in measurements:
        figs: Mapping[str, Any] = (m.metrics or {}).get("figures") or {}
        for k, v in figs.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                out.setdefault(m.repeat, {})[f"{m.scenario}.{k}"] = float(v)
    return out


def worst_margin(constraints: Mapping[str, float]) -> float | None:
    """The worst of the spec's own bounds among a trial's constraint values (their keys name
    the bound: `metric<=max`, `metric>=min`), or None without any."""
    own = [v for k, v in constraints.items() if "<=" in k or ">=" in k]
    return max(own) if own else None
