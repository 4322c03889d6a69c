"""What a sweep resolves once, before its first trial: the target model and GPU, the search
space, the scenarios and the probe, the objectives, the planner that gates each configuration
and the PID registry; and from these the TrialSpec a worker gets for one configuration."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.bench.scenarios import MAIN_FIGURE, scenario_from_dict
from autotune.errors import ConfigError
from autotune.planner.dispatch import (
    CPU_TARGET,
    engine_model_path,
    load_target_model,
    resolve_target_gpu,
)
from autotune.sweep.planning import TrialPlanner, longest_request_tokens
from autotune.sweep.spec import MetricRef, SweepSpec
from autotune.sweep.trial import TrialSpec, order_scenarios

if TYPE_CHECKING:
    from autotune.bench.scenarios import AnyScenario
    from autotune.hardware.gpus import GPUSpec
    from autotune.planner.dispatch import TargetModel
    from autotune.space.models import SearchSpace
    from autotune.store.db import Store
    from autotune.store.models import SweepRow


@dataclass
class SweepSetup:
    """The resolved, unchanging side of one run of a sweep."""

    spec: SweepSpec
    sweep_id: int
    out_dir: Path
    card: TargetModel  # the target model as its engine's planner reads it (card, GGUF header)
    gpu: GPUSpec | None  # None: a CPU target
    gpu_name: str
    space: SearchSpace
    scenarios: list[AnyScenario]  # in the order each trial runs them
    probe: str | None  # the scenario whose figure prunes a trial early
    probe_higher: bool  # whether a higher probe figure is better
    refs: list[MetricRef]  # the objectives, directions resolved
    planner: TrialPlanner
    registry_path: Path
    # values of the spec's ${env:NAME} references: memory only, handed to the workers
    secrets: dict[str, str] = field(default_factory=dict)
    t_start: float = field(default_factory=time.monotonic)
    # the quality guard's reference answers (autotune.quality.guard): probe id -> Answer JSON
    quality_reference: dict[str, Any] | None = None

    def guarded(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """`config` as the quality guard judges it: without the fields this sweep's space
        pins to one value. A lossy value the user pinned (fp8 KV fixed in the spec, say) is
        the sweep's premise, not a choice of the search: the reference shares it, and the
        guard compares what the search varies (else no trial could be the reference)."""
        pinned = set(self.space.fixed) | {
            n for n, p in self.space.parameters.items() if _single_valued(p)
        }
        return {k: v for k, v in config.items() if k not in pinned}

    @property
    def maximize(self) -> bool:
        """Whether the first objective is maximised."""
        return (self.refs[0].direction or "maximize") == "maximize"

    def trial_spec(
        self,
        number: int,
        config: Mapping[str, Any],
        *,
        repeat: int,
        best_probe: float | None,
        best_wall_s: float | None = None,
        reference: bool = False,
    ) -> TrialSpec:
        """What a worker runs for `config` (repeat 0: the search run, 1..R: finalist re-runs,
        which are never pruned by the probe). A `reference` run (the baseline, or its re-run
        after a resume) is never cut either: every result is compared with its value."""
        s, t = self.spec, self.spec.target
        sim = s.simulate
        extra: list[str] = []
        if sim is not None and sim.max_startup_s is not None:
            extra += ["--sim-max-startup-s", f"{sim.max_startup_s:g}"]
        if sim is not None and sim.alloc_deviation != 1.0:
            extra += ["--sim-alloc-deviation", f"{sim.alloc_deviation:g}"]
        sim_seed = (sim.seed if sim else 0) + number * 1009 + repeat
        luck = sim.variation().draw(sim_seed) if sim is not None else None
        if luck is not None and luck.slowdown != 1.0:
            extra += ["--sim-slowdown", f"{luck.slowdown:.6g}"]
        if luck is not None and luck.start_fails:
            extra += ["--sim-start-fails"]
        cut = repeat == 0 and not reference
        threshold = self.probe_threshold(best_probe)
        log_dir = self.out_dir / "trials" / (f"{number:04d}" + (f"-r{repeat}" if repeat else ""))
        return TrialSpec(
            sweep=s.name,
            number=number,
            config=dict(config),
            engine=t.engine,
            engine_version=t.engine_version,
            model=engine_model_path(t.model_path or t.model),
            gpu=self.gpu_name,
            tp=t.tp,
            simulate=s.simulated,
            sim_time_scale=sim.time_scale if sim else 1.0,
            sim_seed=sim_seed,
            sim_alloc_deviation=sim.alloc_deviation if sim else 1.0,
            sim_slowdown=luck.slowdown if luck else 1.0,
            sim_start_fails=bool(luck and luck.start_fails),
            sim_extra_args=extra,
            gpu_free_gib=t.gpu_free_gib,
            host_free_gib=t.host_free_gib,
            scenarios=[sc.model_dump(mode="json") for sc in self.scenarios],
            probe=self.probe if repeat == 0 else None,
            probe_threshold=threshold if cut else None,
            probe_higher_is_better=self.probe_higher,
            cut_scenario=self.cut_scenario if cut else None,
            cut_after_s=self.cut_after_s(best_wall_s) if cut else None,
            startup_timeout_s=s.engine.startup_timeout_s,
            bench_timeout_s=s.engine.bench_timeout_s,
            stop_grace_s=s.engine.stop_grace_s,
            host=s.engine.host,
            port=s.engine.port,
            env=dict(s.engine.env),
            log_dir=str(log_dir),
            registry_path=str(self.registry_path),
            launcher=list(s.engine.launcher) if s.engine.launcher else None,
            repeat=repeat,
            quality=self._quality(config, finalist=repeat > 0),
            secrets=self.secrets,
        )

    def _quality(self, config: Mapping[str, Any], *, finalist: bool) -> dict[str, Any] | None:
        from autotune.quality.guard import probe_for

        probe = probe_for(
            self.spec,
            self.spec.target.engine,
            self.guarded(config),
            self.quality_reference,
            finalist=finalist,
            longest_request=self.planner.need_tokens,
        )
        return probe.model_dump() if probe is not None else None

    @property
    def cut_scenario(self) -> str | None:
        """The objective's scenario when a slow run of it can be stopped early (search.
        cut_below): its figure is work over wall time and its work is fixed, so a run that has
        taken 1/k of the best run's time can no longer reach k of the best's figure."""
        return cut_scenario(self.spec, self.scenarios, self.refs)

    def cut_after_s(self, best_wall_s: float | None) -> float | None:
        if best_wall_s is None or self.cut_scenario is None:
            return None
        return best_wall_s / self.spec.search.cut_below

    def probe_threshold(self, best_probe: float | None) -> float | None:
        """The probe figure below which (above, for a lower-is-better figure) a trial is cut
        short: `workload.prune_below` of the best probe figure so far."""
        if not self.probe or best_probe is None:
            return None
        k = self.spec.workload.prune_below
        return best_probe * k if self.probe_higher else best_probe / max(k, 1e-9)


WORK_RATE_FIGURES = frozenset({"output_tok_s", "input_tok_s", "requests_per_s"})


def cut_scenario(
    spec: SweepSpec, scenarios: list[AnyScenario], refs: list[MetricRef]
) -> str | None:
    """See SweepSetup.cut_scenario: None when the sweep's objective cannot be cut."""
    from autotune.bench.scenarios import AgentScenario, ThroughputScenario

    if spec.search.cut_below <= 0 or len(refs) != 1 or refs[0].direction == "minimize":
        return None
    label, _, figure = refs[0].metric.rpartition(".")
    sc = next((s for s in scenarios if s.label == label), None)
    if sc is None or figure not in WORK_RATE_FIGURES:
        return None
    if figure != "input_tok_s" and not sc.ignore_eos:
        return None  # the model may stop early: the work is not fixed
    if isinstance(sc, ThroughputScenario) and sc.duration_s is None:
        return label
    return label if isinstance(sc, AgentScenario) else None


