"""One launch of a trial's engine: start it, wait until it serves (noticing a cancel within about
a second), parse its startup, benchmark it; each step's trouble classified. The caller stops the
engine.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.engines.base import Failure, FailureClass
from autotune.errors import BenchmarkError, EngineLaunchError, EngineStartupTimeout, PortInUseError
from autotune.store.models import TrialStatus
from autotune.sweep.installed import CHECKED_ENGINES, served_mismatch
from autotune.sweep.trial_bench import BenchCancelled, EngineDied, run_workload
from autotune.sweep.trial_command import api_key_of
from autotune.sweep.trial_failures import (
    LOG_TAIL_LINES,
    Outcome,
    benchmark_failure,
    died,
    read_log,
)
from autotune.sweep.trial_models import TrialResult, TrialSpec

if TYPE_CHECKING:
    from autotune.engines.base import EngineAdapter
    from autotune.process import EngineProcess

READY_POLL_CHUNK_S = 1.0  # wait_ready slices, so a cancel is noticed within about a second
VERSION_TIMEOUT_S = 5.0  # the version endpoint of an engine that has just said it is ready


def serve(
    spec: TrialSpec,
    adapter: EngineAdapter,
    eng: EngineProcess,
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    res: TrialResult,
    cancel: threading.Event,
) -> Outcome:
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
    not_ready = wait_until_ready(
        spec, adapter, eng, log_path, res, cancel, deadline=t_start + spec.startup_timeout_s
    )
    if not_ready is not None:
        return not_ready
    res.timings["start_s"] = round(time.monotonic() - t_start, 4)
    res.launch = adapter.parse_startup(read_log(log_path))
    if not spec.simulate and spec.engine in CHECKED_ENGINES:
        why = served_mismatch_of(spec, adapter, eng, res)
        if why is not None:
            # another release's startup figures must not teach the planner or the calibration
            res.launch = None
            failure = Failure(cls=FailureClass.ENGINE_MISMATCH, reason=f"on {res.worker}: {why}")
            return TrialStatus.FAILED, failure, eng.log_tail(LOG_TAIL_LINES)
    return benchmark(spec, adapter, eng, log_path, res, cancel)


def served_version(
    spec: TrialSpec, adapter: EngineAdapter, eng: EngineProcess, res: TrialResult
) -> tuple[str, str] | None:
    """(the release the ready engine reports, where it said so): its startup log's version
    line (vLLM), else its version endpoint; None when it says none (an engine that does not
    answer is not refused: its benchmark will say what is wrong)."""
    import httpx

    logged = res.launch.engine_version if res.launch is not None else None
    if logged:
        return logged, "its startup log"
    path = adapter.version_path()
    if path is None:
        return None
    key = api_key_of(eng.argv, {**os.environ, **spec.engine_env()})
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = httpx.get(
            f"http://{spec.host}:{eng.port}{path}", headers=headers, timeout=VERSION_TIMEOUT_S
        )
        version = r.json().get("version") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return (str(version), f"GET {path}") if version else None


def served_mismatch_of(
    spec: TrialSpec, adapter: EngineAdapter, eng: EngineProcess, res: TrialResult
) -> str | None:
    """Why the ready engine must not be measured for this spec (it reports another release
    than the spec follows: sweep/installed.py), None when it may."""
    got = served_version(spec, adapter, eng, res)
    return None if got is None else served_mismatch(spec.engine, spec.engine_version, *got)


def wait_until_ready(
    spec: TrialSpec,
    adapter: EngineAdapter,
    eng: EngineProcess,
    log_path: Path,
    res: TrialResult,
    cancel: threading.Event,
    *,
    deadline: float,
) -> Outcome | None:
    """None once the engine serves; else the outcome: interrupted, timed out at `deadline`
    (time.monotonic), or exited first."""
    health = f"http://{spec.host}:{eng.port}{adapter.health_path()}"
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
            return None
        except EngineStartupTimeout:
            if time.monotonic() < deadline:
                continue
            tail = eng.log_tail(LOG_TAIL_LINES)
            return (
                TrialStatus.FAILED,
                adapter.classify_failure(
                    read_log(log_path), None, was_ready=False, timed_out=True
                ),
                tail,
            )
        except EngineLaunchError as exc:
            text = read_log(log_path)
            return (
                TrialStatus.FAILED,
                adapter.classify_failure(text, exc.returncode, was_ready=False),
                eng.log_tail(LOG_TAIL_LINES),
            )


def benchmark(
    spec: TrialSpec,
    adapter: EngineAdapter,
    eng: EngineProcess,
    log_path: Path,
    res: TrialResult,
    cancel: threading.Event,
) -> Outcome:
    """Run the workload on the ready engine: COMPLETE, PRUNED by the probe, INTERRUPTED, or
    FAILED (the engine died, the benchmark failed)."""
    t_bench = time.monotonic()
    try:
        run_workload(spec, eng, res, cancel)
    except BenchCancelled:
        res.reason = "interrupted during the benchmark (sweep stopping)"
        return TrialStatus.INTERRUPTED, None, eng.log_tail(LOG_TAIL_LINES)
    except EngineDied:
        return died(adapter, eng, log_path)
    except BenchmarkError as exc:
        if not eng.is_alive():
            return died(adapter, eng, log_path)
        reason = str(exc).splitlines()[0][:500]
        return TrialStatus.FAILED, benchmark_failure(reason), eng.log_tail(LOG_TAIL_LINES)
    finally:
        res.timings["bench_s"] = round(time.monotonic() - t_bench, 4)
    if res.reason:
        return TrialStatus.PRUNED, None, ""
    return TrialStatus.COMPLETE, None, ""
