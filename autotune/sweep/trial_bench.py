"""A trial's benchmark: its scenarios cheap-first, run against the ready engine with the probe
cut-off, every figure in simulated-GPU units under the simulator, the VRAM peak meanwhile and
the final /metrics. A sweep that cancels or an engine that dies aborts the workload at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.errors import BenchmarkError
from autotune.sweep.spec_models import LATENCY_FIGURE
from autotune.sweep.trial_command import api_key_of
from autotune.sweep.trial_models import ScenarioMeasurement, TrialResult, TrialSpec

if TYPE_CHECKING:
    from autotune.bench.results import ScenarioResult
    from autotune.bench.scenarios import AnyScenario
    from autotune.process import EngineProcess


class BenchCancelled(Exception):
    """The sweep asked this trial to stop."""


class EngineDied(Exception):
    """The engine process exited while the benchmark ran."""


# -- scenarios --------------------------------------------------------------------------------


def scenario_cost(s: AnyScenario) -> float:
    """Tokens a scenario moves (prefill counted at 1/8 of a decoded token): orders cheap-first."""
    from autotune.bench.scenarios import (
        AgentScenario,
        DecodeScenario,
        LongContextScenario,
        PrefillScenario,
    )

    warm = s.warmup_requests
    if isinstance(s, PrefillScenario | LongContextScenario):
        per = sum(s.num_requests * (p / 8 + s.output_len) for p in s.prompt_lens)
        return s.repeats * per + warm * 64
    if isinstance(s, AgentScenario):
        ctx = s.prompt_len + s.turns * s.turn_len
        return s.repeats * s.num_sessions * s.turns * (ctx / 8 + s.output_len)
    n = s.num_requests if isinstance(s, DecodeScenario) else (s.request_cap or 4 * s.concurrency)
    return (s.repeats * n + warm) * (s.prompt_len / 8 + s.output_len)


def order_scenarios(scenarios: Sequence[AnyScenario], order: str) -> list[AnyScenario]:
    if order == "as_written":
        return list(scenarios)
    return sorted(scenarios, key=scenario_cost)  # stable: ties keep the written order


def flat_figures(result: ScenarioResult) -> dict[str, float | None]:
    """The scenario's named figures plus every latency percentile (ttft_p95_s, ...)."""
    figs = dict(result.figures)
    for lat in ("ttft", "itl", "tpot", "e2e"):
        st = getattr(result.stats, lat)
        for q in ("mean", "min", "max", "p50", "p90", "p95", "p99"):
            figs.setdefault(f"{lat}_{q}_s", getattr(st, q) if st is not None else None)
    return figs


def figure_from(figures: Mapping[str, float | None], name: str) -> float | None:
    """Look up a figure; LATENCY_FIGURE names are always present after flat_figures."""
    if name in figures:
        return figures[name]
    return None if LATENCY_FIGURE.match(name.rpartition(".")[2]) else figures.get(name)


# -- the workload -----------------------------------------------------------------------------


def run_workload(
    spec: TrialSpec, eng: EngineProcess, res: TrialResult, cancel: threading.Event
) -> None:
    """Run the trial's scenarios on the ready engine into `res` (measurements, the probe's
    reason to prune, VRAM peak, final /metrics). Raises BenchCancelled, EngineDied or a
    BenchmarkError."""
    from autotune.bench.scenarios import MAIN_FIGURE, scenario_from_dict

    scenarios = [scenario_from_dict(d, source=f"trial {spec.number}") for d in spec.scenarios]
    base_url = f"http://{spec.host}:{eng.port}"
    key = api_key_of(eng.argv, {**os.environ, **spec.engine_env()})
    headers = {"Authorization": f"Bearer {key}"} if key else None
    sampler = _VramSampler(eng.gpu_indices)
    sampler.start()
    try:
        asyncio.run(
            _bench_async(spec, scenarios, base_url, eng, res, cancel, MAIN_FIGURE, headers)
        )
    finally:
        res.vram_peak_mib = sampler.stop()


