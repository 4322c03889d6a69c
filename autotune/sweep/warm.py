"""Warm starts: the winners of earlier sweeps on a similar target, from the same database, queued
as seeds of a fresh sweep (`search.warm_start`).

An earlier sweep is a source when it ran the same engine on the same model, the same GPU and
the same TP size (the memory knobs it found transfer only then), and was simulated if and only
if this one is. Sources are ranked: the same engine version first, then the same objective
metric, then the newest. From each its winner (the noise-aware selection's, else its best
trial) is taken, and after every source's winner, while the budget lasts, each runner-up (the
best other feasible configuration). A configuration is projected onto this sweep's space: a
field the space does not search is left to it, a value the space does not hold is dropped (the
seed's source says which and why), the rules complete what they require, and the planner must
let it fit. The sweep itself (the same name) is never a source."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from autotune.space.rules import same
from autotune.store.models import TrialStatus
from autotune.sweep.known_good import Seed
from autotune.sweep.planning import vet_seed
from autotune.sweep.resume import row_feasible
from autotune.sweep.study import config_key

if TYPE_CHECKING:
    from autotune.space.models import SearchSpace
    from autotune.store.db import Store
    from autotune.store.models import SweepRow, TrialRow
    from autotune.sweep.planning import TrialPlanner
    from autotune.sweep.spec import SweepSpec

PREFIX = "warm"
Complete = Callable[[dict[str, Any]], tuple[dict[str, Any], list[str]]]


@dataclass(frozen=True)
class Source:
    """An earlier sweep on a similar target, and how alike it is."""

    row: SweepRow
    metric: str | None
    direction: str
    same_version: bool
    same_metric: bool

    @property
    def rank(self) -> tuple[bool, bool, float]:
        return (not self.same_version, not self.same_metric, -self.row.created_at.timestamp())


@dataclass(frozen=True)
class Candidate:
    source: Source
    trial: TrialRow
    role: str  # winner, runner-up

    @property
    def id(self) -> str:
        return f"{PREFIX}:{self.source.row.name}#{self.trial.number}"

    def text(self) -> str:
        row = self.source.row
        version = f" {row.engine_version}" if row.engine_version else ""
        value = (
            f", {self.source.metric} {self.trial.value:.4g}"
            if self.source.metric and self.trial.value is not None
            else ""
        )
        return (
            f"the {self.role} (#{self.trial.number}{value}) of the earlier sweep "
            f"{row.name!r} ({row.engine}{version}, {row.created_at:%Y-%m-%d})"
        )


def _spec_data(row: SweepRow) -> Mapping[str, Any]:
    try:
        data = yaml.safe_load(row.spec_yaml or "")
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _objective(row: SweepRow, data: Mapping[str, Any]) -> tuple[str | None, str]:
    """The earlier sweep's first objective metric and its direction, as its notes resolved them
    (its spec's text where the notes have none)."""
    refs = (row.notes or {}).get("objective")
    if isinstance(refs, list) and refs and isinstance(refs[0], dict):
        return refs[0].get("metric"), str(refs[0].get("direction") or "maximize")
    objective = data.get("objective")
    metric = objective.get("metric") if isinstance(objective, dict) else None
    return (str(metric) if metric else None), "maximize"


def sources(store: Store, spec: SweepSpec, gpu_name: str, metric: str) -> list[Source]:
    """The earlier sweeps of the store on this sweep's target, most alike first."""
    t = spec.target
    out: list[Source] = []
    for row in store.list_sweeps():
        if row.name == spec.name or row.engine != t.engine or row.model != t.model:
            continue
        if row.gpu != gpu_name or bool((row.notes or {}).get("simulated")) != spec.simulated:
            continue
        data = _spec_data(row)
        target = data.get("target")
        tp = target.get("tp", 1) if isinstance(target, dict) else 1
        if tp != t.tp:
            continue
        their_metric, direction = _objective(row, data)
        out.append(
            Source(
                row=row,
                metric=their_metric,
                direction=direction,
                same_version=row.engine_version == t.engine_version,
                same_metric=their_metric == metric,
            )
        )
    return sorted(out, key=lambda s: s.rank)


def winner(store: Store, source: Source) -> TrialRow | None:
    """The trial the earlier sweep chose: its noise-aware selection's winner, else its best."""
    row = source.row
    number = ((row.notes or {}).get("selection") or {}).get("winner")
    if isinstance(number, int):
        found = [t for t in store.get_trials(row.id or 0) if t.number == number]
        if found:
            return found[0]
    if row.best_trial_id is not None:
        return store.get_trial(row.best_trial_id)
    return None


def runner_up(store: Store, source: Source, first: TrialRow) -> TrialRow | None:
    """The best feasible complete trial of another configuration than `first`."""
    rows = [
        t
        for t in store.get_trials(source.row.id or 0, TrialStatus.COMPLETE)
        if row_feasible(t) and config_key(t.config) != config_key(first.config)
    ]
    sign = -1.0 if source.direction == "minimize" else 1.0
    return max(rows, key=lambda t: (sign * (t.value or 0.0), -(t.number or 0)), default=None)


def candidates(store: Store, ranked: list[Source]) -> Iterator[Candidate]:
    """Every source's winner in rank order, then every runner-up."""
    firsts: list[tuple[Source, TrialRow]] = []
    for src in ranked:
        best = winner(store, src)
        if best is not None:
            firsts.append((src, best))
            yield Candidate(src, best, "winner")
    for src, best in firsts:
        second = runner_up(store, src, best)
        if second is not None:
            yield Candidate(src, second, "runner-up")


def project(config: Mapping[str, Any], space: SearchSpace) -> tuple[dict[str, Any], list[str]]:
    """`config` as values of `space`'s parameters: (the values kept, what was dropped and
    why). Fields the space does not search are left to it (fixed fields take its values);
    a value outside a parameter's domain, or of a parameter inactive beside the others, is
    dropped and left to the engine."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in config.items():
        if value is None:
            continue
        param = space.parameters.get(key)
        if param is None:
            if key in space.fixed and not same(space.fixed[key], value):
                dropped.append(f"{key}={value!r} (fixed to {space.fixed[key]!r} here)")
            continue
        if param.contains(value):
            kept[key] = value
        else:
            dropped.append(f"{key}={value!r} (outside {param.domain()})")
    resolved = space.resolve(kept)
    for key in [k for k in kept if resolved.get(k) is None]:
        dropped.append(f"{key}={kept.pop(key)!r} (inactive here)")
    return kept, dropped


def _seed(cand: Candidate, space: SearchSpace, planner: TrialPlanner, complete: Complete) -> Seed:
    cfg, dropped = project(cand.trial.config, space)
    cfg, filled = complete(cfg)
    source = cand.text()
    config, reason = vet_seed(space, planner, cfg, source=cand.id)
    if dropped:
        source += f"; dropped: {', '.join(dropped)}"
    if filled:
        # the values only: the rules' ids are the project's own (the report shows this text)
        values = ", ".join(f.split(" (rule ")[0] for f in filled)
        source += f"; completed as the rules require: {values}"
    if reason is not None:
        return Seed(id=cand.id, source=source, config=config, reason=reason)
    return Seed(id=cand.id, source=source, config=config, enqueued=True)


def warm_seeds(
    store: Store,
    spec: SweepSpec,
    space: SearchSpace,
    planner: TrialPlanner,
    *,
    gpu_name: str,
    metric: str,
    complete: Complete,
    taken: Mapping[str, str],
) -> list[Seed]:
    """Up to `search.warm_start` configurations of earlier sweeps (module docstring), each a
    seed `warm:<sweep>#<trial>`; one that is the same configuration as a seed in `taken`
    (config key -> seed id) or an earlier warm seed is left out with that reason, as is one
    that does not fit."""
    limit = spec.search.warm_start
    if limit <= 0:
        return []
    seen = dict(taken)
    out: list[Seed] = []
    queued = 0
    for cand in candidates(store, sources(store, spec, gpu_name, metric)):
        if queued >= limit:
            break
        seed = _seed(cand, space, planner, complete)
        if seed.enqueued:
            key = config_key(seed.config)
            if key in seen:
                seed = seed.model_copy(
                    update={"enqueued": False, "reason": f"the same configuration as {seen[key]}"}
                )
            else:
                seen[key] = seed.id
                queued += 1
        out.append(seed)
    return out
