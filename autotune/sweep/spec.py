"""The sweep spec (YAML): target, search space, workload, objective, budget, finalists.

Every error names the file and the field (dotted path) and says what would be valid. Example::

    name: demo-4080s
    target: {engine: sglang, engine_version: "0.5.17", model: qwen3.8-27b-awq-int4,
             gpu: rtx-4080-super-32g, tp: 1}
    simulate: {time_scale: 50}
    space: {file: builtin, overrides: {}, fixed: {kv_cache_dtype: fp8_e4m3}}
    workload:
      scenarios:
        - {kind: decode, name: probe, prompt_len: 128, output_len: 64, num_requests: 2}
        - {kind: throughput, prompt_len: 512, output_len: 128, concurrency: 8}
    objective: {metric: throughput.output_tok_s, vram_headroom_gib: 0.3}
    budget: {max_trials: 40, until: "07:00"}
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from autotune.errors import ConfigError, did_you_mean

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
    max_trials: int | None = Field(
        50, ge=1, description="launched trials (planner-pruned ones cost nothing, not counted)"
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
        "the environment (launcher missing, API key refused, port in use); 0: never",
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
    n_startup_trials: int = Field(8, ge=0, description="random trials before TPE models")
    refine: float = Field(
        0.25,
        ge=0,
        le=0.9,
        description="last share of the trial budget spent climbing from the best configuration "
        "to its one-parameter neighbours (0: sampler only)",
    )


class FinalistsSpec(_Section):
    top_k: int = Field(3, ge=0, description="best trials re-measured at the end (0: none)")
    repeats: int = Field(3, ge=1, description="fresh launches per finalist")


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


class SweepSpec(_Section):
    name: str = Field(
        min_length=1,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
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


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_for(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The section model that owns the field at `loc` (for 'did you mean')."""
    model: type[BaseModel] | None = SweepSpec
    for part in loc[:-1]:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        ann = field.annotation
        nxt = None
        for cand in (ann, *getattr(ann, "__args__", ())):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                nxt = cand
            for inner in getattr(cand, "__args__", ()):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    nxt = inner
        model = nxt
    return model


def _validation_error(exc: ValidationError, source: str, text: str | None = None) -> ConfigError:
    from autotune.yamlio import line_of, short

    err = exc.errors()[0]
    loc = tuple(err["loc"])
    field = _loc(loc) or None
    if err["type"] == "extra_forbidden":
        owner = _model_for(loc)
        valid = sorted(owner.model_fields) if owner is not None else []
        msg = f"unknown field {loc[-1]!r}{did_you_mean(str(loc[-1]), valid) if valid else ''}"
    elif err["type"] == "missing":
        msg = "required field is missing"
    else:
        msg = err["msg"].removeprefix("Value error, ")
        if "input" in err and err["type"] not in ("model_type",):
            msg += f" (got {short(err['input'])})"  # bounded: the input can be huge
    more = len(exc.errors()) - 1
    if more:
        msg += f" (and {more} more error{'s' if more > 1 else ''})"
    line = line_of(text, [p for p in loc if isinstance(p, str | int)]) if text else None
    if line is not None:
        msg += f" (line {line})"
    return ConfigError(msg, source=source, field=field)


def parse_spec(data: Any, *, source: str = "spec", text: str | None = None) -> SweepSpec:
    """Validate a mapping (parsed YAML) into a SweepSpec, with cross-field checks; with the YAML
    `text`, errors give the line of the field at fault."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"expected a mapping at the top level, got {got}", source=source)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc, source, text) from None
    try:
        _check_cross(spec, source)
    except ConfigError as exc:
        raise _with_line(exc, text) from None
    return spec


def _with_line(exc: ConfigError, text: str | None) -> ConfigError:
    """`exc` with the line of its field in `text` appended (when found)."""
    from autotune.yamlio import line_of

    if not text or not exc.field:
        return exc
    path: list[str | int] = [int(p) if p.isdigit() else p for p in exc.field.split(".")]
    line = line_of(text, path)
    if line is None:
        return exc
    message = str(exc)
    prefix = ": ".join(p for p in (exc.source, exc.field) if p) + ": "
    out = ConfigError(
        f"{message.removeprefix(prefix)} (line {line})", source=exc.source, field=exc.field
    )
    return out


def load_spec(path: str | Path) -> tuple[SweepSpec, str]:
    """Read and validate a spec file; returns the spec and its verbatim text."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the sweep spec: {exc.strerror or exc}", source=str(p)
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (byte {exc.start}): save the spec as UTF-8", source=str(p)
        ) from None
    return spec_from_yaml(text, source=str(p), base_dir=p.parent), text


def spec_from_yaml(text: str, *, source: str = "spec", base_dir: Path | None = None) -> SweepSpec:
    """Parse YAML text into a spec; a relative space file is resolved against `base_dir`."""
    from autotune.yamlio import load_yaml

    spec = parse_spec(load_yaml(text, source=source), source=source, text=text)
    if base_dir is not None and spec.space.file != "builtin":
        f = Path(spec.space.file).expanduser()
        if not f.is_absolute():
            f = (base_dir / f).resolve()
        spec = spec.model_copy(update={"space": spec.space.model_copy(update={"file": str(f)})})
    return spec


