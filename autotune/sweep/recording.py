"""What a finished search trial leaves behind. The result is scrubbed of secrets and judged
once (a Verdict: complete, pruned, failed, failed for a reason that is not the configuration's,
or interrupted); then, in this order, the verdict is written to the database, told to Optuna
and kept in the sweep state; last, the trial's line and the on_trial callback.

    complete          stored with its values and measured constraints; told COMPLETE; the
                      dedupe map and the best so far learn it
    pruned            told PRUNED with the probe figure as step 0
    failed            told PRUNED with launch_failed = 1 (infeasible)
    not the config    (NOT_THE_CONFIG) told FAIL and queued once more
    interrupted       stored interrupted, told FAIL, queued again
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.engines.base import Failure, FailureClass
from autotune.store.models import TrialStatus
from autotune.sweep.executors import lost
from autotune.sweep.state import CONFIRM_SOURCE, NOT_THE_CONFIG, Done
from autotune.sweep.study import enqueue, rerun_source, set_constraints, user_constraints
from autotune.sweep.trial import TrialResult, scrub_result, started_nothing

if TYPE_CHECKING:
    from concurrent.futures import Future

    from autotune.store.db import Store
    from autotune.sweep.planning import Assessment
    from autotune.sweep.setup import SweepSetup
    from autotune.sweep.spec import MetricRef
    from autotune.sweep.state import Running, SweepState

# Failures of the environment, not of the configuration: once they repeat, every later trial
# fails alike, so the sweep stops (budget.stop_after_env_failures) instead of burning its budget.
ENV_FAILURES = frozenset(
    {
        FailureClass.SPAWN_FAILED,
        FailureClass.AUTH_REJECTED,
        FailureClass.PORT_IN_USE,
        FailureClass.ENGINE_MISMATCH,
    }
)
# ...and those that stop it at once: a worker whose engine is another release would give every
# trial it runs that release's argv and memory rules (sweep/installed.py).
ENV_FAILURES_AT_ONCE = frozenset({FailureClass.ENGINE_MISMATCH})


@dataclass
class Verdict:
    """How one search trial ended, decided before anything is written or told."""

    status: TrialStatus  # as judged (printed, and handed to on_trial)
    stored: TrialStatus  # the row's status (an unfinished trial is stored interrupted)
    told: str  # the Optuna state it is told: "complete", "pruned" or "fail"
    text: str  # the trial line's text
    values: list[float] = field(default_factory=list)  # objective values, complete only
    constraints: dict[str, float] | None = None  # set on the Optuna trial before the tell
    probe: float | None = None  # a pruned trial's probe figure, reported as step 0
    done: Done | None = None  # what a later proposal of the configuration is told
    requeue: bool = False  # enqueue the configuration to run again
    wall_s: float | None = None  # the cut scenario's benchmark seconds (search.cut_below)


# -- the result --------------------------------------------------------------------------------


def collect(state: SweepState, item: Running, fut: Future[TrialResult]) -> TrialResult:
    """The trial's result (a lost worker when the executor itself failed), with no secret
    value left in it: everything it says is stored or printed. Its key stops running."""
    try:
        res = fut.result()
    except Exception as exc:  # the executor itself failed
        res = lost(item.spec, f"executor error: {type(exc).__name__}: {exc}")
    state.running_keys.discard(item.key)
    return scrub_result(res, state.setup.secrets.values())


def store_measurements(store: Store, row_id: int, res: TrialResult, *, repeat: int) -> None:
    for m in res.measurements:
        store.add_measurement(
            row_id,
            m.scenario,
            {"figures": m.figures, "result": m.result},
            repeat=repeat,
            value=m.value,
        )


def launch_record(
    item: Running, res: TrialResult, t_done: float, *, simulated: bool
) -> dict[str, Any]:
    """The row's `launch` column: the engine's launch report, timings, worker and process."""
    timings = dict(res.timings)
    timings["driver_pre_s"] = round(item.pre_s, 4)
    timings["wall_s"] = round(t_done - item.t_ask, 4)
    return {
        "report": res.launch.model_dump(mode="json") if res.launch else None,
        "timings": timings,
        "stop": res.stop,
        "worker": res.worker,
        "port": res.port,
        "pid": res.pid,
        "vram_peak_mib": res.vram_peak_mib,
        "reason": res.reason,
        "source": item.source,
        "failure_class": res.failure.cls.value if res.failure else None,
        "final_metrics": res.final_metrics,
        "simulated": simulated,
        "command": res.command,
    }


def judge(
    refs: list[MetricRef], res: TrialResult
) -> tuple[TrialStatus, Failure | None, list[float]]:
    """The trial's status, failure and objective values: a complete trial that lacks an
    objective figure failed (BENCHMARK_ERROR)."""
    status, failure = res.status, res.failure
    if status != TrialStatus.COMPLETE:
        return status, failure, []
    figures = res.figures()
    got = [figures.get(r.metric) for r in refs]
    if any(v is None for v in got):
        missing = [r.metric for r, v in zip(refs, got, strict=True) if v is None]
        return (
            TrialStatus.FAILED,
            Failure(
                cls=FailureClass.BENCHMARK_ERROR,
                reason=f"objective figure(s) {', '.join(missing)} not measured",
            ),
            [],
        )
    return status, failure, [float(v) for v in got if v is not None]


def measured_constraints(
    setup: SweepSetup, res: TrialResult, figures: Mapping[str, float | None], a: Assessment | None
) -> dict[str, float]:
    """Constraints of a complete trial from what it measured: memory headroom at peak, whether
    the KV pool holds the longest request, and the spec's own bounds (> 0: broken)."""
    headroom = a.headroom_gib if a is not None else None
    if res.vram_peak_mib is not None and setup.gpu is not None:
        headroom = (setup.gpu.memory_mib - res.vram_peak_mib) / 1024
    cons: dict[str, float] = {"rules": 0.0, "planner": 0.0}
    if headroom is not None:
        cons["vram_headroom"] = round(setup.spec.objective.vram_headroom_gib - headroom, 4)
    kv = res.launch.kv_pool_tokens if res.launch else None
    need = setup.planner.need_tokens
    if kv is not None and need:
        ctx = res.launch.context_len if res.launch else None
        room = min(kv, ctx) if ctx else kv  # one request: the pool and its context
        cons["kv_fit"] = (need - room) / need
    cons.update(user_constraints(figures, setup.spec.objective.constraints))
    return cons


