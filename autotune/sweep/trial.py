"""One trial on a worker: launch the engine, parse its startup, run the workload cheap-first,
tear it down. Workers are stateless: they never touch the study or the database; everything
they learn comes back in a TrialResult (style-anchors §7.5).

Failure classes come from the engine adapter (log text and exit status); the trial adds the ones
only it can see: a benchmark that served garbage, an engine that died mid-benchmark, a port in
use, a cancelled trial.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from autotune.engines.base import Failure, FailureClass, LaunchReport
from autotune.errors import BenchmarkError, EngineLaunchError, EngineStartupTimeout, PortInUseError
from autotune.store.models import TrialStatus
from autotune.sweep.spec import LATENCY_FIGURE

if TYPE_CHECKING:
    from autotune.bench.results import ScenarioResult
    from autotune.bench.scenarios import AnyScenario
    from autotune.engines.base import EngineAdapter
    from autotune.process import EngineProcess

LOG_TAIL_LINES = 60
PORT_ATTEMPTS = 3  # a free port can be taken by another process before the engine binds it
READY_POLL_CHUNK_S = 1.0  # wait_ready slices, so a cancel is noticed within about a second
MAX_STARTUP_LOG_BYTES = 4 * 2**20


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
    sim_extra_args: list[str] = Field(default_factory=list)
    gpu_free_gib: float | None = None
    host_free_gib: float | None = None
    scenarios: list[dict[str, Any]] = Field(description="in the order to run (cheap first)")
    probe: str | None = None
    probe_threshold: float | None = Field(
        None, description="prune when the probe's main figure is worse than this"
    )
    probe_higher_is_better: bool = True
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


class _Cancelled(Exception):
    """The sweep asked this trial to stop."""


class _EngineDied(Exception):
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


# -- the trial --------------------------------------------------------------------------------


def engine_command(
    spec: TrialSpec, adapter: EngineAdapter, port: int
) -> tuple[list[str], dict[str, str]]:
    """argv + env for this trial; the simulator is driven exactly like the engine (its flags
    come from the adapter) plus its own --sim-* flags."""
    from autotune.sim import sim_launcher

    launcher = (
        list(spec.launcher)
        if spec.launcher
        else (sim_launcher(spec.engine) if spec.simulate else None)
    )
    from autotune.secrets import resolve_refs

    config = resolve_refs(spec.config, spec.secrets)  # the engine gets the values themselves
    if spec.tp > 1:
        config.setdefault("tp_size", spec.tp)
    cmd = adapter.build_command(
        config,
        model=spec.model,
        version=spec.engine_version,
        host=spec.host,
        port=port,
        launcher=launcher,
    )
    argv = list(cmd.argv)
    if spec.simulate:
        argv += [
            "--sim-gpu",
            spec.gpu,
            "--sim-engine-version",
            spec.engine_version,
            "--sim-time-scale",
            f"{spec.sim_time_scale:g}",
            "--sim-seed",
            str(spec.sim_seed),
        ]
        if spec.gpu_free_gib is not None:
            argv += ["--sim-gpu-free-gib", f"{spec.gpu_free_gib:g}"]
        if spec.host_free_gib is not None:
            argv += ["--sim-host-free-gib", f"{spec.host_free_gib:g}"]
        argv += spec.sim_extra_args
    env = {**cmd.env, **spec.engine_env()}
    return argv, env


def run_trial(
    spec: TrialSpec,
    *,
    worker: str = "",
    gpu_indices: Sequence[int] | None = None,
    cancel: threading.Event | None = None,
    adapter: EngineAdapter | None = None,
    hold_fds: Sequence[int] = (),
) -> TrialResult:
    """Launch, benchmark and stop one configuration; never raises for engine or benchmark
    trouble (that is the result), only for bugs. ``hold_fds``: the trial's GPU locks, which the
    engine's watchdog keeps until the engine is gone (autotune.process.gpulock)."""
    from autotune.engines import get_adapter
    from autotune.process import EngineProcess, PidRegistry, free_port, port_is_free

    t0 = time.monotonic()
    cancel = cancel or threading.Event()
    adapter = adapter or get_adapter(spec.engine)
    worker = worker or socket.gethostname()
    registry = PidRegistry(Path(spec.registry_path)) if spec.registry_path else None
    log_dir = Path(spec.log_dir)
    res = TrialResult(
        number=spec.number, status=TrialStatus.RUNNING, worker=worker, repeat=spec.repeat
    )

    def finish(status: TrialStatus, failure: Failure | None = None, tail: str = "") -> TrialResult:
        res.status, res.failure, res.log_tail = status, failure, tail
        res.timings["total_s"] = round(time.monotonic() - t0, 4)
        return res

    if cancel.is_set():
        res.reason = "interrupted before launch (sweep stopping)"
        return finish(TrialStatus.INTERRUPTED)

    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = spec.port or free_port(spec.host)
        res.port = port
        if not port_is_free(port, spec.host):
            if spec.port is None and attempt < PORT_ATTEMPTS:
                continue
            return finish(
                TrialStatus.FAILED,
                Failure(
                    cls=FailureClass.PORT_IN_USE,
                    reason=f"port {port} on {spec.host} is already in use",
                ),
            )
        argv, env = engine_command(spec, adapter, port)
        if gpu_indices is not None and not spec.simulate and "CUDA_VISIBLE_DEVICES" not in env:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indices)
        suffix = "" if attempt == 1 else f".attempt{attempt}"
        log_path = log_dir / f"server{suffix}.log"
        res.log_path = str(log_path)
        eng = EngineProcess(
            port=port,
            host=spec.host,
            label=f"{spec.sweep}/trial-{spec.number}",
            gpu_indices=None if spec.simulate else gpu_indices,
            registry=registry,
            hold_fds=hold_fds,
        )
        try:
            outcome = _serve(spec, adapter, eng, argv, env, log_path, res, cancel)
        finally:
            t_stop = time.monotonic()
            report = eng.stop(grace_s=spec.stop_grace_s)
            res.timings["stop_s"] = round(time.monotonic() - t_stop, 4)
            res.stop = report.model_dump()
            if spec.secrets:  # the engine may print its arguments (SGLang's server_args)
                from autotune.secrets import scrub_file

                scrub_file(log_path, spec.secrets.values())
        status, failure, tail = outcome
        retry = (
            failure is not None
            and failure.cls == FailureClass.PORT_IN_USE
            and spec.port is None
            and attempt < PORT_ATTEMPTS
            and not cancel.is_set()
        )
        if not retry:
            if report.leftovers and failure is None:
                failure = Failure(
                    cls=FailureClass.CRASH,
                    reason=f"processes {report.leftovers} survived SIGKILL after the trial",
                )
                status = TrialStatus.FAILED
            return finish(status, failure, tail)
    raise AssertionError("unreachable")  # pragma: no cover


