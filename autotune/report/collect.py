"""Gather everything a report shows from the results database into one typed ReportData.

Nothing here renders; it reads the sweep, its trials, measurements and failures, the Optuna
study beside them (importances), and derives what a person needs to act: winner vs baseline per
scenario with the spread over repeats, the top configurations as changes from the baseline, the
Pareto front, failures by class, what bounded concurrency, the headroom left, the decode ceiling,
and provenance. Missing pieces (a sweep still running, a failed baseline, too few trials) become
notes, never exceptions.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import warnings
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from autotune.planner.dispatch import engine_label, engine_model_path, is_cpu_target
from autotune.report.launch import Redactor, redact_mapping
from autotune.sweep.trial import rescale  # simulator wall-clock -> simulated-GPU units

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.store.models import FailureRow, MeasurementRow, SweepRow, TrialRow

Direction = Literal["maximize", "minimize"]
TOP_N = 10
GIB = 2**30
# SGLang refuses a HiCache host pool above available host RAM - 10 GiB (P3).
HOST_RAM_MARGIN_GIB = 10.0
# Figures shown beside each scenario's main figure (when the scenario has them).
SIDE_FIGURES = ("output_tok_s", "ttft_p50_s", "ttft_p95_s", "tpot_p50_s")
LOG_TAIL_LINES = 25


class Spread(BaseModel):
    """One figure over every repeat of every run of a scenario."""

    figure: str
    higher_is_better: bool = True
    values: list[float] = Field(default_factory=list)
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    stdev: float | None = None
    runs: int = Field(0, description="measurement rows (engine launches) behind the values")

    @classmethod
    def of(cls, figure: str, higher: bool, values: Sequence[float], runs: int) -> Spread:
        vals = [float(v) for v in values]
        return cls(
            figure=figure,
            higher_is_better=higher,
            values=vals,
            mean=statistics.fmean(vals) if vals else None,
            min=min(vals) if vals else None,
            max=max(vals) if vals else None,
            stdev=statistics.stdev(vals) if len(vals) >= 2 else None,
            runs=runs,
        )


class ScenarioSummary(BaseModel):
    scenario: str
    kind: str | None = None
    concurrency: int | None = None
    main: Spread
    figures: dict[str, float | None] = Field(
        default_factory=dict, description="mean over runs of each flat figure"
    )
    requests: int = 0
    errors: int = 0


class FailureInfo(BaseModel):
    failure_class: str
    reason: str
    evidence: str | None = None
    log_tail: str | None = None


class TrialInfo(BaseModel):
    id: int
    number: int | None
    status: str
    config: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    value: float | None = None
    values: list[float] | None = None
    plan: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None
    launch: dict[str, Any] | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_s: float | None = None
    log_path: str | None = None
    source: str | None = Field(None, description="sampler, baseline, known_good:K1, rerun:#n")
    vram_peak_mib: float | None = None
    constraints: dict[str, float] = Field(default_factory=dict, description="> 0: violated")
    scenarios: dict[str, ScenarioSummary] = Field(default_factory=dict)
    failure: FailureInfo | None = None
    baseline: bool = False

    @property
    def feasible(self) -> bool:
        return not any(v > 0 for v in self.constraints.values())

    @property
    def label(self) -> str:
        return f"#{self.number}" if self.number is not None else f"id {self.id}"


class Finalist(BaseModel):
    """A top configuration launched again (fresh engines) to measure its spread."""

    number: int | None
    runs: int
    mean: float | None
    stdev: float | None = None
    min: float | None = None
    max: float | None = None


class Comparison(BaseModel):
    """Winner vs baseline on one scenario."""

    scenario: str
    kind: str | None
    figure: str
    higher_is_better: bool
    baseline: Spread | None
    winner: Spread | None
    change_pct: float | None = Field(None, description="winner vs baseline, signed")
    better: bool | None = None
    side: dict[str, tuple[float | None, float | None]] = Field(
        default_factory=dict, description="figure -> (baseline, winner)"
    )


class RankedTrial(BaseModel):
    rank: int
    number: int | None
    value: float | None
    values: list[float] | None = None
    change_pct: float | None = None
    changes: dict[str, tuple[Any, Any]] = Field(
        default_factory=dict, description="field -> (baseline value, this trial's value)"
    )
    winner: bool = False
    baseline: bool = False
    feasible: bool = True


class FailureGroup(BaseModel):
    failure_class: str
    count: int
    trials: list[int | None]
    example_trial: int | None
    example_reason: str
    example_evidence: str | None = None
    example_log_tail: str | None = None
    example_log: str | None = Field(None, description="the example trial's server log")


class ParetoPoint(BaseModel):
    number: int | None
    values: list[float]
    throughput: float | None = None
    ttft_p95_s: float | None = None
    on_front: bool = False


class Capacity(BaseModel):
    """What bounded the winner's concurrency and the headroom it leaves (per GPU)."""

    bound_by: str | None = None
    bound_text: str = ""
    max_running_requests: int | None = None
    kv_pool_tokens: int | None = None
    mamba_slots: int | None = None
    slots_per_request: int | None = None
    launch_kv_pool_tokens: int | None = None
    launch_mamba_slots: int | None = None
    launch_max_running_requests: int | None = None
    gpu_memory_gib: float | None = None
    predicted_use_gib: float | None = None
    vram_headroom_gib: float | None = Field(None, description="predicted, at peak load")
    free_after_startup_gib: float | None = Field(None, description="parsed from the log")
    vram_peak_gib: float | None = Field(None, description="sampled through NVML under load")
    measured_headroom_gib: float | None = None
    hicache: bool = False
    host_pool_gb: float | None = None
    host_mamba_gb: float | None = None
    host_available_gib: float | None = None
    host_headroom_gib: float | None = None
    host_refusal_margin_gib: float = HOST_RAM_MARGIN_GIB
    cpu: bool = Field(False, description="a CPU run: the headroom is host RAM, not VRAM")