def verdict_of(
    setup: SweepSetup,
    item: Running,
    res: TrialResult,
    judged: tuple[TrialStatus, Failure | None, list[float]],
) -> Verdict:
    status, failure, values = judged
    number = item.spec.number
    if status == TrialStatus.COMPLETE:
        cons = measured_constraints(setup, res, res.figures(), item.assessment)
        cons.update(quality_constraints(setup, item.spec.config, res))
        return Verdict(
            status=status,
            stored=status,
            told="complete",
            text=", ".join(
                f"{r.metric} {v:,.2f}" for r, v in zip(setup.refs, values, strict=True)
            ),
            values=values,
            constraints=cons,
            done=Done(number, values, cons, "complete"),
            wall_s=next(
                (
                    m.result.get("wall_s")
                    for m in res.measurements
                    if m.scenario == setup.cut_scenario
                ),
                None,
            ),
        )
    if status == TrialStatus.PRUNED:
        return Verdict(
            status=status,
            stored=status,
            told="pruned",
            text=res.reason or "pruned",
            probe=next((m.value for m in res.measurements if m.scenario == setup.probe), None),
            done=Done(number, None, {}, "pruned"),
        )
    if status == TrialStatus.FAILED and failure is not None and failure.cls in NOT_THE_CONFIG:
        return Verdict(
            status=status,
            stored=status,
            told="fail",
            text=f"{failure.cls.value}: {failure.reason} (re-queued)",
            # a rerun that fails alike is not queued a third time; another release's engine
            # stops the sweep at once (unless told never to stop), so its configuration waits
            # for --resume however often
            requeue=not item.source.startswith("rerun")
            or (
                failure.cls in ENV_FAILURES_AT_ONCE
                and bool(setup.spec.budget.stop_after_env_failures)
            ),
        )
    if status == TrialStatus.FAILED:
        return Verdict(
            status=status,
            stored=status,
            told="pruned",
            text=f"{failure.cls.value}: {failure.reason}" if failure else "failed",
            constraints={"launch_failed": 1.0},
            done=Done(number, None, {"launch_failed": 1.0}, "failed"),
        )
    # interrupted: run it again on resume (or right away, if the sweep goes on)
    return Verdict(
        status=status,
        stored=TrialStatus.INTERRUPTED,
        told="fail",
        text=res.reason or "interrupted",
        requeue=True,
    )


