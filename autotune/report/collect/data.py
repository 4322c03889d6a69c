"""What a report shows, typed: ReportData and its parts (spreads, trials, comparisons, the
Pareto front, failure groups, capacity, the decode ceiling, provenance, importances), with the
constants they use and the conversions the collectors share. Nothing here reads or renders."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

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
    command: dict[str, Any] | None = Field(
        None, description="what a real trial started (sweep.trial_record), secrets kept out"
    )

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
    quality: dict[str, float | None] | None = Field(
        None, description="the quality probe's figures, mean over its runs (None: not probed)"
    )


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
    quality: dict[str, float | None] | None = Field(
        None, description="the quality probe's figures (None: not probed)"
    )


class QualityExample(BaseModel):
    probe: str
    position: int | None
    reference: list[str]
    winner: list[str]


class QualityReport(BaseModel):
    reference_trial: int | None = None
    limits: dict[str, Any] = Field(default_factory=dict)
    winner: dict[str, float | None] | None = None
    guarded_trials: int = 0
    rejected_trials: int = 0
    example: QualityExample | None = None
    defects: list[dict[str, Any]] = Field(default_factory=list)


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


class CorrectionRow(BaseModel):
    label: str
    predicted: int
    corrected: int | None
    allocated: int

    @property
    def raw_error(self) -> float:
        return abs(self.predicted / self.allocated - 1)

    @property
    def corrected_error(self) -> float | None:
        return None if self.corrected is None else abs(self.corrected / self.allocated - 1)


class PlannerCorrection(BaseModel):
    rows: list[CorrectionRow] = Field(default_factory=list)

    @property
    def worst_after(self) -> dict[int, float]:
        """Worst corrected error over the launches after the first 1 and 3."""
        out = {}
        for n in (1, 3):
            errs = [e for r in self.rows[n:] if (e := r.corrected_error) is not None]
            if errs:
                out[n] = max(errs)
        return out


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


class Selection(BaseModel):
    """How the winner was chosen over noisy launches (sweep/confirm.py) and where the
    launches went."""

    winner: int | None = None
    runs: int = 0
    values: list[float] = Field(default_factory=list)
    estimate: float | None = None
    ci95: tuple[float, float] | None = None
    sigma: float | None = Field(None, description="pooled launch-to-launch spread (relative)")
    configurations_rerun: int = 0
    bounds_confident: bool | None = Field(
        None, description="the spec's bounds held with confidence (None: the spec has none)"
    )
    bounds_probability: float | None = Field(
        None, description="chance the winner's true figures meet the spec's bounds"
    )
    launches: dict[str, int] = Field(default_factory=dict, description="purpose -> launches")
    cut_runs: int = Field(0, description="search runs stopped early by search.cut_below")


class WarmStart(BaseModel):
    """A configuration of an earlier sweep on the same target queued as a seed (sweep/warm.py),
    or left out and why."""

    id: str = Field(description="warm:<earlier sweep>#<its trial number>")
    source: str
    queued: bool
    reason: str | None = None
    trial: int | None = Field(None, description="this sweep's trial that launched it")


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
    selection: Selection | None = None
    warm_starts: list[WarmStart] = Field(default_factory=list)
    pareto: list[ParetoPoint] = Field(default_factory=list)
    pareto_axes: tuple[str, str] = ("TTFT p95 (s)", "throughput (tok/s)")
    failures: list[FailureGroup] = Field(default_factory=list)
    importances: Importances = Importances()
    capacity: Capacity | None = None
    correction: PlannerCorrection | None = None
    decode: DecodeCeiling | None = None
    provenance: Provenance
    notes: list[str] = Field(default_factory=list)
    quality: QualityReport | None = Field(None, description="the output-quality guard")
    narrowed: list[str] = Field(
        default_factory=list,
        description="values the sweep never proposed: absent from the engine release or "
        "forbidden on the target by a rule (autotune.sweep.narrowing)",
    )


# -- conversions ---------------------------------------------------------------------------------


def num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def jsonable(data: BaseModel) -> Any:
    return json.loads(data.model_dump_json())