class DecodeCeiling(BaseModel):
    ceiling_tok_s: float | None = None
    bandwidth_gbs: float | None = None
    weight_read_gb: float | None = None
    measured_tok_s: float | None = None
    measured_scenario: str | None = None
    share: float | None = None
    speculative: str | None = None
    note: str = ""


class Provenance(BaseModel):
    engine: str
    engine_label: str | None = Field(None, description="how people write it: llama.cpp, vLLM")
    engine_version: str | None
    gpu: str
    gpu_label: str | None = None
    tp: int = 1
    driver: str
    model: str
    model_hash: str
    spec_hash: str
    autotune_version_sweep: str | None = None
    autotune_version_report: str
    sweep_created: datetime | None = None
    sweep_updated: datetime | None = None
    first_trial_started: datetime | None = None
    last_trial_finished: datetime | None = None
    generated_at: datetime
    db: str
    optuna_study: str | None = None


class Importances(BaseModel):
    values: dict[str, float] = Field(default_factory=dict)
    method: str = ""
    note: str = ""


class ReportData(BaseModel):
    sweep: str
    status: str
    simulated: bool
    description: str = ""
    objective_metric: str
    objective_direction: Direction = "maximize"
    objectives: list[tuple[str, Direction]] = Field(default_factory=list)
    multi_objective: bool = False
    spec: dict[str, Any] | None = None
    model_path: str
    host: str = "127.0.0.1"
    port: int | None = Field(None, description="spec engine.port when the sweep fixed one")
    env: dict[str, str] = Field(default_factory=dict, description="engine env from the spec")
    launcher: list[str] | None = Field(None, description="spec engine.launcher (real sweeps)")
    tp: int = 1
    trials: list[TrialInfo]
    counts: dict[str, int]
    baseline: TrialInfo | None = None
    winner: TrialInfo | None = None
    feasible: bool = Field(True, description="False: no trial met the constraints, no winner")
    scenarios: list[str] = Field(default_factory=list)
    comparison: list[Comparison] = Field(default_factory=list)
    top: list[RankedTrial] = Field(default_factory=list)
    finalists: list[Finalist] = Field(default_factory=list)
    pareto: list[ParetoPoint] = Field(default_factory=list)
    pareto_axes: tuple[str, str] = ("TTFT p95 (s)", "throughput (tok/s)")
    failures: list[FailureGroup] = Field(default_factory=list)
    importances: Importances = Importances()
    capacity: Capacity | None = None
    decode: DecodeCeiling | None = None
    provenance: Provenance
    notes: list[str] = Field(default_factory=list)