def quality_constraints(
    setup: SweepSetup, config: Mapping[str, Any], res: TrialResult
) -> dict[str, float]:
    """The quality guard's bounds on a complete trial's drift from the reference."""
    from autotune.quality.guard import SCENARIO, constraints

    m = next((m for m in res.measurements if m.scenario == SCENARIO), None)
    return constraints(
        setup.spec, setup.spec.target.engine, setup.guarded(config), m.result if m else None
    )


# -- the state before the verdict --------------------------------------------------------------


def is_lossy(setup: SweepSetup, config: Mapping[str, Any]) -> bool:
    """Whether the quality guard counts `config` as lossy (what the search varies, not what
    the spec pins: SweepSetup.guarded)."""
    from autotune.quality.lossy import lossy_fields

    return bool(lossy_fields(setup.spec.target.engine, setup.guarded(config)))


def held_for_reference(state: SweepState, fut: Any, running: Mapping[Any, Running]) -> bool:
    """Whether the finished search trial `running[fut]` waits to be recorded because the quality
    guard has no reference yet and a trial that may give it still runs (several workers: the
    baseline can finish after another trial):
    - a lossy one waits on the lossless trials running when it finished: recorded at once, its
      answers could not be compared and it would be told infeasible (quality_unverified) for
      the rest of the search;
    - a lossless one other than the baseline waits on the baseline: the reference is the
      engine's defaults, whatever trial finishes first (quality/guard.py).
    Only the trials running at that moment are waited on (no chain of later ones), never a
    confirmation re-run."""
    from autotune.sweep.asking import is_reference

    item = running[fut]
    setup = state.setup
    if (
        item.source == CONFIRM_SOURCE
        or not setup.spec.quality.enabled
        or setup.quality_reference is not None
    ):
        return False

    def lossless(r: Running) -> bool:
        return r.source != CONFIRM_SOURCE and not is_lossy(setup, r.spec.config)

    if item.waits_on is None:
        if not lossless(item):
            gives_reference = lossless
        elif is_reference(state, item.source):
            return False
        else:

            def gives_reference(r: Running) -> bool:
                return lossless(r) and is_reference(state, r.source)

        item.waits_on = {f for f, r in running.items() if f is not fut and gives_reference(r)}
    return any(f in running for f in item.waits_on)