async def _bench_async(
    spec: TrialSpec,
    scenarios: list[AnyScenario],
    base_url: str,
    eng: EngineProcess,
    res: TrialResult,
    cancel: threading.Event,
    main_figure: Mapping[str, tuple[str, bool]],
    headers: Mapping[str, str] | None = None,
) -> None:
    import httpx

    from autotune.bench.client import discover_model
    from autotune.bench.metrics import scrape_metrics
    from autotune.bench.runner import ScenarioFailed, run_scenario

    scale = spec.sim_time_scale if spec.simulate else 1.0
    most = max(s.concurrency for s in scenarios) + 4
    limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)

    async def work() -> None:
        async with httpx.AsyncClient(limits=limits, trust_env=False, headers=headers) as client:
            model = await discover_model(client, base_url)
            for sc in scenarios:
                cut = spec.cut_after_s if sc.label == spec.cut_scenario else None
                t_sc = time.monotonic()
                try:
                    result = await asyncio.wait_for(
                        run_scenario(client, base_url, sc, model=model), cut
                    )
                except ScenarioFailed as exc:
                    res.measurements.append(_measurement(exc.result, scale))
                    raise
                except TimeoutError:
                    if cut is None:
                        raise
                    res.reason = cut_reason(sc.label, cut)
                    return
                m = _measurement(result, scale)
                m.result["wall_s"] = round(time.monotonic() - t_sc, 4)
                res.measurements.append(m)
                if sc.label == spec.probe and spec.probe_threshold is not None:
                    value = m.value
                    worse = value is None or (
                        value < spec.probe_threshold
                        if spec.probe_higher_is_better
                        else value > spec.probe_threshold
                    )
                    if worse:
                        fig = main_figure[sc.kind][0]
                        res.reason = (
                            f"probe {sc.label!r}: {fig} {value if value is None else round(value, 3)} "
                            f"is worse than the cut-off {spec.probe_threshold:.3f} (share of the "
                            "best so far): expensive scenarios skipped"
                        )
                        return
            if spec.quality is not None:
                key = (headers or {}).get("Authorization", "").removeprefix("Bearer ") or None
                res.measurements.append(
                    await asyncio.to_thread(_quality, spec, base_url, model, key)
                )
            try:
                res.final_metrics = await scrape_metrics(client, base_url)
            except BenchmarkError:
                res.final_metrics = {}

    await _watched(
        work(), lambda: cancel.is_set(), lambda: not eng.is_alive(), spec.bench_timeout_s
    )


def _quality(spec: TrialSpec, base_url: str, model: str, key: str | None) -> ScenarioMeasurement:
    """The quality probe's answers (and drift from the reference) on the ready engine."""
    from autotune.quality.guard import QualityProbe, run_probe

    probe = QualityProbe.model_validate(spec.quality)
    m = run_probe(probe, base_url, model=model, api=spec.engine, api_key=key)
    return ScenarioMeasurement(value=m["figures"].get("token_agreement"), **m)


async def _watched(
    coro: Any, cancelled: Callable[[], bool], died: Callable[[], bool], timeout_s: float
) -> None:
    """Run `coro`; abort it at once if the sweep cancels or the engine process dies (a dead
    engine would otherwise leave requests waiting for their read timeout)."""
    task = asyncio.ensure_future(coro)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.1)
            if done:
                task.result()
                return
            if cancelled():
                raise BenchCancelled()
            if died():
                raise EngineDied()
            if time.monotonic() > deadline:
                raise BenchmarkError(f"the workload did not finish within {timeout_s:g} s")
    finally:
        if not task.done():
            task.cancel()
            # Its outcome no longer matters.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


CUT_PREFIX = "cut: "


def cut_reason(label: str, after_s: float) -> str:
    """Why a search run's benchmark was stopped early (search.cut_below)."""
    return (
        f"{CUT_PREFIX}{label!r} was still running after {after_s:.1f} s, longer than the best "
        "feasible run took for the same work divided by search.cut_below: its throughput "
        "can no longer reach that share of the best"
    )


def rescale(name: str, value: float | None, scale: float) -> float | None:
    """A figure measured against the simulator at time scale S, in simulated-GPU units: rates
    divided by S, durations multiplied by S, counts and ratios unchanged."""
    if value is None or scale == 1.0:
        return value
    base = name.split("@")[0]
    if base.endswith(("tok_s", "per_s")):
        return value / scale
    if base.endswith("_s"):
        return value * scale
    return value


def _measurement(result: ScenarioResult, scale: float = 1.0) -> ScenarioMeasurement:
    from autotune.bench.scenarios import MAIN_FIGURE

    figures = flat_figures(result)
    main_name = MAIN_FIGURE[result.kind][0]
    figures = {k: rescale(main_name if k == "main" else k, v, scale) for k, v in figures.items()}
    dump = result.model_dump(mode="json", exclude={"requests"})
    if scale != 1.0:
        dump["sim_time_scale"] = scale  # the raw result is in wall-clock units
    return ScenarioMeasurement(
        scenario=result.name,
        kind=result.kind,
        value=rescale(main_name, result.main.mean, scale),
        figures=figures,
        result=dump,
    )


class _VramSampler:
    """Peak GPU memory used on the trial's GPUs during the benchmark (NVML; None without)."""

    def __init__(self, gpu_indices: Sequence[int] | None, period_s: float = 0.5):
        self.gpu_indices = list(gpu_indices) if gpu_indices else None
        self.period_s = period_s
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.gpu_indices:
            return
        self._thread = threading.Thread(target=self._run, name="vram-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from autotune.process.gpu import gpu_memory_used

        while not self._stop.is_set():
            used = gpu_memory_used(self.gpu_indices)
            if used is None:
                return
            top = max(used.values(), default=0)
            self.peak = top if self.peak is None else max(self.peak, top)
            self._stop.wait(self.period_s)

    def stop(self) -> float | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return None if self.peak is None else round(self.peak / 2**20, 1)