def _serve(
    spec: TrialSpec,
    adapter: EngineAdapter,
    eng: EngineProcess,
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    res: TrialResult,
    cancel: threading.Event,
) -> tuple[TrialStatus, Failure | None, str]:
    """Start, wait ready, benchmark. Returns (status, failure, log tail); the caller stops."""
    t_start = time.monotonic()
    try:
        res.pid = eng.start(argv, env, log_path)
    except PortInUseError as exc:  # another process bound the port after our check
        return TrialStatus.FAILED, Failure(cls=FailureClass.PORT_IN_USE, reason=str(exc)), ""
    except EngineLaunchError as exc:
        # nothing ran, so there is no log: the OS error ("No such file or directory: ...") is
        # the only cause there is; keep it as the reason and the tail
        reason = str(exc).splitlines()[0][:500]
        return TrialStatus.FAILED, Failure(cls=FailureClass.SPAWN_FAILED, reason=reason), reason
    health = f"http://{spec.host}:{eng.port}{adapter.health_path()}"
    deadline = t_start + spec.startup_timeout_s
    while True:
        if cancel.is_set():
            res.reason = "interrupted while the engine started (sweep stopping)"
            return TrialStatus.INTERRUPTED, None, eng.log_tail(LOG_TAIL_LINES)
        try:
            eng.wait_ready(
                health,
                deadline_s=max(0.05, min(READY_POLL_CHUNK_S, deadline - time.monotonic())),
                is_ready_line=adapter.is_ready_line,
            )
            break
        except EngineStartupTimeout:
            if time.monotonic() < deadline:
                continue
            tail = eng.log_tail(LOG_TAIL_LINES)
            return (
                TrialStatus.FAILED,
                adapter.classify_failure(
                    _read_log(log_path), None, was_ready=False, timed_out=True
                ),
                tail,
            )
        except EngineLaunchError as exc:
            text = _read_log(log_path)
            return (
                TrialStatus.FAILED,
                adapter.classify_failure(text, exc.returncode, was_ready=False),
                eng.log_tail(LOG_TAIL_LINES),
            )
    res.timings["start_s"] = round(time.monotonic() - t_start, 4)
    res.launch = adapter.parse_startup(_read_log(log_path))

    t_bench = time.monotonic()
    try:
        _bench(spec, eng, res, cancel)
    except _Cancelled:
        res.reason = "interrupted during the benchmark (sweep stopping)"
        return TrialStatus.INTERRUPTED, None, eng.log_tail(LOG_TAIL_LINES)
    except _EngineDied:
        return _died(adapter, eng, log_path)
    except BenchmarkError as exc:
        if not eng.is_alive():
            return _died(adapter, eng, log_path)
        reason = str(exc).splitlines()[0][:500]
        # refused by the server's API key check: the same for every configuration
        cls = (
            FailureClass.AUTH_REJECTED
            if _AUTH_STATUS.search(reason)
            else FailureClass.BENCHMARK_ERROR
        )
        return TrialStatus.FAILED, Failure(cls=cls, reason=reason), eng.log_tail(LOG_TAIL_LINES)
    finally:
        res.timings["bench_s"] = round(time.monotonic() - t_bench, 4)
    if res.reason:
        return TrialStatus.PRUNED, None, ""
    return TrialStatus.COMPLETE, None, ""