# -- reading -------------------------------------------------------------------------------------


def collect(store: Store, sweep_name: str, *, redactor: Redactor | None = None) -> ReportData:
    """Read sweep `sweep_name` from `store` (StorageError naming the sweeps that exist if not).

    Secret-named config fields and env vars are redacted here, so nothing downstream can leak
    them; `redactor` learns their values to scrub free text (log tails) too.
    """
    red = redactor if redactor is not None else Redactor()
    row = store.get_sweep(sweep_name)
    sweep_id = row.id or 0
    notes: list[str] = []
    spec, spec_dict = _spec(row, notes)
    simulated = _simulated(row, spec)

    refs: list[tuple[str, Direction]] = []
    if spec is not None:
        refs = [(r.metric, r.direction or "maximize") for r in spec.objective_refs()]
    if not refs:
        refs = [("value", "maximize")]
    direction: Direction = refs[0][1]

    rows = store.get_trials(sweep_id)
    failures = store.get_failures(sweep_id)
    fail_by_trial: dict[int, FailureRow] = {}
    for f in failures:
        fail_by_trial.setdefault(f.trial_id, f)
    trials = [_trial(store, t, fail_by_trial.get(t.id or 0), red) for t in rows]
    env = _spec_env(spec)
    red.add_from(env, env=True)

    baseline = _baseline(row, trials, store, notes)
    finalists = _finalists(row)
    winner = _winner(row, trials, direction, finalists)
    # measured trials but none feasible, or every proposal rejected by the planner
    feasible = winner is not None or not (
        any(t.status == "complete" for t in trials)
        or (trials and all(t.status == "pruned" and t.launch is None for t in trials))
    )
    if not feasible:
        notes.append(
            "no trial satisfies the constraints (or nothing fits): there is no winner; "
            "the closest trials are listed under Top configurations"
        )
    elif winner is None:
        notes.append("no trial completed: there is no winner yet")
    early = (row.notes or {}).get("early_stop")
    if isinstance(early, dict):
        notes.append(
            f"the sweep stopped early: {early.get('trials')} trials in a row failed with "
            f"{early.get('failure_class')}, a fault of the environment ({early.get('reason')})"
        )
    scenarios = _scenario_order(spec, trials)
    counts: dict[str, int] = defaultdict(int)
    for t in trials:
        counts[t.status] += 1

    data = ReportData(
        sweep=row.name,
        status=row.status,
        simulated=simulated,
        description=spec.description if spec is not None else "",
        objective_metric=refs[0][0],
        objective_direction=direction,
        objectives=refs,
        multi_objective=len(refs) > 1,
        spec=redact_mapping(spec_dict) if spec_dict is not None else None,
        model_path=engine_model_path(spec.target.model_path or spec.target.model)
        if spec
        else row.model,
        host=spec.engine.host if spec else "127.0.0.1",
        port=spec.engine.port if spec else None,  # None: the engine's own default port
        env=redact_mapping(env, env=True),
        launcher=list(spec.engine.launcher)
        if spec is not None and not simulated and getattr(spec.engine, "launcher", None)
        else None,
        tp=spec.target.tp if spec else 1,
        trials=trials,
        counts=dict(sorted(counts.items())),
        baseline=baseline,
        winner=winner,
        feasible=feasible,
        scenarios=scenarios,
        comparison=_compare(baseline, winner, scenarios),
        top=_top(trials, baseline, winner, direction),
        finalists=finalists,
        failures=_failure_groups(trials),
        provenance=_provenance(store, row, spec, simulated, trials),
        notes=notes,
    )
    data.pareto, data.pareto_axes = _pareto(data)
    data.capacity = _capacity(data)
    data.decode = _decode_ceiling(data)
    data.importances = importances(store, row, refs)
    if row.status == "running":
        notes.insert(0, "the sweep is still running: this report shows the trials so far")
    if baseline is not None and baseline.status != "complete":
        notes.append(
            f"the baseline (trial {baseline.label}, engine defaults) did not complete "
            f"({baseline.status}): changes against it cannot be measured"
        )
    return data


