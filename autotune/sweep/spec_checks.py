"""The sweep spec's checks across fields and sections, run once the sections are valid: the
engine exists (and the simulator impersonates it, the CPU runs it), a fixed port with one
worker, distinct scenario names, and a probe and metrics that name a scenario and a figure.
"""

from __future__ import annotations

from autotune.errors import ConfigError, did_you_mean
from autotune.sweep.spec_models import (
    LATENCY_FIGURE,
    LAUNCH_FIGURES,
    POINT_FIGURE,
    SCENARIO_FIGURES,
    SweepSpec,
)


def check_cross_fields(spec: SweepSpec, source: str) -> None:
    """Raise a ConfigError naming `source` and the field at fault for the first check failed."""
    _check_target(spec, source)
    _check_space_values(spec, source)
    _check_port_workers(spec, source)
    labels = _scenario_labels(spec, source)
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


def _check_target(spec: SweepSpec, source: str) -> None:
    """A known engine; the simulator only for the engines it impersonates, on a named GPU; a
    CPU target only for an engine that runs on one."""
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


def _bare(exc: Exception) -> str:
    """An error's message without its own 'source: field: ' prefix (re-raised under the spec's)."""
    text = str(exc)
    if isinstance(exc, ConfigError):
        where = ": ".join(p for p in (exc.source, exc.field) if p)
        text = text.removeprefix(f"{where}: ") if where else text
    return text


def _check_space_values(spec: SweepSpec, source: str) -> None:
    """The engine version is one the adapter knows; every value the spec sets is one that
    version's parser takes (fixed values and overrides that fix one) and every choice or bound
    an override gives is one some release takes. Checked here, at load, so that a value no
    trial can launch stops the sweep before it starts, naming the field (not in each trial's
    worker). An unknown name is refused here with the built-in space (a space file's own
    parameters are its check's business);
    a field that needs a companion value passes (the search may set the companion)."""
    from collections.abc import Mapping

    from autotune.errors import UnknownNameError
    from autotune.sweep.narrowing import (
        flag_adapter,
        needs_companion,
        refusal,
        refused_by_every_release,
    )

    t, space = spec.target, spec.space
    try:
        flag_adapter(t.engine).build_command({}, model="model", version=t.engine_version)
    except ConfigError as exc:
        raise ConfigError(_bare(exc), source=source, field="target.engine_version") from None
    both = sorted(set(space.overrides) & set(space.fixed))
    if both:
        raise ConfigError(
            f"{both[0]!r} is in both space.overrides and space.fixed: keep one (fixed sets it "
            "in every trial, overrides narrows what is searched)",
            source=source,
            field=f"space.fixed.{both[0]}",
        )
    # a mapping, fixed or an override, is a parameter the space builds (build_space merges
    # fixed into the overrides): its choices and bounds are probed; anything else is a value
    sets = [(f"space.fixed.{k}", k, v) for k, v in space.fixed.items()]
    sets += [(f"space.overrides.{k}", k, v) for k, v in space.overrides.items()]
    for field, name, value in sets:
        unknown = refusal(t.engine, t.engine_version, name, None)
        if isinstance(unknown, UnknownNameError) and space.file == "builtin":
            # the built-in spaces hold engine fields only (a space file may add its own)
            raise ConfigError(str(unknown), source=source, field=field)
        if value is None:
            continue  # the engine decides
        if not isinstance(value, Mapping):
            why = refusal(t.engine, t.engine_version, name, value)
            if why is not None and not (
                isinstance(why, UnknownNameError) or needs_companion(why, name)
            ):
                raise ConfigError(_bare(why), source=source, field=field)
            continue
        probes = [(f"{field}.choices[{i}]", c) for i, c in enumerate(value.get("choices") or [])]
        probes += [(f"{field}.{b}", value[b]) for b in ("low", "high") if b in value]
        for where, v in probes:
            if v is None:
                continue
            why = refused_by_every_release(t.engine, name, v)
            if why is not None and not isinstance(why, UnknownNameError):
                raise ConfigError(_bare(why), source=source, field=where)


def _scenario_labels(spec: SweepSpec, source: str) -> list[str]:
    """The workload's scenario labels, each scenario valid and its label distinct."""
    from autotune.bench.scenarios import scenario_from_dict

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
    return labels


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
