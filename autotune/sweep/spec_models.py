"""The sweep spec's sections as pydantic models (target, simulate, space, workload, objective,
budget, search, finalists, engine, execution) and what their fields mean: the figures a metric
may name, default directions, the `until` deadline. The checks across sections are in
spec_checks; reading and validating a spec file (and every name here, re-exported) in spec.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.sim.variation import RunVariation

Direction = Literal["maximize", "minimize"]

# Figures a ScenarioResult carries (bench.runner._figures), plus any latency percentile that
# RunStats holds (ttft/itl/tpot/e2e x mean/min/max/p50/p90/p95/p99), plus per-point figures.
SCENARIO_FIGURES = (
    "main",
    "output_tok_s",
    "input_tok_s",
    "requests_per_s",
    "prefill_tok_s",
    "decode_tok_s",
    "tokens_per_chunk",
    "error_rate",
    "cache_hit_rate",
    "cache_hit_rate_usage",
    "spec_accept_length",
)
LATENCY_FIGURE = re.compile(r"^(ttft|itl|tpot|e2e)_(mean|min|max|p50|p90|p95|p99)_s$")
POINT_FIGURE = re.compile(r"^(ttft_s|prefill_tok_s)@(\d+|turn\d+)$")
# Numeric facts of the launch (engines.base.LaunchReport) and of the planner's prediction.
LAUNCH_FIGURES = (
    "kv_pool_tokens",
    "mamba_slots",
    "max_running_requests",
    "max_total_num_tokens",
    "available_gpu_mem_gib",
    "context_len",
    "host_pool_tokens",
)
UNTIL_FORMAT = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TargetSpec(_Section):
    engine: str = Field("sglang", description="engine adapter name (autotune.engines.ENGINES)")
    engine_version: str = Field(
        "0.5.17",
        description="engine version the flags and rules follow; default per engine: sglang "
        "0.5.17, the newest catalogued vLLM, llama.cpp's pinned build",
    )
    model: str = Field(
        description="built-in model card name or a local HF model folder (llama.cpp: a GGUF file)"
    )
    model_path: str | None = Field(
        None, description="what the engine loads (--model-path); default: `model`"
    )
    gpu: str = Field(
        "auto",
        description="GPU catalog name, auto (detect through NVML), or cpu: no GPU (engines that "
        "run on a CPU only, llamacpp)",
    )
    tp: int = Field(1, ge=1, le=64, description="tensor-parallel size of one engine")
    gpus: int | None = Field(
        None, ge=1, description="GPUs to use on each machine; default: all detected"
    )
    gpu_free_gib: float | None = Field(None, gt=0, description="free GiB before weights")
    host_free_gib: float | None = Field(
        None, gt=0, description="host RAM for HiCache (a CPU run: for the whole engine)"
    )

    @model_validator(mode="before")
    @classmethod
    def _version_per_engine(cls, data: Any) -> Any:
        # A missing engine_version is the engine's own default, not SGLang's.
        if isinstance(data, dict) and data.get("engine_version") is None:
            from autotune.planner.dispatch import PLANNERS

            engine = data.get("engine", "sglang")
            if isinstance(engine, str) and engine in PLANNERS:
                data = {**data, "engine_version": PLANNERS[engine].default_version()}
        return data

    @field_validator("engine_version")
    @classmethod
    def _version_number(cls, v: str) -> str:
        from autotune.versions import VALID_FORMS, try_version

        if try_version(v) is None:
            raise ValueError(f"not a version number (expected {VALID_FORMS})")
        return v

    @property
    def cpu(self) -> bool:
        """No GPU: `gpu: cpu` (llama.cpp on the host's CPU)."""
        from autotune.planner.dispatch import is_cpu_target

        return is_cpu_target(self.gpu)


class SimulateSpec(_Section):
    """Run the simulated engine (a real server process speaking SGLang's API) instead."""

    enabled: bool = Field(
        True, description="false: run the real engine although the section is there"
    )
    time_scale: float = Field(
        1.0, gt=0, description="simulated seconds per real second; figures are rescaled back"
    )
    seed: int = Field(0, description="seed of the simulator's timing noise")
    max_startup_s: float | None = Field(
        None, ge=0, description="cap on the real seconds a simulated startup takes"
    )
    alloc_deviation: float = Field(
        1.0,
        ge=0,
        description="scale of the simulated machine's memory beyond the planner's figures "
        "(0: KV pools exactly as planned)",
    )
    run_noise: float = Field(
        0.0,
        ge=0,
        le=0.5,
        description="launch-to-launch spread of the simulated speed (heavy-tailed; real "
        "engines vary 0.03-0.05): two launches of one configuration measure differently",
    )
    straggler_rate: float = Field(
        0.0, ge=0, le=1, description="share of launches that run 1.2x-1.6x slow throughout"
    )
    flaky_start_rate: float = Field(
        0.0,
        ge=0,
        le=1,
        description="share of launches that fail to start for a reason not the configuration's",
    )

    def variation(self) -> RunVariation:
        from autotune.sim.variation import RunVariation

        return RunVariation(self.run_noise, self.straggler_rate, self.flaky_start_rate)


class SpaceSpec(_Section):
    file: str = Field(
        "builtin", description="search space YAML (relative to the spec), or builtin"
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="per-parameter changes: {name: {low: ..}} narrows, {name: value} fixes",
    )
    fixed: dict[str, Any] = Field(default_factory=dict, description="flags set in every trial")


class WorkloadSpec(_Section):
    scenarios: list[dict[str, Any]] = Field(
        min_length=1,
        description="benchmark scenarios run against every trial, each a mapping with a `kind`",
    )
    probe: str | None = Field(
        None, description="scenario that may prune a trial early; default: the cheapest"
    )
    prune_below: float = Field(
        0.5, ge=0, le=1, description="prune when the probe is below this share of the best"
    )
    order: Literal["cheap_first", "as_written"] = Field(
        "cheap_first", description="scenario order in a trial: cheapest first, or as written"
    )


class MetricRef(_Section):
    metric: str = Field(description="SCENARIO.FIGURE (throughput.output_tok_s) or launch.FIELD")
    direction: Direction | None = Field(
        None, description="default: minimize latencies (…_s) and error_rate, maximize the rest"
    )


class ConstraintSpec(_Section):
    metric: str = Field(description="SCENARIO.FIGURE or launch.FIELD the bound applies to")
    max: float | None = Field(None, description="a trial above this value is infeasible")
    min: float | None = Field(None, description="a trial below this value is infeasible")

    @model_validator(mode="after")
    def _bound(self) -> ConstraintSpec:
        if self.max is None and self.min is None:
            raise ValueError("a constraint needs max or min")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}: no trial could meet it")
        return self