def guard_quality(state: SweepState, item: Running, res: TrialResult) -> None:
    """The quality probe's answers: the first lossless complete trial's become the reference;
    a trial that answered before there was one is compared now; a speculative configuration
    whose greedy answers diverge is noted as an engine defect."""
    from autotune.quality.compare import Answer
    from autotune.quality.guard import IDENTICAL, SCENARIO, defect, measurement

    m = next((m for m in res.measurements if m.scenario == SCENARIO), None)
    if m is None or res.status != TrialStatus.COMPLETE:
        return
    setup = state.setup
    config = setup.guarded(item.spec.config)
    answers = m.result.get("answers")
    if isinstance(answers, dict) and m.result.get("drift") is None:
        if setup.quality_reference is None and not is_lossy(setup, item.spec.config):
            setup.quality_reference = answers
            state.notes["quality_reference"] = item.spec.number
            m.figures = dict(IDENTICAL)
        elif setup.quality_reference is not None:
            ref = {k: Answer.from_json(v) for k, v in setup.quality_reference.items()}
            got = {k: Answer.from_json(v) for k, v in answers.items()}
            fresh = measurement(got, ref)
            m.figures, m.result = fresh["figures"], fresh["result"]
        m.value = m.figures.get("token_agreement")
    bad = defect(setup.spec.target.engine, config, m.result)
    if bad:
        state.notes.setdefault("quality_defects", []).append(
            {"trial": item.spec.number, "config": dict(item.spec.config), "evidence": bad}
        )


def observe(state: SweepState, item: Running, res: TrialResult) -> None:
    """The best probe figure so far and the planner's KV correction learn from the result."""
    for m in res.measurements:
        if m.scenario == state.setup.probe and m.value is not None:
            state.update_probe(m.value)
    a = item.assessment
    if res.launch is not None and a is not None:
        state.setup.planner.observe(
            a.predicted_kv_pool_tokens,
            res.launch.kv_pool_tokens,
            cell_bytes=(a.plan or {}).get("kv_cell_bytes"),
            corrected_kv=a.corrected_kv_pool_tokens,
            plan=a.plan,
            report=res.launch.model_dump(),
        )
        if not state.setup.spec.simulated:
            keep_calibration(state, item, res)


def keep_calibration(state: SweepState, item: Running, res: TrialResult) -> None:
    """A real launch's startup figures against its plan, kept for later sweeps and
    `autotune plan --calibrated` on the same (engine, GPU, model)."""
    import dataclasses
    import hashlib

    from autotune.calibration.calibrate import launch_calibration

    a, launch, spec = item.assessment, res.launch, state.setup.spec
    if a is None or launch is None or not a.plan or not launch.kv_pool_tokens:
        return
    where = f": {res.log_path}" if res.log_path else ""
    source = f"sweep {spec.name} trial #{item.spec.number}{where}"
    c = launch_calibration(
        a.plan,
        launch.model_dump(),
        engine=spec.target.engine,
        version=str(spec.target.engine_version or a.plan.get("engine_version") or ""),
        gpu=state.setup.gpu_name,
        model=spec.target.model,
        tp=spec.target.tp,
        source=source,
        digest=hashlib.sha256(source.encode()).hexdigest(),
    )
    state.store.add_calibration(**dataclasses.asdict(c))


def count_launch(state: SweepState, status: TrialStatus, res: TrialResult) -> None:
    """Interrupted trials run again, and one that started no process cost nothing: neither
    counts against the budget."""
    if status != TrialStatus.INTERRUPTED and not started_nothing(res):
        state.launched += 1
        if res.timings.get("total_s"):
            state.durations.append(res.timings["total_s"])


def watch_env(state: SweepState, status: TrialStatus, failure: Failure | None) -> None:
    """Count trials in a row that failed with one environment-level class; at the limit,
    stop the sweep (running trials finish) with that class as the reason."""
    if status == TrialStatus.INTERRUPTED:
        return
    if status != TrialStatus.FAILED or failure is None or failure.cls not in ENV_FAILURES:
        state.env_streak = (None, 0)
        return
    last, n = state.env_streak
    n = n + 1 if last == failure.cls else 1
    state.env_streak = (failure.cls, n)
    limit = state.setup.spec.budget.stop_after_env_failures
    if limit and failure.cls in ENV_FAILURES_AT_ONCE:
        limit = 1
    if limit and n >= limit and state.early_stop is None:
        state.early_stop = failure.cls
        state.notes["early_stop"] = {
            "failure_class": failure.cls.value,
            "trials": n,
            "reason": failure.reason,
        }
        trials = "a trial" if n == 1 else f"{n} trials in a row"
        state.stop.request(
            f"stopped early: {trials} failed with {failure.cls.value}, a fault "
            f"of the environment, not of the configuration ({failure.reason}); fix it, "
            "then --resume"
        )