def _spec(row: SweepRow, notes: list[str]) -> tuple[Any, dict[str, Any] | None]:
    import yaml

    if not row.spec_yaml.strip():
        notes.append("the sweep stored no spec: objective and workload order are guessed")
        return None, None
    try:
        raw = yaml.safe_load(row.spec_yaml)
    except yaml.YAMLError:
        notes.append("the stored spec is not valid YAML")
        return None, None
    from autotune.errors import AutotuneError
    from autotune.sweep.spec import spec_from_yaml

    base = row.notes.get("spec_dir") if isinstance(row.notes, Mapping) else None
    try:
        spec = spec_from_yaml(
            row.spec_yaml,
            source=f"sweep {row.name} (stored spec)",
            base_dir=Path(base) if base else None,
        )
        return spec, raw
    except AutotuneError as exc:
        notes.append(f"the stored spec no longer validates ({exc}); read as plain YAML")
        return None, raw if isinstance(raw, dict) else None


def _simulated(row: SweepRow, spec: Any) -> bool:
    if isinstance(row.notes, Mapping) and "simulated" in row.notes:
        return bool(row.notes["simulated"])
    return bool(spec is not None and spec.simulated)


def _spec_env(spec: Any) -> dict[str, str]:
    return dict(spec.engine.env) if spec is not None else {}