def _died(
    adapter: EngineAdapter, eng: EngineProcess, log_path: Path
) -> tuple[TrialStatus, Failure, str]:
    # Give the process a moment to be reaped so the exit status is known.
    for _ in range(20):
        if eng.returncode is not None:
            break
        time.sleep(0.05)
    failure = adapter.classify_failure(_read_log(log_path), eng.returncode, was_ready=True)
    return TrialStatus.FAILED, failure, eng.log_tail(LOG_TAIL_LINES)


def _read_log(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_STARTUP_LOG_BYTES)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


_AUTH_STATUS = re.compile(r"\bHTTP 40[13]\b")


def api_key_of(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The API key the engine was started with (`--api-key K`, `--api-key=K`, vLLM's
    VLLM_API_KEY): the benchmark must send it, or every request is refused with HTTP 401."""
    for i, arg in enumerate(argv):
        if arg == "--api-key" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--api-key="):
            return arg.partition("=")[2]
    return env.get("VLLM_API_KEY") or None


def _bench(spec: TrialSpec, eng: EngineProcess, res: TrialResult, cancel: threading.Event) -> None:
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
                try:
                    result = await run_scenario(client, base_url, sc, model=model)
                except ScenarioFailed as exc:
                    res.measurements.append(_measurement(exc.result, scale))
                    raise
                m = _measurement(result, scale)
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
            try:
                res.final_metrics = await scrape_metrics(client, base_url)
            except BenchmarkError:
                res.final_metrics = {}

    await _watched(
        work(), lambda: cancel.is_set(), lambda: not eng.is_alive(), spec.bench_timeout_s
    )


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
                raise _Cancelled()
            if died():
                raise _EngineDied()
            if time.monotonic() > deadline:
                raise BenchmarkError(f"the workload did not finish within {timeout_s:g} s")
    finally:
        if not task.done():
            task.cancel()
            # Its outcome no longer matters.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


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
