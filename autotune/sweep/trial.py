"""One trial on a worker: launch the engine, parse its startup, run the workload cheap-first,
tear it down. Workers are stateless: they never touch the study or the database; everything
they learn comes back in a TrialResult (style-anchors §7.5).

Failure classes come from the engine adapter (log text and exit status); the trial adds the ones
only it can see: a benchmark that served garbage, an engine that died mid-benchmark, a port in
use, a cancelled trial.

Here: the port, the launch attempts and the stop. The steps live beside it, their public names
importable from here too: trial_models (TrialSpec, TrialResult), trial_command (the engine's
argv and environment), trial_serving (start, readiness, benchmark), trial_bench (the workload
and its figures), trial_failures (classification).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.engines.base import Failure, FailureClass
from autotune.store.models import TrialStatus
from autotune.sweep.trial_bench import (
    figure_from,
    flat_figures,
    order_scenarios,
    rescale,
    scenario_cost,
)
from autotune.sweep.trial_command import api_key_of, engine_command
from autotune.sweep.trial_failures import (
    LOG_TAIL_LINES,
    MAX_STARTUP_LOG_BYTES,
    Outcome,
    port_in_use,
    survived_stop,
)
from autotune.sweep.trial_models import (
    ScenarioMeasurement,
    TrialResult,
    TrialSpec,
    scrub_result,
    started_nothing,
)
from autotune.sweep.trial_serving import READY_POLL_CHUNK_S, serve

if TYPE_CHECKING:
    from autotune.engines.base import EngineAdapter
    from autotune.process import PidRegistry, StopReport

PORT_ATTEMPTS = 3  # a free port can be taken by another process before the engine binds it

__all__ = [
    "LOG_TAIL_LINES",
    "MAX_STARTUP_LOG_BYTES",
    "PORT_ATTEMPTS",
    "READY_POLL_CHUNK_S",
    "ScenarioMeasurement",
    "TrialResult",
    "TrialSpec",
    "api_key_of",
    "engine_command",
    "figure_from",
    "flat_figures",
    "order_scenarios",
    "rescale",
    "run_trial",
    "scenario_cost",
    "scrub_result",
    "started_nothing",
]


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
    from autotune.process import PidRegistry, free_port, port_is_free

    t0 = time.monotonic()
    cancel = cancel or threading.Event()
    adapter = adapter or get_adapter(spec.engine)
    worker = worker or socket.gethostname()
    registry = PidRegistry(Path(spec.registry_path)) if spec.registry_path else None
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
    if not spec.simulate:
        # this worker's install, not the driver's: a Ray trial runs on whichever node it lands
        from autotune.sweep.installed import worker_mismatch

        why = worker_mismatch(spec.engine, spec.engine_version, spec.launcher, spec.engine_env())
        if why:
            mismatch = Failure(cls=FailureClass.ENGINE_MISMATCH, reason=f"on {worker}: {why}")
            return finish(TrialStatus.FAILED, mismatch)

    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = spec.port or free_port(spec.host)
        res.port = port
        if not port_is_free(port, spec.host):
            if spec.port is None and attempt < PORT_ATTEMPTS:
                continue
            return finish(TrialStatus.FAILED, port_in_use(port, spec.host))
        (status, failure, tail), report = _launch(
            spec, adapter, port, attempt, res, cancel, gpu_indices, registry, hold_fds
        )
        retry = (
            failure is not None
            and failure.cls == FailureClass.PORT_IN_USE
            and spec.port is None
            and attempt < PORT_ATTEMPTS
            and not cancel.is_set()
        )
        if not retry:
            if report.leftovers and failure is None:
                failure = survived_stop(report.leftovers)
                status = TrialStatus.FAILED
            return finish(status, failure, tail)
    raise AssertionError("unreachable")  # pragma: no cover


def _launch(
    spec: TrialSpec,
    adapter: EngineAdapter,
    port: int,
    attempt: int,
    res: TrialResult,
    cancel: threading.Event,
    gpu_indices: Sequence[int] | None,
    registry: PidRegistry | None,
    hold_fds: Sequence[int],
) -> tuple[Outcome, StopReport]:
    """One launch on `port`: serve, then stop the engine (always) and scrub its log."""
    from autotune.process import EngineProcess

    argv, env = engine_command(spec, adapter, port)
    if gpu_indices is not None and not spec.simulate and "CUDA_VISIBLE_DEVICES" not in env:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indices)
        if "CUDA_VISIBLE_DEVICES" not in os.environ and "CUDA_DEVICE_ORDER" not in os.environ:
            # the pool's indices are NVML's, which count in PCI bus order; CUDA counts fastest
            # first unless told, and the two differ on a box with mixed GPUs
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    if not spec.simulate:  # the report's launch.sh starts what the winner ran
        from autotune.sweep.trial_record import command_record

        res.command = command_record(spec, argv, env)
    suffix = "" if attempt == 1 else f".attempt{attempt}"
    log_path = Path(spec.log_dir) / f"server{suffix}.log"
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
        outcome = serve(spec, adapter, eng, argv, env, log_path, res, cancel)
    finally:
        t_stop = time.monotonic()
        report = eng.stop(grace_s=spec.stop_grace_s)
        res.timings["stop_s"] = round(time.monotonic() - t_stop, 4)
        res.stop = report.model_dump()
        if spec.secrets:  # the engine may print its arguments (SGLang's server_args)
            from autotune.secrets import scrub_file

            scrub_file(log_path, spec.secrets.values())
    return outcome, report