def prepare(
    spec: SweepSpec,
    *,
    store: Store,
    row: SweepRow,
    out_dir: Path,
    notes: dict[str, Any],
    secrets: Mapping[str, str] | None = None,
) -> SweepSetup:
    """Resolve the target, the space, the scenarios and the planner of the sweep stored as
    `row`. What the report needs to know about them goes into `notes` (the detected NVIDIA
    driver, planner rules the target cannot decide); the row's GPU becomes the one resolved."""
    engine = spec.target.engine
    card = load_target_model(engine, spec.target.model)
    gpu = _target_gpu(spec, notes)
    gpu_name = gpu.name if gpu is not None else CPU_TARGET
    if row.gpu != gpu_name:
        # `gpu: auto` (or a catalog alias) is stored as the GPU it resolved to, so that the
        # report and `autotune status` name the hardware the trials ran on.
        store.update_sweep(row.id or 0, gpu=gpu_name)
    space = target_space(spec, card, gpu, notes)
    scenarios = order_scenarios(
        [
            scenario_from_dict(d, source=f"{spec.name}: workload.scenarios[{i}]")
            for i, d in enumerate(spec.workload.scenarios)
        ],
        spec.workload.order,
    )
    probe = spec.workload.probe or (scenarios[0].label if len(scenarios) > 1 else None)
    probe_sc = next((s for s in scenarios if s.label == probe), None)
    planner = _planner(spec, card, gpu, space, scenarios, notes)
    if not spec.simulated and gpu is not None:
        # a real machine's own memory, learnt from its logs (autotune calibrate)
        rows = store.get_calibrations(engine=engine, gpu=gpu_name, model=spec.target.model)
        # the same release's launches where there are some (its accounting may differ)
        rows = [r for r in rows if r.engine_version == planner.version] or rows
        if planner.seed(rows):
            notes["calibrations"] = {"count": len(rows), "sources": [r.source for r in rows]}
    setup = SweepSetup(
        spec=spec,
        sweep_id=row.id or 0,
        out_dir=out_dir,
        card=card,
        gpu=gpu,
        gpu_name=gpu_name,
        space=space,
        scenarios=scenarios,
        probe=probe,
        probe_higher=MAIN_FIGURE[probe_sc.kind][1] if probe_sc is not None else True,
        refs=spec.objective_refs(),
        planner=planner,
        registry_path=registry_path_for(store, out_dir),
        secrets=dict(secrets or {}),
    )
    setup.quality_reference = stored_reference(store, row)
    return setup


