"""What crosses between the sweep and a worker: the TrialSpec a worker runs and the TrialResult
it sends back (serialisable: both cross to Ray actors), and what the driver does with a result
before storing it (counting it as launched or not, scrubbing secrets from its text).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from autotune.engines.base import Failure, FailureClass, LaunchReport
from autotune.store.models import TrialStatus


class TrialSpec(BaseModel):
    """Everything a worker needs to run one trial (serialisable: it crosses to Ray actors)."""

    model_config = ConfigDict(frozen=True)

    sweep: str
    number: int
    config: dict[str, Any]
    engine: str = "sglang"
    engine_version: str
    model: str = Field(description="what the engine loads (--model-path)")
    gpu: str = Field(description="GPU catalog name (the simulator needs it), or cpu")
    tp: int = 1
    simulate: bool = False
    sim_time_scale: float = 1.0
    sim_seed: int = 0
    sim_alloc_deviation: float = 1.0
    sim_slowdown: float = Field(1.0, description="this launch's run-to-run time factor")
    sim_start_fails: bool = Field(False, description="this launch's start fails (not the config)")
    sim_extra_args: list[str] = Field(default_factory=list)
    gpu_free_gib: float | None = None
    host_free_gib: float | None = None
    scenarios: list[dict[str, Any]] = Field(description="in the order to run (cheap first)")
    probe: str | None = None
    probe_threshold: float | None = Field(
        None, description="prune when the probe's main figure is worse than this"
    )
    probe_higher_is_better: bool = True
    cut_scenario: str | None = Field(
        None, description="the scenario whose benchmark stops at cut_after_s (search.cut_below)"
    )
    cut_after_s: float | None = Field(
        None, description="past this many seconds its throughput cannot reach the cut-off"
    )
    startup_timeout_s: float = 900.0
    bench_timeout_s: float = 3600.0
    stop_grace_s: float = 20.0
    host: str = "127.0.0.1"
    port: int | None = None
    env: dict[str, str] = Field(default_factory=dict)
    log_dir: str
    registry_path: str | None = None
    launcher: list[str] | None = Field(
        None, description="argv prefix replacing the engine's program (the simulator's)"
    )
    repeat: int = Field(0, description="0: the search run; >0: a finalist re-run")
    quality: dict[str, Any] | None = Field(
        None,
        description="the quality probe to answer after the workload (autotune.quality.guard."
        "QualityProbe as JSON), None: not guarded",
    )
    secrets: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="values of the ${env:NAME} references in config and env (never stored)",
    )

    def engine_env(self) -> dict[str, str]:
        """`env` with its references resolved: what the engine process gets."""
        from autotune.secrets import resolve_refs

        return resolve_refs(self.env, self.secrets)


class ScenarioMeasurement(BaseModel):
    scenario: str
    kind: str
    value: float | None = Field(description="the scenario's main figure (mean over repeats)")
    figures: dict[str, float | None]
    result: dict[str, Any] = Field(description="ScenarioResult without per-request rows")


class TrialResult(BaseModel):
    number: int
    status: TrialStatus
    measurements: list[ScenarioMeasurement] = Field(default_factory=list)
    launch: LaunchReport | None = None
    failure: Failure | None = None
    log_tail: str = ""
    reason: str | None = Field(None, description="why pruned or interrupted")
    timings: dict[str, float] = Field(default_factory=dict)
    worker: str = ""
    log_path: str | None = None
    pid: int | None = None
    port: int | None = None
    stop: dict[str, Any] | None = None
    vram_peak_mib: float | None = None
    final_metrics: dict[str, float] = Field(default_factory=dict)
    repeat: int = 0
    command: dict[str, Any] | None = Field(
        None, description="what a real trial started, secrets kept out (sweep.trial_record)"
    )

    def figures(self) -> dict[str, float | None]:
        """`scenario.figure` -> value over all measurements, plus `launch.field`."""
        out: dict[str, float | None] = {}
        for m in self.measurements:
            for k, v in m.figures.items():
                out[f"{m.scenario}.{k}"] = v
        if self.launch is not None:
            for k, v in self.launch.model_dump().items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    out[f"launch.{k}"] = float(v)
        return out


def started_nothing(res: TrialResult) -> bool:
    """Failed before any engine process was spawned (port taken, launcher missing): such a
    trial is not counted as launched. A lost worker may have started one, so it counts."""
    return (
        res.status == TrialStatus.FAILED
        and res.pid is None
        and res.launch is None
        and not res.measurements
        and (res.failure is None or res.failure.cls != FailureClass.WORKER_LOST)
    )


def scrub_result(res: TrialResult, secrets: Iterable[str]) -> TrialResult:
    """`res` with every known secret value removed from its free text (log tail, reasons,
    the startup log's warnings): the driver stores and prints all of it."""
    from autotune.secrets import hide

    values = [v for v in secrets if v]
    if not values:
        return res
    failure = res.failure
    if failure is not None:
        failure = failure.model_copy(
            update={
                "reason": hide(failure.reason, values),
                "evidence": hide(failure.evidence, values) if failure.evidence else None,
            }
        )
    launch = res.launch
    if launch is not None and launch.warnings:
        launch = launch.model_copy(update={"warnings": [hide(w, values) for w in launch.warnings]})
    return res.model_copy(
        update={
            "log_tail": hide(res.log_tail, values),
            "reason": hide(res.reason, values) if res.reason else res.reason,
            "failure": failure,
            "launch": launch,
        }
    )