def _plan_of(prediction: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The planner's Plan dict: nested under `plan` (sweep.planning.Assessment.prediction) or
    the prediction itself."""
    if not prediction:
        return None
    nested = prediction.get("plan")
    if isinstance(nested, Mapping):
        return dict(nested)
    return dict(prediction) if "bound_by" in prediction else None


def _trial(store: Store, t: TrialRow, failure: FailureRow | None, red: Redactor) -> TrialInfo:
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
        vram_peak_mib=_num(record.get("vram_peak_mib")),
        constraints={
            str(k): float(v)
            for k, v in (record.get("constraints") or {}).items()
            if _num(v) is not None
        },
        started_at=t.started_at,
        finished_at=t.finished_at,
        duration_s=t.duration_s,
        log_path=t.log_path,
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


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


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
        figs.update({str(k): rescale(str(k), _num(v), scale) for k, v in raw.items()})
    stats = res.get("stats")
    if isinstance(stats, Mapping):
        for lat in ("ttft", "itl", "tpot", "e2e"):
            st = stats.get(lat)
            if isinstance(st, Mapping):
                for q in ("mean", "p50", "p90", "p95", "p99"):
                    figs.setdefault(f"{lat}_{q}_s", rescale("x_s", _num(st.get(q)), scale))
    stored = metrics.get("figures")
    if isinstance(stored, Mapping) and stored is not raw:
        figs.update({str(k): _num(v) for k, v in stored.items()})
    return figs


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


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
            scale = _num(res.get("sim_time_scale")) or 1.0
            main = res.get("main")
            vals: list[float] = []
            if isinstance(main, Mapping):
                figure = str(main.get("figure") or figure)
                higher = bool(main.get("higher_is_better", higher))
                raw = [_num(x) for x in main.get("values") or []] or [_num(main.get("mean"))]
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


def _baseline(
    row: SweepRow, trials: Sequence[TrialInfo], store: Store, notes: list[str]
) -> TrialInfo | None:
    """Trial 0 = engine defaults (DESIGN: orchestrator). The sweep marks it with source
    "baseline" in the launch record and in the Optuna trial's user attributes (a baseline the
    planner pruned was never launched, so only the study knows it)."""
    by_source = next((t for t in trials if t.source == "baseline"), None)
    if by_source is not None:
        by_source.baseline = True
        return by_source
    number: int | None = None
    meta = row.notes if isinstance(row.notes, Mapping) else {}
    for key in ("baseline_trial", "baseline_trial_number", "baseline"):
        v = meta.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            number = v
            break
        if isinstance(v, Mapping) and isinstance(v.get("number"), int):
            number = int(v["number"])
            break
    if number is None:
        number = _baseline_from_study(store, row)
    if number is None and any(t.number == 0 for t in trials):
        number = 0
    found = next((t for t in trials if t.number == number), None) if number is not None else None
    if found is None:
        notes.append("no baseline trial (engine defaults) was found: changes are shown as values")
        return None
    found.baseline = True
    return found


def _baseline_from_study(store: Store, row: SweepRow) -> int | None:
    study = _load_study(store, row)
    if study is None:
        return None
    try:
        from autotune.sweep.study import SOURCE_ATTR
    except ImportError:  # pragma: no cover - the sweep package is part of autotune
        SOURCE_ATTR = "autotune_source"
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(SOURCE_ATTR) == "baseline":
            return int(t.number)
    return None


def _load_study(store: Store, row: SweepRow) -> Any:
    if not row.optuna_study_name:
        return None
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return optuna.load_study(study_name=row.optuna_study_name, storage=store.storage_url)
    except Exception:  # no study (a sweep stored by hand), or an unreadable one
        return None


def _finalists(row: SweepRow) -> list[Finalist]:
    meta = row.notes if isinstance(row.notes, Mapping) else {}
    out = []
    for f in meta.get("finalists") or []:
        if isinstance(f, Mapping):
            out.append(
                Finalist(
                    number=f.get("number"),
                    runs=int(f.get("runs") or 0),
                    mean=_num(f.get("mean")),
                    stdev=_num(f.get("stdev")),
                    min=_num(f.get("min")),
                    max=_num(f.get("max")),
                )
            )
    return out


def _winner(
    row: SweepRow,
    trials: Sequence[TrialInfo],
    direction: Direction,
    finalists: Sequence[Finalist] = (),
) -> TrialInfo | None:
    """The best finalist by its mean over fresh launches (sweep.finalists), else the sweep's
    best trial, else the best complete trial that breaks no constraint."""
    ranked = [f for f in finalists if f.mean is not None and f.runs > 0]
    if ranked:
        sign = 1.0 if direction == "maximize" else -1.0
        top = max(ranked, key=lambda f: sign * (f.mean or 0.0))
        hit = next((t for t in trials if t.number == top.number), None)
        if hit is not None and hit.status == "complete" and hit.feasible:
            return hit
    if row.best_trial_id is not None:
        hit = next((t for t in trials if t.id == row.best_trial_id), None)
        if hit is not None and hit.feasible:
            return hit
    # a trial that breaks a constraint is never the winner
    done = [t for t in trials if t.status == "complete" and t.value is not None and t.feasible]
    if not done:
        return None
    sign = 1.0 if direction == "maximize" else -1.0
    return max(done, key=lambda t: (sign * (t.value or 0.0), -(t.number or 0)))


def _scenario_order(spec: Any, trials: Sequence[TrialInfo]) -> list[str]:
    order: list[str] = []
    if spec is not None:
        from autotune.bench.scenarios import scenario_from_dict

        for raw in spec.workload.scenarios:
            try:
                order.append(scenario_from_dict(raw).label)
            except Exception:
                continue
    for t in trials:
        for name in t.scenarios:
            if name not in order:
                order.append(name)
    return order


def change_pct(base: float | None, new: float | None) -> float | None:
    if base is None or new is None or base == 0:
        return None
    return (new - base) / abs(base) * 100.0


def _compare(
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


def _top(
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
        )
        for i, t in enumerate(done[:TOP_N])
    ]


def _failure_groups(trials: Sequence[TrialInfo]) -> list[FailureGroup]:
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


# -- derived sections ----------------------------------------------------------------------------


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


def _pareto(data: ReportData) -> tuple[list[ParetoPoint], tuple[str, str]]:
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


def _gpu_spec(name: str) -> Any:
    from autotune.errors import AutotuneError
    from autotune.hardware.gpus import get_gpu

    try:
        return get_gpu(name)
    except AutotuneError:
        return None


def _capacity(data: ReportData) -> Capacity | None:
    w = data.winner
    if w is None:
        return None
    plan = w.plan or {}
    launch = w.launch or {}
    cap = Capacity(
        bound_by=plan.get("bound_by"),
        max_running_requests=plan.get("max_running_requests"),
        kv_pool_tokens=plan.get("kv_pool_tokens"),
        mamba_slots=plan.get("mamba_slots"),
        slots_per_request=plan.get("slots_per_request"),
        launch_kv_pool_tokens=launch.get("kv_pool_tokens"),
        launch_mamba_slots=launch.get("mamba_slots"),
        launch_max_running_requests=launch.get("max_running_requests"),
        free_after_startup_gib=_num(launch.get("available_gpu_mem_gib")),
        cpu=is_cpu_target(data.provenance.gpu),
    )
    per = cap.slots_per_request or 1
    cap.bound_text = {
        "kv_tokens": "the KV cache pool (KV tokens)",
        "mamba_slots": f"the mamba state slots (hybrid model, {per} slot{'s' if per > 1 else ''}"
        " per request)",
        "user": "max_running_requests as configured",
        "default": "the engine's default max_running_requests (neither pool was the limit)",
    }.get(str(cap.bound_by), "unknown (no planner prediction was stored)")
    gpu = _gpu_spec(data.provenance.gpu)
    if gpu is not None:
        cap.gpu_memory_gib = round(gpu.memory_gib, 2)
    slack, need = _num(plan.get("slack_gib")), _num(plan.get("slack_needed_gib"))
    if slack is not None and need is not None:
        cap.vram_headroom_gib = round(slack - need, 2)
        if cap.gpu_memory_gib is not None:
            cap.predicted_use_gib = round(cap.gpu_memory_gib - cap.vram_headroom_gib, 2)
    peak_mib = w.vram_peak_mib
    if peak_mib is not None:
        cap.vram_peak_gib = round(peak_mib / 1024, 2)
        if cap.gpu_memory_gib is not None:
            cap.measured_headroom_gib = round(cap.gpu_memory_gib - cap.vram_peak_gib, 2)
    cap.hicache = bool(w.config.get("enable_hierarchical_cache"))
    if cap.hicache:
        cap.host_pool_gb = _num(plan.get("host_pool_gb")) or _num(launch.get("host_pool_gb"))
        cap.host_mamba_gb = _num(plan.get("host_mamba_gb"))
        cap.host_available_gib = _num(plan.get("host_available_gib"))
        if cap.host_available_gib is not None and cap.host_pool_gb is not None:
            used_gib = (cap.host_pool_gb + (cap.host_mamba_gb or 0.0)) * 1e9 / GIB
            cap.host_headroom_gib = round(cap.host_available_gib - used_gib, 2)
    return cap


# The field that turns speculative decoding on: SGLang, vLLM (the search space's), llama.cpp.
SPECULATIVE_FIELDS = ("speculative_algorithm", "speculative_method", "spec_type")


def _decode_ceiling(data: ReportData) -> DecodeCeiling | None:
    """Bandwidth over the bytes one decode step reads per token (planner.perf), and how close
    the winner's single-stream decode gets."""
    w = data.winner
    if w is None:
        return None
    from autotune.errors import AutotuneError

    out = DecodeCeiling()
    spec_alg = next((w.config[k] for k in SPECULATIVE_FIELDS if w.config.get(k)), None)
    out.speculative = str(spec_alg) if spec_alg else None
    gpu = _gpu_spec(data.provenance.gpu)
    try:
        from autotune.models.card import ModelCard
        from autotune.planner.dispatch import (
            default_version,
            load_target_model,
            plan_for,
            scheduler_plan,
        )
        from autotune.planner.perf import PerfModel, perf_summary
        from autotune.planner.sglang import Plan

        engine = data.provenance.engine
        target = load_target_model(engine, data.provenance.model)
        if not isinstance(target, ModelCard):
            raise LookupError(
                f"the roofline model reads a model card, and {engine_label(engine)} served "
                "a GGUF file"
            )
        if gpu is None:
            raise LookupError(f"{data.provenance.gpu} is not a catalogued GPU")
        plan = (
            Plan.model_validate(w.plan)
            if w.plan
            else plan_for(
                engine,
                target,
                gpu,
                dict(w.config),
                version=data.provenance.engine_version or default_version(engine),
                tp=data.tp,
            )
        )
        model = PerfModel(target, gpu, scheduler_plan(plan), config=dict(w.config))
        out.ceiling_tok_s = float(perf_summary(model)["decode_ceiling_tok_s"])
        out.bandwidth_gbs = gpu.effective_bandwidth_gbs
        out.weight_read_gb = round(model.weight_read_bytes / 1e9, 2)
    except (AutotuneError, LookupError, ValueError) as exc:
        out.note = f"no ceiling: {exc}"
    best: tuple[int, float, str] | None = None
    for name, s in w.scenarios.items():
        dec = s.main.mean if s.main.figure == "decode_tok_s" else s.figures.get("decode_tok_s")
        if dec is None:
            continue
        rank = (0 if s.kind == "decode" else 1) + (0 if (s.concurrency or 1) == 1 else 2)
        if best is None or rank < best[0]:
            best = (rank, dec, name)
    if best is not None:
        out.measured_tok_s, out.measured_scenario = best[1], best[2]
        if out.ceiling_tok_s:
            out.share = best[1] / out.ceiling_tok_s
    return out