class ObjectiveSpec(_Section):
    metric: str = Field("throughput.output_tok_s", description="main objective")
    direction: Direction = Field("maximize", description="direction of `metric`")
    vram_headroom_gib: float = Field(
        0.25, ge=0, description="GPU memory that must stay free after startup (GiB)"
    )
    constraints: list[ConstraintSpec] = Field(
        default_factory=list, description="bounds a trial must meet to count"
    )
    multi: list[MetricRef] | None = Field(
        None, description="multi-objective: these objectives (Pareto front) instead of `metric`"
    )


class BudgetSpec(_Section):
    max_trials: StrictInt | None = Field(
        50,
        ge=1,
        le=100_000,
        description="launched trials (planner-pruned ones cost nothing, not counted)",
    )
    wall_clock_s: float | None = Field(None, gt=0, description="seconds from (re)start")
    until: str | None = Field(None, description="HH:MM local time, next occurrence")
    max_idle_asks: int = Field(
        200, ge=1, description="stop after this many proposals in a row launched nothing"
    )
    stop_after_env_failures: int = Field(
        3,
        ge=0,
        description="stop (exit 4) when this many trials in a row fail alike for a reason of "
        "the environment (launcher missing, API key refused, port in use; an engine of another "
        "release than target.engine_version stops it at the first); 0: never",
    )

    @field_validator("until")
    @classmethod
    def _until(cls, v: str | None) -> str | None:
        if v is not None and not UNTIL_FORMAT.match(v.strip()):
            raise ValueError(f"until must be HH:MM (24 h), e.g. 07:00; got {v!r}")
        return v.strip() if v else v