def _single_valued(p: Any) -> bool:
    try:
        return int(p.grid_count()) == 1
    except ConfigError:
        return False  # a continuous range


def stored_reference(store: Store, row: SweepRow) -> dict[str, Any] | None:
    """A resumed sweep's quality reference: the answers of the trial its notes name."""
    number = (row.notes or {}).get("quality_reference")
    if not isinstance(number, int):
        return None
    from autotune.quality.guard import SCENARIO

    for t in store.get_trials(row.id or 0):
        if t.number != number:
            continue
        for m in store.get_measurements(t.id or 0):
            answers = ((m.metrics or {}).get("result") or {}).get("answers")
            if m.scenario == SCENARIO and isinstance(answers, dict):
                return answers
    return None


def _target_gpu(spec: SweepSpec, notes: dict[str, Any]) -> GPUSpec | None:
    """The catalog GPU of the spec, or the one detected for `gpu: auto` (its driver noted)."""
    if not spec.simulated and spec.target.gpu.strip().lower() == "auto":
        from autotune.hardware.detect import detect_gpus

        found = detect_gpus()[0]
        # the report's provenance: the driver the trials ran under, not the report writer's
        notes["nvidia_driver"] = found.driver
        return found.spec
    return resolve_target_gpu(spec.target.engine, spec.target.gpu, field="target.gpu")


def _planner(
    spec: SweepSpec,
    card: TargetModel,
    gpu: GPUSpec | None,
    space: SearchSpace,
    scenarios: list[AnyScenario],
    notes: dict[str, Any],
) -> TrialPlanner:
    planner = TrialPlanner(
        card=card,
        gpu=gpu,
        space=space,
        version=spec.target.engine_version,
        tp=spec.target.tp,
        gpu_free_gib=spec.target.gpu_free_gib,
        host_free_gib=spec.target.host_free_gib,
        headroom_gib=spec.objective.vram_headroom_gib,
        need_tokens=longest_request_tokens(scenarios),
        engine=spec.target.engine,
    )
    if planner.skipped_rules:
        notes["rules_skipped"] = {
            "rules": planner.skipped_rules,
            "why": "they test facts this target cannot state: "
            + ", ".join(sorted(planner.unknown_facts)),
        }
    return planner


def build_space(spec: SweepSpec) -> SearchSpace:
    """The spec's search space: the engine's built-in one or a file, with the spec's
    overrides and fixed values applied."""
    from autotune.space import builtin_space, load_space

    base = (
        builtin_space(spec.target.engine)
        if spec.space.file == "builtin"
        else load_space(spec.space.file)
    )
    overrides: dict[str, Any] = dict(spec.space.overrides)
    overrides.update(spec.space.fixed)
    if not overrides:
        return base
    return base.with_overrides(overrides, source=f"{spec.name}: space.overrides/fixed")


def target_space(
    spec: SweepSpec, card: TargetModel, gpu: GPUSpec | None, notes: dict[str, Any]
) -> SearchSpace:
    """The spec's space narrowed to its target (autotune.sweep.narrowing): no flag or value the
    engine version lacks, none a rule forbids on this GPU and model; what was dropped is noted
    for the report."""
    from autotune.planner.dispatch import target_facts
    from autotune.sweep.narrowing import narrow_to_target

    t = spec.target
    context, unknown = target_facts(t.engine, card, gpu, t.engine_version, t.tp)
    space, narrowed = narrow_to_target(
        build_space(spec), version=t.engine_version, context=context, unknown=unknown
    )
    if narrowed:
        notes["narrowed"] = [n.text() for n in narrowed]
    if spec.quality.exclude_lossy:
        from autotune.quality.lossy import lossless_overrides

        overrides = lossless_overrides(space.parameters)
        if overrides:
            space = space.with_overrides(overrides, source=f"{spec.name}: quality.exclude_lossy")
            notes["lossy_excluded"] = sorted(overrides)
    return space


def registry_path_for(store: Store, out_dir: Path) -> Path:
    """The PID registry sits beside an SQLite database (so every sweep that uses that file
    shares it), else in the output folder."""
    from sqlalchemy.engine import make_url

    url = make_url(store.storage_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return Path(url.database).with_name(Path(url.database).name + ".pids.jsonl")
    return out_dir / "pids.jsonl"


def reap_orphans(registry_path: Path, notes: dict[str, Any]) -> None:
    """Stop engines a killed driver left running (their PIDs are in the registry); each one
    stopped is noted under "reaped"."""
    from autotune.process import PidRegistry

    reaped = PidRegistry(registry_path).reap_orphans()
    if reaped:
        notes.setdefault("reaped", []).extend(
            {"pid": e["pid"], "label": e.get("label"), "signal": e.get("signal")} for e in reaped
        )