# -- provenance ---------------------------------------------------------------------------------


def _driver(row: SweepRow, simulated: bool) -> str:
    meta = row.notes if isinstance(row.notes, Mapping) else {}
    # notes["driver"] is the sweep's driver process (PID, host), not the GPU driver.
    for key in ("nvidia_driver", "driver_version"):
        if isinstance(meta.get(key), str) and meta[key]:
            return str(meta[key])
    if simulated:
        return "n/a (simulated)"
    if is_cpu_target(row.gpu):
        return "n/a (CPU run, no GPU)"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        text = v.decode() if isinstance(v, bytes) else str(v)
        return f"{text} (read when the report was written)"
    except Exception:
        return "n/a (no NVIDIA driver where the report was written; the sweep stored none)"


MODEL_FILE_HEAD_BYTES = 4 * 2**20  # a GGUF header (metadata, vocabulary, tensor table)


def model_hash(model: str) -> str:
    """A built-in card: hash of its JSON; a folder: hash of config.json and the safetensors
    headers' names and sizes (not the tensors: gigabytes)."""
    from autotune.models.builtin import BUILTIN_CARDS

    if model in BUILTIN_CARDS:
        blob = BUILTIN_CARDS[model].model_dump_json().encode()
        return f"built-in card, sha256 {hashlib.sha256(blob).hexdigest()[:16]}"
    path = Path(model).expanduser()
    if path.is_file():  # one file (a GGUF): its size and header, not gigabytes of tensors
        h = hashlib.sha256(str(path.stat().st_size).encode())
        with open(path, "rb") as fh:
            h.update(fh.read(MODEL_FILE_HEAD_BYTES))
        return f"file (size + first {MODEL_FILE_HEAD_BYTES // 2**20} MiB), sha256 {h.hexdigest()[:16]}"
    if not path.is_dir():
        return "n/a (model folder not found where the report was written)"
    h = hashlib.sha256()
    cfg = path / "config.json"
    if cfg.is_file():
        h.update(cfg.read_bytes())
    for f in sorted(path.glob("*.safetensors")):
        h.update(f.name.encode())
        h.update(str(f.stat().st_size).encode())
        with open(f, "rb") as fh:
            head = fh.read(8)
            if len(head) == 8:
                n = int.from_bytes(head, "little")
                if 0 < n < 100 * 2**20:
                    h.update(fh.read(n))
    return f"folder (config.json + safetensors headers), sha256 {h.hexdigest()[:16]}"