class SearchSpec(_Section):
    sampler: Literal["tpe", "random", "grid"] = Field(
        "tpe", description="Optuna sampler: TPE, random, or the whole grid"
    )
    seed: int = Field(0, description="sampler seed")
    baseline: bool = Field(True, description="trial 0 = the engine's defaults")
    known_good: bool = Field(
        True,
        description="enqueue the known-good configurations measured on this engine, GPU, "
        "quantization and TP (autotune.sweep.known_good)",
    )
    room_seed: bool = Field(
        True,
        description="queue the configuration whose memory knobs (fraction, KV dtype, mamba "
        "slots, host cache) hold the most of the workload at once, by the planner alone",
    )
    warm_start: int = Field(
        2,
        ge=0,
        le=20,
        description="queue right after the baseline up to this many winners (then runners-up) "
        "of earlier sweeps in the same database on the same engine, model, GPU and TP, the "
        "same engine version and objective first, then the newest; values this space does "
        "not hold are dropped (0: none)",
    )
    n_startup_trials: int = Field(8, ge=0, description="random trials before TPE models")
    refine: float = Field(
        0.25,
        ge=0,
        le=0.9,
        description="last share of the trial budget spent climbing from the best configuration "
        "to its one-parameter neighbours and untried branches (0: sampler only)",
    )
    confirm_runs: int = Field(
        3,
        ge=1,
        le=10,
        description="noisy launches: while the two best configurations cannot be told apart, "
        "launch the one with fewer runs again, up to this many runs each (1: never); the "
        "winner is the best lower confidence bound over all runs",
    )
    confirm_share: float = Field(
        0.25, ge=0, le=0.9, description="most share of the launch budget spent on those re-runs"
    )
    cut_below: float = Field(
        0.5,
        ge=0,
        lt=1,
        description="stop a search run's benchmark once its objective scenario has run 1/this "
        "times as long as the best feasible run took for the same work: its throughput can no "
        "longer reach this share of the best (the trial is pruned; 0: never). Only for "
        "objectives that are work over wall time (output_tok_s, input_tok_s, requests_per_s) "
        "of a scenario with a fixed amount of work (a request count, not duration_s)",
    )


class FinalistsSpec(_Section):
    top_k: int = Field(3, ge=0, description="best trials re-measured at the end (0: none)")
    repeats: int = Field(3, ge=1, description="fresh launches per finalist")


class QualitySpec(_Section):
    enabled: bool = Field(
        True,
        description="answer a fixed probe set greedily with the baseline and with every trial "
        "that touches a lossy knob (KV or state dtype, quantization, speculation) and the "
        "finalists; a trial that drifts beyond the limits is infeasible",
    )
    probes: int = Field(8, ge=1, le=64, description="prompts in the probe set")
    max_tokens: int = Field(32, ge=1, le=1024, description="greedy tokens per answer")
    top_k: int = Field(5, ge=1, le=20, description="log-probabilities per position")
    max_kl: float | None = Field(
        0.02,
        ge=0,
        description="most mean KL divergence (nats) of the top-k next-token distributions "
        "from the baseline's before the answers diverge (null: no limit)",
    )
    min_token_agreement: float | None = Field(
        0.9,
        ge=0,
        le=1,
        description="least mean share of the baseline's tokens reproduced before the first "
        "divergence, over the probes (null: no limit)",
    )
    exclude_lossy: bool = Field(
        False, description="never propose a lossy knob: the space keeps their lossless values"
    )


