"""Trials scored by the simulator's analytic mode (autotune.sim.analytic): the same scheduler
and roofline model the simulated server uses, in virtual time, with no process and no HTTP.

Used to study the search itself (benchmarks/sweep_quality.py: TPE vs random against the
exhaustive optimum of a space of hundreds of configurations) and for what-if sweeps of hardware
one does not own. Figures carry the benchmark client's names, in simulated-GPU units.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from autotune.engines.base import Failure, FailureClass, LaunchReport
from autotune.store.models import TrialStatus
from autotune.sweep.executors import InProcessExecutor
from autotune.sweep.trial import ScenarioMeasurement, TrialResult, TrialSpec
from autotune.sweep.trial_bench import cut_reason


def _workload(sc: Any, prompt_len: int | None = None) -> Any:
    from autotune.sim.analytic import closed_loop, multi_turn

    if sc.kind == "agent":
        return multi_turn(
            sc.num_sessions,
            sc.turns,
            sc.prompt_len,
            sc.turn_len,
            sc.output_len,
            kind=sc.text,
            concurrency=sc.concurrency,
        )
    if sc.kind in ("prefill", "long_context"):
        return closed_loop(
            sc.concurrency, sc.num_requests, prompt_len or 1, sc.output_len, sc.text
        )
    n = sc.num_requests if sc.kind == "decode" else (sc.request_cap or 4 * sc.concurrency)
    return closed_loop(sc.concurrency, n, sc.prompt_len, sc.output_len, sc.text)


def _figures(r: dict[str, Any]) -> dict[str, float | None]:
    tpot = r.get("tpot_mean_s")
    ttfts = [q["ttft_s"] for q in r.get("requests", [])]
    prompts = [q["prompt_tokens"] for q in r.get("requests", [])]
    return {
        "output_tok_s": r.get("output_tok_s"),
        "input_tok_s": r.get("input_tok_s"),
        "requests_per_s": r.get("request_s"),
        "decode_tok_s": 1.0 / tpot if tpot else None,
        "prefill_tok_s": sum(prompts) / sum(ttfts) if ttfts and sum(ttfts) > 0 else None,
        "ttft_mean_s": r.get("ttft_mean_s"),
        "ttft_p50_s": r.get("ttft_p50_s"),
        "ttft_p95_s": r.get("ttft_p95_s"),
        "e2e_mean_s": r.get("e2e_mean_s"),
        "e2e_p50_s": r.get("e2e_p50_s"),
        "e2e_p95_s": r.get("e2e_p95_s"),
        "tpot_mean_s": tpot,
        "itl_mean_s": r.get("itl_mean_s"),
        "spec_accept_length": r.get("accept_length"),
        "cache_hit_rate": (
            r["cached_tokens"] / r["input_tokens"] if r.get("input_tokens") else None
        ),
        "error_rate": 0.0 if r.get("completed") else None,
    }


def evaluate_scenario(spec: TrialSpec, sc: Any) -> tuple[dict[str, Any], dict[str, float | None]]:
    """(the planner's facts, figures) for one scenario of `spec` on the analytic simulator."""
    from autotune.bench.scenarios import MAIN_FIGURE
    from autotune.sim.analytic import evaluate

    kwargs: dict[str, Any] = dict(
        version=spec.engine_version,
        tp=spec.tp,
        seed=spec.sim_seed,
        alloc_deviation=spec.sim_alloc_deviation,
        slowdown=spec.sim_slowdown,
        gpu_free_gib=spec.gpu_free_gib,
        host_free_gib=spec.host_free_gib,
    )
    lens: Sequence[int | None] = (
        sc.prompt_lens if sc.kind in ("prefill", "long_context") else [None]
    )
    figures: dict[str, float | None] = {}
    facts: dict[str, Any] = {}
    for n in lens:
        r = evaluate(spec.model, spec.gpu, spec.config, _workload(sc, n), **kwargs)
        facts = {
            k: r.get(k)
            for k in (
                "fits",
                "reasons",
                "kv_pool_tokens",
                "mamba_slots",
                "max_running_requests",
                "free_before_weights_gib",
                "weights_gib",
            )
        }
        facts["wall_s"] = r.get("duration_s")  # virtual seconds, this launch's luck included
        if not r.get("fits"):
            return facts, {}
        figs = _figures(r)
        if n is None:
            figures = figs
        else:
            figures[f"ttft_s@{n}"] = figs["ttft_mean_s"]
            figures[f"prefill_tok_s@{n}"] = figs["prefill_tok_s"]
            for k, v in figs.items():
                figures.setdefault(k, v)
    fig, _ = MAIN_FIGURE[sc.kind]
    figures["main"] = figures.get("ttft_mean_s") if fig == "ttft_s" else figures.get(fig)
    return facts, figures


def _launch_report(facts: dict[str, Any]) -> LaunchReport:
    """What the analytic model says the engine would log at startup."""
    return LaunchReport(
        kv_pool_tokens=facts.get("kv_pool_tokens"),
        free_before_weights_gib=facts.get("free_before_weights_gib"),
        weights_gib=facts.get("weights_gib"),
        mamba_slots=facts.get("mamba_slots"),
        max_running_requests=facts.get("max_running_requests"),
        ready=bool(facts.get("fits")),
        simulated=True,
    )


def analytic_trial(
    spec: TrialSpec,
    *,
    worker: str = "analytic",
    gpu_indices: Sequence[int] | None = None,
    cancel: threading.Event | None = None,
) -> TrialResult:
    """A TrialFn (see InProcessExecutor) that scores the configuration analytically."""
    from autotune.bench.scenarios import scenario_from_dict

    t0 = time.monotonic()
    res = TrialResult(
        number=spec.number, status=TrialStatus.RUNNING, worker=worker, repeat=spec.repeat
    )
    if spec.sim_start_fails:
        from autotune.sim.variation import FLAKY_START

        res.status = TrialStatus.FAILED
        res.failure = Failure(cls=FailureClass.CRASH, reason=FLAKY_START, evidence=FLAKY_START)
        res.launch = LaunchReport(ready=False, simulated=True)  # it started, then died
    for raw in spec.scenarios if res.status == TrialStatus.RUNNING else ():
        if cancel is not None and cancel.is_set():
            res.status, res.reason = TrialStatus.INTERRUPTED, "interrupted (sweep stopping)"
            break
        sc = scenario_from_dict(raw, source=f"trial {spec.number}")
        facts, figures = evaluate_scenario(spec, sc)
        if res.launch is None:
            res.launch = _launch_report(facts)
        if not facts.get("fits"):
            res.status = TrialStatus.FAILED
            res.failure = Failure(
                cls=FailureClass.KV_CACHE_OOM,
                reason="; ".join(facts.get("reasons") or ["does not fit"]),
            )
            break
        wall = facts.get("wall_s")
        if (
            sc.label == spec.cut_scenario
            and spec.cut_after_s is not None
            and wall is not None
            and wall > spec.cut_after_s
        ):
            res.status, res.reason = TrialStatus.PRUNED, cut_reason(sc.label, spec.cut_after_s)
            break
        res.measurements.append(
            ScenarioMeasurement(
                scenario=sc.label,
                kind=sc.kind,
                value=figures.get("main"),
                figures=figures,
                result={"analytic": True, "time": "virtual", "wall_s": wall},
            )
        )
        value = figures.get("main")
        if sc.label == spec.probe and spec.probe_threshold is not None and value is not None:
            worse = (
                value < spec.probe_threshold
                if spec.probe_higher_is_better
                else value > spec.probe_threshold
            )
            if worse:
                res.status = TrialStatus.PRUNED
                res.reason = (
                    f"probe {sc.label!r}: {value:.3f} worse than {spec.probe_threshold:.3f}"
                )
                break
    if res.status == TrialStatus.RUNNING:
        res.status = TrialStatus.COMPLETE
        if spec.quality is not None:
            from autotune.quality.guard import QualityProbe, simulated_answers

            m = simulated_answers(QualityProbe.model_validate(spec.quality), spec.config)
            res.measurements.append(
                ScenarioMeasurement(value=m["figures"].get("token_agreement"), **m)
            )
    elapsed = round(time.monotonic() - t0, 5)
    res.timings = {"start_s": 0.0, "bench_s": elapsed, "stop_s": 0.0, "total_s": elapsed}
    return res


class AnalyticExecutor(InProcessExecutor):
    """An InProcessExecutor whose trials are scored analytically (no engine process)."""

    name = "analytic"

    def __init__(self, workers: int = 1):
        super().__init__(workers, trial_fn=analytic_trial)