def _check_cross(spec: SweepSpec, source: str) -> None:
    from autotune.bench.scenarios import scenario_from_dict
    from autotune.engines import ENGINES

    if spec.target.engine not in ENGINES:
        raise ConfigError(
            f"unknown engine {spec.target.engine!r}{did_you_mean(spec.target.engine, list(ENGINES))}",
            source=source,
            field="target.engine",
        )
    from autotune.planner.dispatch import CPU_TARGET, PLANNERS
    from autotune.sim import SIM_ENGINES

    engine = spec.target.engine
    if spec.simulated and engine not in SIM_ENGINES:
        raise ConfigError(
            f"the simulated engine impersonates {', '.join(SIM_ENGINES)}, not {engine}; "
            "remove `simulate:` to run the real engine",
            source=source,
            field="simulate",
        )
    if spec.simulated and spec.target.gpu in ("auto", CPU_TARGET):
        raise ConfigError(
            f"the simulated engine needs a named GPU (e.g. rtx-4080-super-32g), not "
            f"{spec.target.gpu}",
            source=source,
            field="target.gpu",
        )
    if spec.target.cpu and not (engine in PLANNERS and PLANNERS[engine].runs_on_cpu):
        cpu_engines = [e for e, p in PLANNERS.items() if p.runs_on_cpu]
        raise ConfigError(
            f"{engine} needs a GPU; gpu `{CPU_TARGET}` is a target only for "
            f"{', '.join(cpu_engines)}",
            source=source,
            field="target.gpu",
        )
    _check_port_workers(spec, source)
    labels: list[str] = []
    for i, raw in enumerate(spec.workload.scenarios):
        sc = scenario_from_dict(raw, source=f"{source}: workload.scenarios[{i}]")
        if sc.label in labels:
            raise ConfigError(
                f"two scenarios are called {sc.label!r}; give each a distinct `name`",
                source=source,
                field=f"workload.scenarios[{i}].name",
            )
        labels.append(sc.label)
    if spec.workload.probe is not None and spec.workload.probe not in labels:
        raise ConfigError(
            f"probe {spec.workload.probe!r} is not a scenario{did_you_mean(spec.workload.probe, labels)}",
            source=source,
            field="workload.probe",
        )
    refs: list[tuple[str, str]] = [("objective.metric", spec.objective.metric)]
    refs += [
        (f"objective.multi[{i}].metric", m.metric)
        for i, m in enumerate(spec.objective.multi or [])
    ]
    refs += [
        (f"objective.constraints[{i}].metric", c.metric)
        for i, c in enumerate(spec.objective.constraints)
    ]
    for field, metric in refs:
        check_metric(metric, labels, source=source, field=field)


def port_workers_error(port: int, workers: str, *, source: str | None = None) -> ConfigError:
    return ConfigError(
        f"engine.port {port} is fixed but execution.workers is {workers}: every worker would "
        "start its engine on that one port (port_in_use); remove engine.port (a free port per "
        "trial) or set execution.workers: 1",
        source=source,
        field="engine.port",
    )


def _check_port_workers(spec: SweepSpec, source: str) -> None:
    """A fixed port serves one engine at a time: reject it with more than one worker where the
    worker count is known from the spec (the executor checks GPU groups it detects)."""
    port, workers = spec.engine.port, spec.execution.workers
    if port is None:
        return
    if workers is not None:
        if workers > 1:
            raise port_workers_error(port, str(workers), source=source)
        return
    if spec.simulated:  # two simulator slots by default
        raise port_workers_error(port, "unset (2 simulated slots)", source=source)
    gpus = spec.target.gpus
    if not spec.target.cpu and gpus is not None and gpus // spec.target.tp > 1:
        groups = gpus // spec.target.tp
        raise port_workers_error(port, f"unset ({groups} GPU groups)", source=source)


def check_metric(metric: str, scenarios: list[str], *, source: str, field: str) -> None:
    """`SCENARIO.FIGURE` must name a scenario of the workload and a figure it reports."""
    owner, dot, fig = metric.rpartition(".")
    if not dot:
        raise ConfigError(
            f"expected SCENARIO.FIGURE or launch.FIELD, got {metric!r}; scenarios: "
            f"{', '.join(scenarios)}",
            source=source,
            field=field,
        )
    if owner == "launch":
        if fig not in LAUNCH_FIGURES:
            raise ConfigError(
                f"unknown launch figure {fig!r}{did_you_mean(fig, list(LAUNCH_FIGURES))}",
                source=source,
                field=field,
            )
        return
    if owner not in scenarios:
        raise ConfigError(
            f"{metric!r} names no scenario of the workload{did_you_mean(owner, [*scenarios, 'launch'])}",
            source=source,
            field=field,
        )
    if fig in SCENARIO_FIGURES or LATENCY_FIGURE.match(fig) or POINT_FIGURE.match(fig):
        return
    valid = [*SCENARIO_FIGURES, "ttft_p95_s (any of ttft/itl/tpot/e2e x mean/p50/p90/p95/p99)"]
    raise ConfigError(
        f"unknown figure {fig!r}{did_you_mean(fig, valid)}", source=source, field=field
    )