class EngineRunSpec(_Section):
    startup_timeout_s: float = Field(
        900.0, gt=0, description="seconds a launch may take to become ready"
    )
    bench_timeout_s: float = Field(3600.0, gt=0, description="cap on one trial's workload")
    stop_grace_s: float = Field(
        20.0, ge=0, description="seconds between SIGTERM and SIGKILL when a trial ends"
    )
    host: str = Field("127.0.0.1", description="address the engine listens on")
    port: int | None = Field(None, ge=1, le=65535, description="fixed port; default: free one")
    env: dict[str, str] = Field(
        default_factory=dict, description="environment variables added to every launch"
    )
    launcher: list[str] | None = Field(
        None,
        description="argv prefix that starts the engine, e.g. [/opt/sglang/bin/python, -m, "
        "sglang.launch_server]; default: the adapter's (or the simulator's)",
    )

    @field_validator("launcher")
    @classmethod
    def _launcher_not_empty(cls, v: list[str] | None) -> list[str] | None:
        # An empty list used to mean "the default" silently; say what was meant instead.
        if v is not None and (not v or not all(a.strip() for a in v)):
            raise ValueError(
                "an empty launcher (or an empty argument in it) starts nothing; remove "
                "engine.launcher to use the adapter's default, or give the argv prefix, e.g. "
                "[/opt/sglang/bin/python, -m, sglang.launch_server]"
            )
        return v


class ExecutionSpec(_Section):
    executor: Literal["inprocess", "ray"] = Field(
        "inprocess", description="inprocess: threads on this machine; ray: actors on a cluster"
    )
    workers: int | None = Field(None, ge=1, description="trials at once; default: GPU groups")
    ray_address: str | None = Field(
        None, description="Ray cluster to join (host:port or auto); default: a local one"
    )


# A sweep's name is a file and folder name (reports/NAME, NAME.yaml, autotune-NAME.service)
# and a URL segment: bounded below the file systems' 255 bytes with those affixes, the same
# bound everywhere (200: what the API's paths always allowed, so no earlier sweep is locked out).
NAME_MAX = 200
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class SweepSpec(_Section):
    name: str = Field(
        min_length=1,
        max_length=NAME_MAX,
        pattern=NAME_PATTERN,
        description="sweep name: the database key, --resume NAME, reports/NAME",
    )
    description: str = Field("", description="free text, shown in the report")
    target: TargetSpec = Field(description="what is tuned: engine, version, model, GPU, TP")
    simulate: SimulateSpec | None = Field(
        None, description="present: run the simulated engine instead of the real one"
    )
    space: SpaceSpec = Field(SpaceSpec(), description="the search space and changes to it")
    workload: WorkloadSpec = Field(description="what every trial is benchmarked on")
    objective: ObjectiveSpec = Field(
        ObjectiveSpec(), description="what is optimised and the bounds a trial must meet"
    )
    budget: BudgetSpec = Field(BudgetSpec(), description="when the sweep stops")
    search: SearchSpec = Field(SearchSpec(), description="how configurations are proposed")
    finalists: FinalistsSpec = Field(
        FinalistsSpec(), description="re-measurement of the best trials at the end"
    )
    engine: EngineRunSpec = Field(
        EngineRunSpec(), description="how each engine process is started and stopped"
    )
    execution: ExecutionSpec = Field(ExecutionSpec(), description="where trials run and how many")
    quality: QualitySpec = Field(
        QualitySpec(), description="the output-quality guard: answers compared with the baseline"
    )

    @property
    def simulated(self) -> bool:
        return self.simulate is not None and self.simulate.enabled

    def objective_refs(self) -> list[MetricRef]:
        """The objectives in order (one unless multi-objective), directions resolved."""
        if self.objective.multi:
            return [
                MetricRef(metric=m.metric, direction=m.direction or default_direction(m.metric))
                for m in self.objective.multi
            ]
        return [MetricRef(metric=self.objective.metric, direction=self.objective.direction)]


def default_direction(metric: str) -> Direction:
    """Latencies (…_s, not …tok_s/…per_s) and error rates are minimised; the rest maximised."""
    fig = metric.rpartition(".")[2].split("@")[0]
    if fig.endswith(("tok_s", "per_s")):
        return "maximize"
    if fig.endswith("_s") or fig == "error_rate":
        return "minimize"
    return "maximize"


def until_deadline(until: str, now: datetime | None = None) -> datetime:
    """The next local time HH:MM after `now` (tomorrow if it has passed today)."""
    m = UNTIL_FORMAT.match(until.strip())
    if not m:
        raise ConfigError(f"expected HH:MM (24 h), e.g. 07:00; got {until!r}", field="--until")
    now = now or datetime.now().astimezone()
    at = now.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=0, microsecond=0)
    return at if at > now else at + timedelta(days=1)
