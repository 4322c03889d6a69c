"""The configurations a fresh sweep queues before the sampler takes over: trial 0 = the engine's
defaults (the baseline every result is compared with), the FIELD-NOTES K configurations that
apply to the target (completed where a rule demands a value they leave unset, checked against
the space and the planner), the planner's room seed, and for `sampler: grid` every configuration
of the space. A fresh sweep also queues the winners of earlier sweeps on the same target in the
same database right after the baseline (`search.warm_start`, sweep/warm.py).

Known-good configurations are stated for a model card on a GPU (FIELD-NOTES K); a target without
either (a GGUF model, a CPU run) has none to try."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError
from autotune.hardware.gpus import GPUSpec
from autotune.models.card import ModelCard
from autotune.space.engine_fields import ENGINE_FIELDS
from autotune.space.models import SearchSpace
from autotune.space.rules import ConfigValue, same
from autotune.sweep.known_good import Seed, applicable
from autotune.sweep.planning import TrialPlanner, vet_seed
from autotune.sweep.spec import SweepSpec
from autotune.sweep.study import config_key, enqueue

if TYPE_CHECKING:
    from autotune.planner.dispatch import TargetModel
    from autotune.sweep.state import SweepState

GRID_LIMIT = 100_000


def complete_by_rules(
    config: dict[str, Any], space: SearchSpace, planner: TrialPlanner
) -> tuple[dict[str, Any], list[str]]:
    """Fill parameters a seed leaves unset (None) where a rule requires a value: e.g. K1 names
    no hicache_io_backend, and P2 requires direct on hybrid models. Returns the config and
    what was filled."""
    filled: list[str] = []
    for rule in planner.rules:  # the rules the target can decide
        if rule.kind != "constraint":
            continue
        lookup = {**config, **planner.context.facts()}
        if not all(m.test(lookup.get(k)) for k, m in rule.when.items()):
            continue
        for key, match in rule.require.items():
            if match.test(lookup.get(key)) or config.get(key) is not None:
                continue
            param = space.parameters.get(key)
            if param is None:
                continue
            candidates: Sequence[ConfigValue]
            try:
                candidates = param.grid_values()
            except ConfigError:
                candidates = [c for c in match.values() if c is not None]
            value = next((c for c in candidates if c is not None and match.test(c)), None)
            if value is not None:
                config[key] = value
                filled.append(f"{key}={value} (rule {rule.id})")
    return config, filled


def _known_good(
    spec: SweepSpec, space: SearchSpace, planner: TrialPlanner, card: ModelCard, gpu: GPUSpec
) -> list[Seed]:
    seeds = applicable(
        engine=spec.target.engine,
        gpu=gpu.name,
        quantization=card.quantization.scheme,
        tp=spec.target.tp,
        provided=space.fixed,
    )
    fields = ENGINE_FIELDS.get(space.engine, frozenset())
    out: list[Seed] = []
    for seed in seeds:
        if seed.reason:
            out.append(seed)
            continue
        cfg: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        reason = None
        for key, value in seed.config.items():
            if key in space.parameters:
                cfg[key] = value
            elif key in space.fixed:
                if not same(space.fixed[key], value):
                    reason = f"{key} is fixed to {space.fixed[key]!r} in this sweep, {seed.id} has {value!r}"
            elif key in fields:
                extra[key] = value  # a flag the space does not search: carried as is
            else:
                reason = f"{key} is not an engine field"
        if reason is None:
            cfg, filled = complete_by_rules(cfg, space, planner)
            config, reason = vet_seed(space, planner, cfg, source=seed.id, extra=extra)
            if reason is None:
                note = f" (completed: {', '.join(filled)})" if filled else ""
                out.append(
                    Seed(
                        id=f"known_good:{seed.id}",
                        source=seed.source + note,
                        config=config,
                        enqueued=True,
                    )
                )
                continue
        out.append(seed.model_copy(update={"reason": reason, "id": f"known_good:{seed.id}"}))
    return out


def _room(spec: SweepSpec, space: SearchSpace, planner: TrialPlanner) -> list[Seed]:
    """The planner's room seed (sweep/room.py) for the workload's concurrency."""
    from autotune.sweep.room import room_config

    scenarios = spec.workload.scenarios
    concurrency = max((int(s.get("concurrency") or 1) for s in scenarios), default=1)
    agents = any(s.get("kind") == "agent" for s in scenarios)
    config = room_config(
        space,
        planner,
        concurrency=concurrency,
        host_counts=agents,
        complete=lambda c: complete_by_rules(c, space, planner)[0],
    )
    if config is None:
        return []
    return [
        Seed(
            id="planner:room",
            source=f"the memory knobs where the planner holds the most of {concurrency} "
            "concurrent request(s) at once (sweep/room.py)",
            config=config,
            enqueued=True,
        )
    ]


def seed_configs(
    spec: SweepSpec,
    space: SearchSpace,
    planner: TrialPlanner,
    card: TargetModel,
    gpu: GPUSpec | None,
) -> list[Seed]:
    """Baseline, known-good and (grid) enumerated configurations, in queue order. The baseline
    is queued even if the planner predicts it fails: that prediction is itself a finding, and
    the gate records it as trial 0."""
    seeds: list[Seed] = []
    if spec.search.baseline:
        seeds.append(
            Seed(
                id="baseline",
                source="engine defaults (space defaults)",
                config=space.defaults(),
                enqueued=True,
            )
        )
    if spec.search.known_good and isinstance(card, ModelCard) and gpu is not None:
        seeds += _known_good(spec, space, planner, card, gpu)
    if spec.search.room_seed and spec.search.sampler != "grid":
        seeds += _room(spec, space, planner)
    if spec.search.sampler == "grid":
        for i, cfg in enumerate(space.grid(max_points=GRID_LIMIT)):
            seeds.append(Seed(id="grid", source=f"grid point {i}", config=cfg, enqueued=True))
    return seeds


def describe(seeds: list[Seed]) -> list[Mapping[str, Any]]:
    return [s.model_dump(exclude={"config"}) for s in seeds if s.id != "grid"]


def with_warm_starts(state: SweepState, seeds: list[Seed]) -> list[Seed]:
    """`seeds` with the winners of earlier sweeps on this target (sweep/warm.py) right after
    the baseline: they are the best guesses there are. One that repeats another seed is left
    out (noted)."""
    from autotune.sweep.warm import warm_seeds

    setup = state.setup
    if setup.spec.search.sampler == "grid":
        return seeds  # the grid enqueues every configuration anyway
    taken = {config_key(s.config): s.id for s in seeds if s.enqueued}
    warm = warm_seeds(
        state.store,
        setup.spec,
        setup.space,
        setup.planner,
        gpu_name=setup.gpu_name,
        metric=setup.refs[0].metric,
        complete=lambda c: complete_by_rules(c, setup.space, setup.planner),
        taken=taken,
    )
    head = [s for s in seeds if s.id == "baseline"]
    return head + warm + [s for s in seeds if s.id != "baseline"]


def queue_seeds(state: SweepState) -> None:
    """Queue a fresh sweep's seeds in the study (Optuna hands enqueued trials out before it
    samples) and note them (the report lists each, with why one was left out)."""
    setup = state.setup
    seeds = seed_configs(setup.spec, setup.space, setup.planner, setup.card, setup.gpu)
    seeds = with_warm_starts(state, seeds)
    for s in seeds:
        if s.enqueued:
            enqueue(state.study, setup.space, s.config, s.id)
    state.notes["seeds"] = describe(seeds)
