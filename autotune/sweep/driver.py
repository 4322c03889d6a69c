"""The sweep loop (used through `orchestrator.run_sweep`): seeds, ask -> gate -> dispatch ->
store -> tell, finalists, resume reconciliation. One Sweep object per run of the driver."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.engines.base import Failure, FailureClass
from autotune.errors import EngineError
from autotune.planner.dispatch import engine_model_path
from autotune.store.models import SweepStatus, TrialStatus
from autotune.sweep.planning import Assessment, TrialPlanner, longest_request_tokens
from autotune.sweep.spec import SweepSpec
from autotune.sweep.study import (
    config_for,
    config_key,
    enqueue,
    open_study,
    set_constraints,
    user_constraints,
)
from autotune.sweep.trial import (
    TrialResult,
    TrialSpec,
    order_scenarios,
    scrub_result,
    started_nothing,
)

if TYPE_CHECKING:
    import optuna

    from autotune.hardware.gpus import GPUSpec
    from autotune.store.db import Store
    from autotune.sweep.executors import Executor
    from autotune.sweep.orchestrator import Budget, StopController, SweepOutcome
    from autotune.sweep.progress import SweepProgress

log = logging.getLogger(__name__)

# Failures that say nothing about the configuration: not told to the sampler as infeasible,
# and the configuration is run once more.
NOT_THE_CONFIG = frozenset({FailureClass.WORKER_LOST, FailureClass.PORT_IN_USE})
# Failures of the environment, not of the configuration: once they repeat, every later trial
# fails alike, so the sweep stops (budget.stop_after_env_failures) instead of burning its budget.
ENV_FAILURES = frozenset(
    {FailureClass.SPAWN_FAILED, FailureClass.AUTH_REJECTED, FailureClass.PORT_IN_USE}
)
POLL_S = 0.25


@dataclass
class _Running:
    trial: optuna.Trial | None  # None for finalist re-runs
    row_id: int
    spec: TrialSpec
    assessment: Assessment | None
    key: str
    source: str
    t_ask: float
    pre_s: float = 0.0


@dataclass
class _Done:
    number: int
    values: list[float] | None
    constraints: dict[str, float]
    state: str  # complete, pruned, failed


class Sweep:
    def __init__(
        self,
        spec: SweepSpec,
        *,
        store: Store,
        row: Any,
        out_dir: Path,
        budget: Budget,
        stop: StopController,
        on_trial: Callable[[dict[str, Any]], None] | None = None,
        secrets: Mapping[str, str] | None = None,
    ):
        from autotune.bench.scenarios import MAIN_FIGURE, scenario_from_dict
        from autotune.planner.dispatch import CPU_TARGET, load_target_model, resolve_target_gpu
        from autotune.sweep.orchestrator import registry_path_for

        self.spec, self.store, self.row, self.out_dir = spec, store, row, out_dir
        self.sweep_id: int = row.id
        self.budget, self.stop, self.on_trial = budget, stop, on_trial
        # values of the spec's ${env:NAME} references: memory only, handed to the workers
        self.secrets: dict[str, str] = dict(secrets or {})
        self.notes: dict[str, Any] = dict(row.notes or {})
        self.notes.pop("early_stop", None)  # a resumed run starts with a fresh streak
        engine = spec.target.engine
        # the target model as its engine's planner reads it (a card, or a GGUF header)
        self.card = load_target_model(engine, spec.target.model)
        if not spec.simulated and spec.target.gpu.strip().lower() == "auto":
            from autotune.hardware.detect import detect_gpus

            found = detect_gpus()[0]
            self.gpu: GPUSpec | None = found.spec
            # the report's provenance: the driver the trials ran under, not the report writer's
            self.notes["nvidia_driver"] = found.driver
        else:
            self.gpu = resolve_target_gpu(engine, spec.target.gpu, field="target.gpu")
        self.gpu_name = self.gpu.name if self.gpu is not None else CPU_TARGET
        if row.gpu != self.gpu_name:
            # `gpu: auto` (or a catalog alias) is stored as the GPU it resolved to, so that the
            # report and `autotune status` name the hardware the trials ran on.
            self.row = row = store.update_sweep(self.sweep_id, gpu=self.gpu_name)
        self.space = build_space(spec)
        scenarios = [
            scenario_from_dict(d, source=f"{spec.name}: workload.scenarios[{i}]")
            for i, d in enumerate(spec.workload.scenarios)
        ]
        self.scenarios = order_scenarios(scenarios, spec.workload.order)
        self.probe = spec.workload.probe or (
            self.scenarios[0].label if len(self.scenarios) > 1 else None
        )
        probe_sc = next((s for s in self.scenarios if s.label == self.probe), None)
        self.probe_higher = MAIN_FIGURE[probe_sc.kind][1] if probe_sc is not None else True
        self.refs = spec.objective_refs()
        self.planner = TrialPlanner(
            card=self.card,
            gpu=self.gpu,
            space=self.space,
            version=spec.target.engine_version,
            tp=spec.target.tp,
            gpu_free_gib=spec.target.gpu_free_gib,
            host_free_gib=spec.target.host_free_gib,
            headroom_gib=spec.objective.vram_headroom_gib,
            need_tokens=longest_request_tokens(self.scenarios),
            engine=engine,
        )
        if self.planner.skipped_rules:
            self.notes["rules_skipped"] = {
                "rules": self.planner.skipped_rules,
                "why": "they test facts this target cannot state: "
                + ", ".join(sorted(self.planner.unknown_facts)),
            }
        self.registry_path = registry_path_for(store, out_dir)
        self.done_by_key: dict[str, _Done] = {}
        self.running_keys: set[str] = set()
        self.launched = 0
        self.durations: list[float] = []
        self.best_probe: float | None = None
        self.best_value: float | None = None
        self.duplicates = 0
        self.rejected_keys: set[str] = set()
        self.incumbent: tuple[int, dict[str, Any]] | None = None
        self.feasible_results: list[tuple[float, int, dict[str, Any]]] = []
        self.local_optima: set[str] = set()
        self.env_streak: tuple[FailureClass | None, int] = (None, 0)
        self.early_stop: FailureClass | None = None
        self._refine_turn = 0
        self.t_start = time.monotonic()
        self.study: optuna.Study | None = None

    # -- setup -------------------------------------------------------------------------------

    def reap_orphans(self) -> None:
        from autotune.process import PidRegistry

        reaped = PidRegistry(self.registry_path).reap_orphans()
        if reaped:
            self.notes.setdefault("reaped", []).extend(
                {"pid": e["pid"], "label": e.get("label"), "signal": e.get("signal")}
                for e in reaped
            )

    def _seed(self) -> None:
        from autotune.sweep.seeding import describe, seed_configs

        assert self.study is not None
        seeds = seed_configs(self.spec, self.space, self.planner, self.card, self.gpu)
        for s in seeds:
            if s.enqueued:
                enqueue(self.study, self.space, s.config, s.id)
        self.notes["seeds"] = describe(seeds)

    def _load_state(self) -> None:
        from autotune.sweep.resume import load_state

        load_state(self)

    def _reconcile(self) -> None:
        from autotune.sweep.resume import reconcile

        reconcile(self)

    # -- the loop ----------------------------------------------------------------------------

    def run(self, executor: Executor, bar: SweepProgress, *, resumed: bool) -> SweepOutcome:
        from autotune.sweep.orchestrator import study_name, wait_any

        t0 = time.monotonic()
        self.bar = bar
        self.study = open_study(
            self.spec,
            url=self.store.storage_url,
            study_name=study_name(self.spec),
            workers=executor.slots,
        )
        if resumed:
            self._reconcile()
        else:
            self._seed()
        self._load_state()
        self._save_notes()
        running: dict[Future[TrialResult], _Running] = {}
        idle = 0
        while True:
            for fut in [f for f in running if f.done()]:
                self._finish(running.pop(fut), fut)
            self._check_deadline()
            stop_reason, finished = self._stop_reason(running, idle)
            if stop_reason:
                break
            while len(running) < executor.slots and self._may_launch(len(running)):
                item = self._next()
                if item is None:
                    idle += 1
                    if idle >= self.budget.max_idle_asks:
                        break
                    continue
                idle = 0
                running[executor.submit(item.spec)] = item
                self.running_keys.add(item.key)
            if self.stop.hard.is_set():
                executor.cancel_all()
            for fut in wait_any(list(running), POLL_S):
                self._finish(running.pop(fut), fut)
            self._progress(len(running))
        self._drain(executor, running)
        if self.stop.graceful.is_set() and self.stop.reason:
            # A second signal while draining escalates (and says so): report the latest reason.
            stop_reason = self.stop.reason
        finalists: list[dict[str, Any]] = []
        if not self.stop.graceful.is_set() and self.spec.finalists.top_k:
            finalists = self._finalists(executor)
        outcome = self._outcome(stop_reason, finished, time.monotonic() - t0, finalists)
        # The last line shows the final state, not the last poll's (trials that finished after
        # it, finalists, nothing running any more).
        self.bar.finish(
            done=outcome.launched,
            best=(outcome.best or {}).get("value", self.best_value),
            status=outcome.status,
            stop_reason=outcome.stop_reason,
        )
        return outcome

    def _drain(self, executor: Executor, running: dict[Future[TrialResult], _Running]) -> None:
        from autotune.sweep.orchestrator import wait_any

        while running:
            self._check_deadline()
            if self.stop.hard.is_set():
                executor.cancel_all()
            elif self.stop.graceful.is_set():
                executor.stop_launching()  # no engine launches after a graceful stop
            for fut in wait_any(list(running), POLL_S):
                self._finish(running.pop(fut), fut)
            self._progress(len(running))

    def _check_deadline(self) -> None:
        left = self.budget.seconds_left()
        if left is not None and left <= 0 and not self.stop.hard.is_set():
            self.stop.request("budget: wall clock or deadline reached", hard=True)

    def _typical_trial_s(self) -> float | None:
        return statistics.median(self.durations) if self.durations else None

    def _may_launch(self, running: int) -> bool:
        if self.stop.graceful.is_set():
            return False
        if (
            self.budget.max_trials is not None
            and self.launched + running >= self.budget.max_trials
        ):
            return False
        left, typical = self.budget.seconds_left(), self._typical_trial_s()
        if left is not None and typical is not None and left < typical:
            return False  # it would only be interrupted at the deadline
        return True

    def _stop_reason(self, running: dict[Any, _Running], idle: int) -> tuple[str, bool]:
        """(why the search ends, whether it ended complete) or ("", False) to go on. A search
        cut short by a signal or the clock is STOPPED (resumable), else FINISHED."""
        if self.stop.graceful.is_set():
            return self.stop.reason or "stop requested", False
        if running:
            return "", False
        if self.budget.max_trials is not None and self.launched >= self.budget.max_trials:
            return (
                f"budget: {self.launched} trials launched (max_trials {self.budget.max_trials})",
                True,
            )
        if idle >= self.budget.max_idle_asks:
            return (
                f"search exhausted: {idle} proposals in a row were infeasible or already "
                "measured (converged, or the space is mostly infeasible)"
            ), True
        left, typical = self.budget.seconds_left(), self._typical_trial_s()
        if left is not None and typical is not None and left < typical:
            return f"budget: {left:.0f} s left, less than a typical trial ({typical:.0f} s)", False
        if self.spec.search.sampler == "grid" and not self._waiting():
            return "grid: every configuration has been tried", True
        return "", False

    def _waiting(self) -> int:
        import optuna

        assert self.study is not None
        return len(
            self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        )

    # -- one proposal ------------------------------------------------------------------------

    def _next(self) -> _Running | None:
        import optuna

        assert self.study is not None
        t_ask = time.monotonic()
        if self._in_refine_phase():
            self._enqueue_neighbour()
        trial = self.study.ask()
        config, source = config_for(trial, self.space)
        a = self.planner.assess(config)
        key = config_key(config)
        if not a.fits:
            row = self.store.add_trial(
                self.sweep_id,
                number=trial.number,
                status=TrialStatus.PRUNED,
                config=config,
                params=trial.params,
                prediction=a.prediction(),
            )
            self.store.add_failure(
                row.id or 0,
                FailureClass.PLANNER_REJECTED.value,
                "; ".join(a.reasons),
                evidence=a.rule_ids[0] if a.rule_ids else None,
            )
            set_constraints(trial, a.constraints)
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            self.rejected_keys.add(key)
            self._note(trial.number, "pruned", f"planner: {a.reasons[0]}", source)
            return None
        prev = self.done_by_key.get(key)
        if prev is not None or key in self.running_keys:
            trial.set_user_attr("duplicate_of", prev.number if prev else -1)
            if prev is not None and prev.values is not None:
                set_constraints(trial, prev.constraints)
                self.study.tell(trial, prev.values)
            elif prev is not None:
                set_constraints(trial, prev.constraints)
                self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.duplicates += 1
            return None
        number = trial.number
        spec = self._trial_spec(number, config, repeat=0)
        row = self.store.add_trial(
            self.sweep_id,
            number=number,
            status=TrialStatus.RUNNING,
            config=config,
            params=trial.params,
            prediction=a.prediction(),
            log_path=str(Path(spec.log_dir) / "server.log"),
        )
        return _Running(trial, row.id or 0, spec, a, key, source, t_ask, time.monotonic() - t_ask)

    def _in_refine_phase(self) -> bool:
        share = self.spec.search.refine
        if not share or self.incumbent is None or self.spec.search.sampler == "grid":
            return False
        if self.budget.max_trials is not None:
            return self.launched + len(self.running_keys) >= (1 - share) * self.budget.max_trials
        left = self.budget.seconds_left()
        if left is None:
            return False
        total = left + (time.monotonic() - self.t_start)
        return left <= share * total

    def _enqueue_neighbour(self) -> None:
        from autotune.sweep.refine import enqueue_neighbour

        enqueue_neighbour(self)

    def _trial_spec(self, number: int, config: Mapping[str, Any], *, repeat: int) -> TrialSpec:
        s, t = self.spec, self.spec.target
        sim = s.simulate
        extra: list[str] = []
        if sim is not None and sim.max_startup_s is not None:
            extra += ["--sim-max-startup-s", f"{sim.max_startup_s:g}"]
        threshold = None
        if self.probe and self.best_probe is not None:
            k = s.workload.prune_below
            threshold = (
                self.best_probe * k if self.probe_higher else self.best_probe / max(k, 1e-9)
            )
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
            sim_seed=(sim.seed if sim else 0) + number * 1009 + repeat,
            sim_extra_args=extra,
            gpu_free_gib=t.gpu_free_gib,
            host_free_gib=t.host_free_gib,
            scenarios=[sc.model_dump(mode="json") for sc in self.scenarios],
            probe=self.probe if repeat == 0 else None,
            probe_threshold=threshold if repeat == 0 else None,
            probe_higher_is_better=self.probe_higher,
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
            secrets=self.secrets,
        )

    # -- one result --------------------------------------------------------------------------

    def _result_of(self, item: _Running, fut: Future[TrialResult]) -> TrialResult:
        from autotune.sweep.executors import lost

        try:
            res = fut.result()
        except Exception as exc:  # the executor itself failed
            res = lost(item.spec, f"executor error: {type(exc).__name__}: {exc}")
        # everything the result says is stored or printed: no secret value may be in it
        return scrub_result(res, self.secrets.values())

    def _launch_record(self, item: _Running, res: TrialResult, t_done: float) -> dict[str, Any]:
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
            "simulated": self.spec.simulated,
        }

    def _finish(self, item: _Running, fut: Future[TrialResult]) -> None:
        import optuna

        t_done = time.monotonic()
        res = self._result_of(item, fut)
        self.running_keys.discard(item.key)
        if item.trial is None:
            self._finish_repeat(item, res)
            return
        assert self.study is not None
        trial, number = item.trial, item.spec.number
        rec = self._launch_record(item, res, t_done)
        for m in res.measurements:
            self.store.add_measurement(
                item.row_id,
                m.scenario,
                {"figures": m.figures, "result": m.result},
                repeat=0,
                value=m.value,
            )
            if m.scenario == self.probe and m.value is not None:
                self._update_probe(m.value)
        pred_kv = item.assessment.predicted_kv_pool_tokens if item.assessment else None
        if res.launch is not None:
            self.planner.observe(pred_kv, res.launch.kv_pool_tokens)
        status, failure = res.status, res.failure
        figures = res.figures()
        values: list[float] = []
        if status == TrialStatus.COMPLETE:
            got = [figures.get(r.metric) for r in self.refs]
            if any(v is None for v in got):
                missing = [r.metric for r, v in zip(self.refs, got, strict=True) if v is None]
                status = TrialStatus.FAILED
                failure = Failure(
                    cls=FailureClass.BENCHMARK_ERROR,
                    reason=f"objective figure(s) {', '.join(missing)} not measured",
                )
            else:
                values = [float(v) for v in got if v is not None]
        # interrupted trials run again, and one that started no process cost nothing: neither
        # counts against the budget
        if status != TrialStatus.INTERRUPTED and not started_nothing(res):
            self.launched += 1
            if res.timings.get("total_s"):
                self.durations.append(res.timings["total_s"])
        self._watch_env(status, failure)
        if failure is not None:
            self.store.add_failure(
                item.row_id,
                failure.cls.value,
                failure.reason,
                evidence=failure.evidence,
                log_tail=res.log_tail,
            )
        t_post = time.monotonic()
        if status == TrialStatus.COMPLETE:
            cons = self._measured_constraints(res, figures, item.assessment)
            rec["constraints"] = cons
            self._update_trial(item, res, status, rec, values=values)
            set_constraints(trial, cons)
            self.study.tell(trial, values)
            self.done_by_key[item.key] = _Done(number, values, cons, "complete")
            self._update_best(
                values, cons, row_id=item.row_id, number=number, config=item.spec.config
            )
            text = ", ".join(
                f"{r.metric} {v:,.2f}" for r, v in zip(self.refs, values, strict=True)
            )
        elif status == TrialStatus.PRUNED:
            self._update_trial(item, res, status, rec)
            probe = next((m.value for m in res.measurements if m.scenario == self.probe), None)
            if probe is not None:
                trial.report(probe, 0)
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            self.done_by_key[item.key] = _Done(number, None, {}, "pruned")
            text = res.reason or "pruned"
        elif (
            status == TrialStatus.FAILED and failure is not None and failure.cls in NOT_THE_CONFIG
        ):
            self._update_trial(item, res, status, rec)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            if not item.source.startswith("rerun"):
                enqueue(self.study, self.space, item.spec.config, f"rerun:#{number}")
            text = f"{failure.cls.value}: {failure.reason} (re-queued)"
        elif status == TrialStatus.FAILED:
            self._update_trial(item, res, status, rec)
            set_constraints(trial, {"launch_failed": 1.0})
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            self.done_by_key[item.key] = _Done(number, None, {"launch_failed": 1.0}, "failed")
            text = f"{failure.cls.value}: {failure.reason}" if failure else "failed"
        else:  # interrupted: run it again on resume (or right away, if the sweep goes on)
            self._update_trial(item, res, TrialStatus.INTERRUPTED, rec)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            enqueue(self.study, self.space, item.spec.config, f"rerun:#{number}")
            text = res.reason or "interrupted"
        rec["timings"]["driver_post_s"] = round(time.monotonic() - t_post, 4)
        self.store.update_trial(item.row_id, launch=rec)
        self._note(number, status.value, text, item.source, res.timings.get("total_s"))
        if self.on_trial is not None:
            self.on_trial(
                {
                    "number": number,
                    "status": status.value,
                    "values": values,
                    "failure": failure.cls.value if failure else None,
                }
            )

    def _watch_env(self, status: TrialStatus, failure: Failure | None) -> None:
        """Count trials in a row that failed with one environment-level class; at the limit,
        stop the sweep (running trials finish) with that class as the reason."""
        if status == TrialStatus.INTERRUPTED:
            return
        if status != TrialStatus.FAILED or failure is None or failure.cls not in ENV_FAILURES:
            self.env_streak = (None, 0)
            return
        last, n = self.env_streak
        n = n + 1 if last == failure.cls else 1
        self.env_streak = (failure.cls, n)
        limit = self.spec.budget.stop_after_env_failures
        if limit and n >= limit and self.early_stop is None:
            self.early_stop = failure.cls
            self.notes["early_stop"] = {
                "failure_class": failure.cls.value,
                "trials": n,
                "reason": failure.reason,
            }
            self.stop.request(
                f"stopped early: {n} trials in a row failed with {failure.cls.value}, a fault "
                f"of the environment, not of the configuration ({failure.reason}); fix it, "
                "then --resume"
            )

    def _update_trial(
        self,
        item: _Running,
        res: TrialResult,
        status: TrialStatus,
        rec: dict[str, Any],
        *,
        values: list[float] | None = None,
    ) -> None:
        fields: dict[str, Any] = dict(
            status=status, launch=rec, worker=res.worker, log_path=res.log_path, pid=res.pid
        )
        if values:
            fields["values"] = values
        self.store.update_trial(item.row_id, **fields)

    def _measured_constraints(
        self, res: TrialResult, figures: Mapping[str, float | None], a: Assessment | None
    ) -> dict[str, float]:
        headroom = a.headroom_gib if a is not None else None
        if res.vram_peak_mib is not None and self.gpu is not None:
            headroom = (self.gpu.memory_mib - res.vram_peak_mib) / 1024
        cons: dict[str, float] = {"rules": 0.0, "planner": 0.0}
        if headroom is not None:
            cons["vram_headroom"] = round(self.spec.objective.vram_headroom_gib - headroom, 4)
        kv = res.launch.kv_pool_tokens if res.launch else None
        need = self.planner.need_tokens
        if kv is not None and need:
            ctx = res.launch.context_len if res.launch else None
            room = min(kv, ctx) if ctx else kv  # one request: the pool and its context
            cons["kv_fit"] = (need - room) / need
        cons.update(user_constraints(figures, self.spec.objective.constraints))
        return cons

    def _update_probe(self, value: float) -> None:
        if self.best_probe is None:
            self.best_probe = value
        elif self.probe_higher:
            self.best_probe = max(self.best_probe, value)
        else:
            self.best_probe = min(self.best_probe, value)

    def _update_best(
        self,
        values: list[float],
        cons: Mapping[str, float],
        row_id: int | None = None,
        *,
        number: int | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if any(v > 0 for v in cons.values()):
            return
        v = values[0]
        better = self.best_value is None or (
            v > self.best_value if self.refs[0].direction == "maximize" else v < self.best_value
        )
        if number is not None and config is not None:
            self.feasible_results.append((v, number, dict(config)))
        if better:
            self.best_value = v
            if number is not None and config is not None:
                self.incumbent = (number, dict(config))
            if row_id is not None:
                self.store.update_sweep(self.sweep_id, best_trial_id=row_id)

    # -- finalists ---------------------------------------------------------------------------

    def _finalists(self, executor: Executor) -> list[dict[str, Any]]:
        from autotune.sweep.finalists import run_finalists

        return run_finalists(self, executor)

    def _finish_repeat(self, item: _Running, res: TrialResult) -> None:
        from autotune.sweep.finalists import finish_repeat

        finish_repeat(self, item, res)

    # -- reporting ---------------------------------------------------------------------------

    def _note(
        self, number: int, status: str, text: str, source: str, secs: float | None = None
    ) -> None:
        took = f" [{secs:.1f} s]" if secs else ""
        src = "" if source == "sampler" else f" ({source})"
        line = f"#{number} {status}{src}: {text}{took}"
        log.info(line)
        self.bar.trial(
            number,
            status,
            line,
            done=self.launched,
            running=len(self.running_keys),
            best=self.best_value,
        )

    def _progress(self, running: int) -> None:
        left = self.budget.seconds_left()
        self.bar.update(
            done=self.launched,
            total=self.budget.max_trials,
            best=self.best_value,
            running=running,
            deadline_s=left,
        )

    def _best_feasible(self, rows: Sequence[Any]) -> Any:
        """The complete trial with the best main value that breaks no constraint, or None:
        a trial that breaks one is never the winner."""
        sign = 1.0 if (self.refs[0].direction or "maximize") == "maximize" else -1.0
        ok = [
            r
            for r in rows
            if r.status == TrialStatus.COMPLETE.value
            and r.value is not None
            and not any(v > 0 for v in ((r.launch or {}).get("constraints") or {}).values())
        ]
        return max(ok, key=lambda r: (sign * r.value, -(r.number or 0)), default=None)

    def _pareto(self) -> list[int]:
        """Feasible non-dominated trials of a multi-objective study (Optuna's best_trials)."""
        if self.study is None or len(self.refs) < 2:
            return []
        return sorted(t.number for t in self.study.best_trials)

    def _save_notes(self) -> None:
        self.notes["planner_correction"] = self.planner.correction()
        self.notes["duplicates_skipped"] = self.duplicates
        self.notes["objective"] = [r.model_dump() for r in self.refs]
        self.store.update_sweep(self.sweep_id, notes=dict(self.notes))

    def _outcome(
        self, stop_reason: str, finished: bool, elapsed: float, finalists: list[dict[str, Any]]
    ) -> SweepOutcome:
        from autotune.store.db import mask_url
        from autotune.sweep.orchestrator import SweepOutcome

        status = (
            SweepStatus.FINISHED
            if finished and not self.stop.graceful.is_set()
            else (SweepStatus.STOPPED)
        )
        self.notes["stop_reason"] = stop_reason
        self._save_notes()
        self.store.update_sweep(self.sweep_id, status=status)
        rows = self.store.get_trials(self.sweep_id)
        counts: dict[str, int] = {}
        for r in rows:
            counts[r.status] = counts.get(r.status, 0) + 1
        best = self._best_feasible(rows)
        # no feasible winner although trials were measured, or nothing fit: "infeasible" (7)
        infeasible = best is None and (
            counts.get(TrialStatus.COMPLETE.value, 0) > 0
            or (bool(rows) and self.launched == 0 and set(counts) == {TrialStatus.PRUNED.value})
        )
        baseline = next((r for r in rows if (r.launch or {}).get("source") == "baseline"), None)
        if baseline is None:
            baseline = next((r for r in rows if (r.prediction or {}) and r.number == 0), None)

        def brief(r: Any) -> dict[str, Any] | None:
            if r is None:
                return None
            return {
                "number": r.number,
                "status": r.status,
                "value": r.value,
                "values": r.values,
                "config": {k: v for k, v in r.config.items() if v is not None},
            }

        return SweepOutcome(
            name=self.spec.name,
            sweep_id=self.sweep_id,
            db_url=self.store.storage_url,
            db_display=mask_url(self.store.storage_url),
            status=status.value,
            stop_reason=stop_reason,
            out_dir=str(self.out_dir),
            elapsed_s=round(elapsed, 2),
            launched=self.launched,
            counts=counts,
            failures_by_class=self.store.failures_by_class(self.sweep_id),
            best=brief(best),
            infeasible=infeasible,
            early_stop_exit=EngineError.exit_code if self.early_stop is not None else None,
            baseline=brief(baseline),
            finalists=finalists,
            pareto=self._pareto(),
            planner_correction=self.planner.correction(),
            seeds=list(self.notes.get("seeds", [])),
            signal=self.stop.signum,
        )


def build_space(spec: SweepSpec) -> Any:
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
