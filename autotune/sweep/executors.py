"""Where trials run: threads of this process, Ray actors that own GPU groups, or the simulator's
analytic mode (no process at all, for search-quality studies and what-if planning).

All three take a TrialSpec and give back a future of a TrialResult; the orchestrator never knows
which one it talks to. A trial whose worker dies (a killed Ray actor, a bug in a worker thread)
comes back as a FAILED result with FailureClass.WORKER_LOST; the sweep goes on.

The Ray executor lives in ray_executor.py, joining a Ray cluster in ray_connect.py (Ray is
imported only there, inside functions).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from autotune.engines.base import Failure, FailureClass
from autotune.store.models import TrialStatus
from autotune.sweep.trial import TrialResult, TrialSpec, run_trial

log = logging.getLogger(__name__)

TrialFn = Callable[..., TrialResult]


class Executor(Protocol):
    """Runs up to `slots` trials at once."""

    name: str
    slots: int

    def submit(self, spec: TrialSpec) -> Future[TrialResult]: ...

    def cancel_all(self) -> None:
        """Ask running trials to stop now (they come back INTERRUPTED, engines stopped)."""

    def stop_launching(self) -> None:
        """Graceful stop: trials still waiting for a GPU another sweep holds give up (they come
        back INTERRUPTED, to run again on resume); trials whose engine runs go on."""

    def shutdown(self) -> None: ...


def lost(spec: TrialSpec, reason: str, worker: str = "") -> TrialResult:
    return TrialResult(
        number=spec.number,
        status=TrialStatus.FAILED,
        failure=Failure(cls=FailureClass.WORKER_LOST, reason=reason),
        worker=worker,
        repeat=spec.repeat,
    )


def with_gpu_locks(
    spec: TrialSpec,
    gpus: Sequence[int] | None,
    cancelled: Callable[[], bool],
    worker: str,
    run: Callable[[list[int]], TrialResult],
) -> TrialResult:
    """``run(lock_fds)`` while holding the host-wide locks of the trial's GPUs (``gpus``: host
    indices, as NVML numbers them), so that two sweeps on one machine never launch engines on
    the same GPU at the same time. Simulated and CPU trials use no GPU and take no lock. A trial
    stopped while it waits comes back INTERRUPTED (run again later); a lock folder that cannot
    be used fails it as SPAWN_FAILED (an environment fault: repeated, it stops the sweep)."""
    if spec.simulate or not gpus:
        return run([])
    from autotune.errors import HardwareError
    from autotune.process.gpulock import GpuLocks

    label = f"{spec.sweep}/trial-{spec.number}"
    try:
        with GpuLocks(gpus, label=label) as locks:
            if not locks.acquire(cancelled=cancelled):
                return stopped_waiting(
                    spec,
                    f"GPU(s) {locks.indices}, in use by another sweep",
                    locks.waited_s,
                    worker,
                )
            res = run(locks.fds)
            if locks.waited_s >= 0.5:  # the wait is part of the trial's wall time
                res.timings["gpu_wait_s"] = locks.waited_s
            return res
    except HardwareError as exc:
        return TrialResult(
            number=spec.number,
            status=TrialStatus.FAILED,
            failure=Failure(cls=FailureClass.SPAWN_FAILED, reason=str(exc)[:500]),
            worker=worker,
            repeat=spec.repeat,
        )


def gpu_groups(
    workers: int, tp: int, *, simulate: bool, cpu: bool = False
) -> list[list[int] | None]:
    """GPU index groups of size `tp`, one per worker. Simulated trials and a CPU target
    (`gpu: cpu`) need no GPU (None each); real ones take consecutive GPUs, and there must be
    enough of them: the ones the sweep's own CUDA_VISIBLE_DEVICES names (`CUDA_VISIBLE_DEVICES
    =2,3 autotune sweep ...` keeps its trials there), else every GPU NVML sees."""
    if simulate or cpu:
        return [None] * workers
    from autotune.process.gpu import gpu_memory_used

    used = gpu_memory_used()
    count = len(used) if used is not None else 0
    ids = visible_gpu_ids(count)
    if len(ids) < tp:
        from autotune.errors import HardwareError

        seen = (
            f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']} names {len(ids)} of "
            f"the {count} NVML sees"
            if "CUDA_VISIBLE_DEVICES" in os.environ and count
            else f"NVML sees {count}"
        )
        raise HardwareError(
            f"a trial needs {tp} GPU(s) (target.tp) but {seen}; use the simulator "
            "(simulate:), a machine with GPUs, or gpu: cpu for an engine that runs on a CPU"
        )
    n = min(workers, len(ids) // tp)
    return [ids[i * tp : (i + 1) * tp] for i in range(n)]


def visible_gpu_ids(count: int) -> list[int]:
    """The GPUs a sweep may use: the indices its environment's CUDA_VISIBLE_DEVICES names
    (those NVML also sees), else 0..count-1. UUIDs or MIG names there are not indices NVML
    pairs with a trial, so they leave every GPU usable, as before."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(range(count))
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        return list(range(count))
    return [int(p) for p in dict.fromkeys(parts) if int(p) < count]


def trial_gpus(spec: TrialSpec) -> int:
    """How many GPUs the trial's engine runs on: the tensor-parallel size its configuration
    sets where the search varies it (tp_size, tensor_parallel_size or tp: the engine is given
    that one, see trial_command), else the sweep's target.tp."""
    for key in ("tp_size", "tensor_parallel_size", "tp"):
        value = spec.config.get(key)
        if value is None:
            continue
        with contextlib.suppress(TypeError, ValueError):  # a ${env:...} reference: target.tp
            return max(1, int(value))
    return max(1, spec.tp)


def stopped_waiting(
    spec: TrialSpec, waiting_for: str, waited_s: float, worker: str
) -> TrialResult:
    """A trial the sweep stopped while it waited for GPUs (nothing launched)."""
    return TrialResult(
        number=spec.number,
        status=TrialStatus.INTERRUPTED,
        reason=f"interrupted while waiting for {waiting_for} (sweep stopping)",
        worker=worker,
        repeat=spec.repeat,
        timings={"gpu_wait_s": waited_s},
    )


def too_many_gpus(
    spec: TrialSpec, need: int, have: int, where: str, worker: str = ""
) -> TrialResult:
    """A trial whose TP size exceeds the GPUs it could ever get: failed as a configuration the
    hardware cannot run (nothing launched), instead of waiting forever."""
    return TrialResult(
        number=spec.number,
        status=TrialStatus.FAILED,
        failure=Failure(
            cls=FailureClass.BAD_ARGUMENTS,
            reason=f"the configuration needs {need} GPU(s) (its tensor-parallel size) but "
            f"{where} has {have}",
        ),
        worker=worker,
        repeat=spec.repeat,
    )


class GpuPool:
    """The GPUs of an executor, handed to trials by their TP size (`take(n)`: n distinct
    GPUs, `give` them back), so TP 1 and TP 2 trials share one set of GPUs.

    First come, first served: a trial that needs more GPUs than are free waits, and the trials
    behind it wait too; otherwise a stream of TP 1 trials could starve a TP 2 one forever. A
    TP n trial gets an aligned block of n neighbouring GPUs where one is free (TP groups then
    stay on the GPUs a uniform-TP sweep would give them), else any n free ones."""

    def __init__(self, gpus: Sequence[int]):
        self.gpus = list(dict.fromkeys(gpus))
        self._free = set(self.gpus)
        self._queue: deque[object] = deque()
        self._changed = threading.Condition()

    def take(self, n: int, given_up: Callable[[], bool]) -> list[int] | None:
        """`n` free GPUs, waiting for them in turn; None once `given_up()` (nothing taken).
        The caller makes sure `n` is at most len(gpus)."""
        turn = object()
        with self._changed:
            self._queue.append(turn)
            try:
                while not (self._queue[0] is turn and len(self._free) >= n):
                    if given_up():
                        return None
                    self._changed.wait(timeout=0.1)
                picked = self._pick(n)
                self._free.difference_update(picked)
                return picked
            finally:
                self._queue.remove(turn)
                self._changed.notify_all()  # the next in line may fit now

    def give(self, gpus: Sequence[int]) -> None:
        with self._changed:
            self._free.update(gpus)
            self._changed.notify_all()

    def _pick(self, n: int) -> list[int]:
        for i in range(0, len(self.gpus) - n + 1, n):
            block = self.gpus[i : i + n]
            if self._free.issuperset(block):
                return block
        return [g for g in self.gpus if g in self._free][:n]


class InProcessExecutor:
    """A thread per slot. With GPUs, the slots share the GPUs of `groups` (a pool): each trial
    takes as many as its TP size needs (trial_gpus) and waits while they are not free."""

    name = "inprocess"

    def __init__(
        self,
        workers: int = 1,
        *,
        groups: Sequence[list[int] | None] | None = None,
        trial_fn: TrialFn = run_trial,
    ):
        groups = list(groups) if groups is not None else [None] * workers
        if not groups:
            raise ValueError("InProcessExecutor needs at least one worker slot")
        self.slots = len(groups)
        self._slot_ids: queue.Queue[int] = queue.Queue()
        for i in range(self.slots):
            self._slot_ids.put(i)
        gpus = [g for group in groups if group for g in group]
        self._gpus = GpuPool(gpus) if gpus else None  # None: simulated or CPU trials
        self._pool = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="trial")
        self._cancel = threading.Event()
        self._no_launch = threading.Event()
        self._trial_fn = trial_fn
        self._host = socket.gethostname()

    def submit(self, spec: TrialSpec) -> Future[TrialResult]:
        return self._pool.submit(self._run, spec)

    def _run(self, spec: TrialSpec) -> TrialResult:
        slot = self._slot_ids.get()
        worker = f"{self._host}/slot{slot}"
        try:
            return self._run_on_gpus(spec, worker)
        except Exception as exc:  # a bug in the worker must not end the sweep
            log.exception("trial %s crashed its worker thread", spec.number)
            return lost(spec, f"worker thread raised {type(exc).__name__}: {exc}", worker)
        finally:
            self._slot_ids.put(slot)

    def _run_on_gpus(self, spec: TrialSpec, worker: str) -> TrialResult:
        """The trial on GPUs taken from the pool for it (none for a simulated or CPU one)."""

        def stopping() -> bool:
            return self._cancel.is_set() or self._no_launch.is_set()

        need = trial_gpus(spec)
        if self._gpus is None or spec.simulate:
            return self._run_on(spec, worker, None, stopping)
        if need > len(self._gpus.gpus):
            return too_many_gpus(spec, need, len(self._gpus.gpus), "this sweep", worker)
        t0 = time.monotonic()
        gpus = self._gpus.take(need, stopping)
        waited = round(time.monotonic() - t0, 3)
        if gpus is None:
            return stopped_waiting(spec, f"{need} free GPU(s) of this sweep", waited, worker)
        try:
            res = self._run_on(spec, worker, gpus, stopping)
        finally:
            self._gpus.give(gpus)
        if waited >= 0.5:  # waiting for this sweep's own trials is part of the wall time too
            res.timings["gpu_wait_s"] = round(res.timings.get("gpu_wait_s", 0.0) + waited, 3)
        return res

    def _run_on(
        self, spec: TrialSpec, worker: str, gpus: list[int] | None, stopping: Callable[[], bool]
    ) -> TrialResult:
        return with_gpu_locks(
            spec,
            gpus,
            stopping,
            worker,
            lambda fds: self._trial_fn(
                spec,
                worker=worker,
                gpu_indices=gpus,
                cancel=self._cancel,
                **({"hold_fds": fds} if fds else {}),
            ),
        )

    def cancel_all(self) -> None:
        self._cancel.set()

    def stop_launching(self) -> None:
        self._no_launch.set()  # one way: a stopping sweep submits nothing new

    def shutdown(self) -> None:
        self._cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