def _provenance(
    store: Store, row: SweepRow, spec: Any, simulated: bool, trials: Sequence[TrialInfo]
) -> Provenance:
    from autotune import __version__

    gpu = _gpu_spec(row.gpu)
    meta = row.notes if isinstance(row.notes, Mapping) else {}
    starts = [t.started_at for t in trials if t.started_at is not None]
    ends = [t.finished_at for t in trials if t.finished_at is not None]
    model = row.model or (spec.target.model if spec is not None else "")
    engine = row.engine or (spec.target.engine if spec is not None else "sglang")
    return Provenance(
        engine=engine,
        engine_label=engine_label(engine),
        engine_version=row.engine_version,
        gpu=row.gpu,
        gpu_label=gpu.label
        if gpu is not None
        else ("CPU (no GPU)" if is_cpu_target(row.gpu) else None),
        tp=spec.target.tp if spec is not None else 1,
        driver=_driver(row, simulated),
        model=model,
        model_hash=str(meta.get("model_hash") or model_hash(model)),
        spec_hash=row.spec_hash,
        autotune_version_sweep=str(meta["autotune_version"])
        if meta.get("autotune_version")
        else None,
        autotune_version_report=__version__,
        sweep_created=row.created_at,
        sweep_updated=row.updated_at,
        first_trial_started=min(starts) if starts else None,
        last_trial_finished=max(ends) if ends else None,
        generated_at=datetime.now(UTC),
        db=store.display_url,
        optuna_study=row.optuna_study_name,
    )