# -- the verdict: store, tell, remember --------------------------------------------------------


def store_verdict(
    state: SweepState, item: Running, res: TrialResult, verdict: Verdict, rec: dict[str, Any]
) -> None:
    if verdict.stored == TrialStatus.COMPLETE:
        rec["constraints"] = verdict.constraints
    fields: dict[str, Any] = dict(
        status=verdict.stored, launch=rec, worker=res.worker, log_path=res.log_path, pid=res.pid
    )
    if verdict.values:
        fields["values"] = verdict.values
    state.store.update_trial(item.row_id, **fields)


def tell_verdict(state: SweepState, item: Running, verdict: Verdict) -> None:
    import optuna

    trial = item.trial
    assert trial is not None
    if verdict.constraints is not None:
        set_constraints(trial, verdict.constraints)
    if verdict.probe is not None:
        trial.report(verdict.probe, 0)
    if verdict.told == "complete":
        state.study.tell(trial, verdict.values)
    elif verdict.told == "pruned":
        state.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    else:
        state.study.tell(trial, state=optuna.trial.TrialState.FAIL)
    if verdict.requeue:
        enqueue(state.study, state.setup.space, item.spec.config, rerun_source(item.spec.number))


def remember(state: SweepState, item: Running, verdict: Verdict) -> None:
    if verdict.done is None:
        return
    state.done_by_key[item.key] = verdict.done
    if verdict.stored != TrialStatus.COMPLETE:
        return
    state.update_best(
        verdict.values,
        verdict.constraints or {},
        row_id=item.row_id,
        number=item.spec.number,
        config=item.spec.config,
    )
    if not any(v > 0 for v in (verdict.constraints or {}).values()):
        state.update_wall(verdict.wall_s)
        # after update_best: with noise-aware selection the estimates pick the incumbent
        from autotune.sweep.selection import add_result

        add_result(
            state,
            item.spec.number,
            item.row_id,
            item.spec.config,
            verdict.values[0],
            verdict.constraints or {},
        )


# -- one search trial --------------------------------------------------------------------------


def record_trial(state: SweepState, item: Running, fut: Future[TrialResult]) -> None:
    """Everything a finished search trial changes, in the order a crash can resume from."""
    t_done = item.t_done or time.monotonic()  # a held result's wall ends when it finished
    res = collect(state, item, fut)
    guard_quality(state, item, res)
    rec = launch_record(item, res, t_done, simulated=state.setup.spec.simulated)
    store_measurements(state.store, item.row_id, res, repeat=0)
    observe(state, item, res)
    judged = judge(state.setup.refs, res)
    status, failure, values = judged
    count_launch(state, status, res)
    watch_env(state, status, failure)
    if failure is not None:
        state.store.add_failure(
            item.row_id,
            failure.cls.value,
            failure.reason,
            evidence=failure.evidence,
            log_tail=res.log_tail,
        )
    t_post = time.monotonic()
    verdict = verdict_of(state.setup, item, res, judged)
    store_verdict(state, item, res, verdict, rec)
    tell_verdict(state, item, verdict)
    remember(state, item, verdict)
    rec["timings"]["driver_post_s"] = round(time.monotonic() - t_post, 4)
    state.store.update_trial(item.row_id, launch=rec)
    state.note(
        item.spec.number, status.value, verdict.text, item.source, res.timings.get("total_s")
    )
    if state.on_trial is not None:
        state.on_trial(
            {
                "number": item.spec.number,
                "status": status.value,
                "values": values,
                "failure": failure.cls.value if failure else None,
            }
        )