# -- importances --------------------------------------------------------------------------------

MIN_TRIALS_FOR_IMPORTANCE = 4
FEW_TRIALS = 12


def importances(store: Store, row: SweepRow, refs: Sequence[tuple[str, Direction]]) -> Importances:
    """Importances of the parameters for the main objective, from the Optuna study in the same
    database. Too few complete trials, or no study, gives a note instead."""
    study = _load_study(store, row)
    if study is None:
        return Importances(note="no Optuna study found in the database for this sweep")
    import optuna

    complete = [
        t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE
    ]
    varied = {k for t in complete for k in t.params}
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCE or not varied:
        return Importances(
            note=f"too few completed trials with sampled parameters ({len(complete)}; at least "
            f"{MIN_TRIALS_FOR_IMPORTANCE} are needed) to estimate importances"
        )
    target = None
    if len(study.directions) > 1:

        def target(t: optuna.trial.FrozenTrial) -> float:
            return float(t.values[0])

    # PED-ANOVA (Optuna 5's default evaluator) also ranks conditional parameters,
    # which a sweep has many of (HiCache size only with HiCache on, draft tokens only with
    # speculation); fANOVA would drop every parameter absent from one completed trial.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), target=target
            )
    except (RuntimeError, ValueError, ZeroDivisionError) as exc:
        return Importances(note=f"importances could not be computed: {exc}")
    if not values:
        return Importances(note="no sampled parameter to rank")
    notes = []
    left_out = sorted(varied - set(values))
    if left_out:
        notes.append(f"not ranked (absent from too many trials): {', '.join(left_out)}")
    if len(complete) < FEW_TRIALS:
        notes.append(f"only {len(complete)} completed trials: treat this as a rough ranking")
    return Importances(
        values={k: float(v) for k, v in values.items()},
        method=f"PED-ANOVA over {len(complete)} completed trials, objective {refs[0][0]}",
        note="; ".join(notes),
    )


def jsonable(data: BaseModel) -> Any:
    return json.loads(data.model_dump_json())
