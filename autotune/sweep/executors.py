"""Where trials run: threads of this process, Ray actors that own GPU groups, or the simulator's
analytic mode (no process at all, for search-quality studies and what-if planning).

All three take a TrialSpec and give back a future of a TrialResult; the orchestrator never knows
which one it talks to. A trial whose worker dies (a killed Ray actor, a bug in a worker thread)
comes back as a FAILED result with FailureClass.WORKER_LOST; the sweep goes on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

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
                return TrialResult(
                    number=spec.number,
                    status=TrialStatus.INTERRUPTED,
                    reason=f"interrupted while waiting for GPU(s) {locks.indices}, in use by "
                    "another sweep (sweep stopping)",
                    worker=worker,
                    repeat=spec.repeat,
                    timings={"gpu_wait_s": locks.waited_s},
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
    (`gpu: cpu`) need no GPU (None each); real ones take consecutive NVML indices, and there
    must be enough of them."""
    if simulate or cpu:
        return [None] * workers
    from autotune.process.gpu import gpu_memory_used

    used = gpu_memory_used()
    count = len(used) if used is not None else 0
    if count < tp:
        from autotune.errors import HardwareError

        raise HardwareError(
            f"a trial needs {tp} GPU(s) (target.tp) but NVML sees {count}; use the simulator "
            "(simulate:), a machine with GPUs, or gpu: cpu for an engine that runs on a CPU"
        )
    n = min(workers, count // tp)
    return [list(range(i * tp, (i + 1) * tp)) for i in range(n)]


class InProcessExecutor:
    """A thread per slot; each slot owns one GPU group for the trial it runs."""

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
        self._free: queue.Queue[tuple[int, list[int] | None]] = queue.Queue()
        for i, g in enumerate(groups):
            self._free.put((i, g))
        self._pool = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="trial")
        self._cancel = threading.Event()
        self._no_launch = threading.Event()
        self._trial_fn = trial_fn
        self._host = socket.gethostname()

    def submit(self, spec: TrialSpec) -> Future[TrialResult]:
        return self._pool.submit(self._run, spec)

    def _run(self, spec: TrialSpec) -> TrialResult:
        slot, group = self._free.get()
        worker = f"{self._host}/slot{slot}"
        try:
            return with_gpu_locks(
                spec,
                group,
                lambda: self._cancel.is_set() or self._no_launch.is_set(),
                worker,
                lambda fds: self._trial_fn(
                    spec,
                    worker=worker,
                    gpu_indices=group,
                    cancel=self._cancel,
                    **({"hold_fds": fds} if fds else {}),
                ),
            )
        except Exception as exc:  # a bug in the worker must not end the sweep
            log.exception("trial %s crashed its worker thread", spec.number)
            return lost(spec, f"worker thread raised {type(exc).__name__}: {exc}", worker)
        finally:
            self._free.put((slot, group))

    def cancel_all(self) -> None:
        self._cancel.set()

    def stop_launching(self) -> None:
        self._no_launch.set()  # one way: a stopping sweep submits nothing new

    def shutdown(self) -> None:
        self._cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)


# -- Ray --------------------------------------------------------------------------------------

_ACTOR_CLS: Any = None


def _node_ip() -> str:
    import ray

    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def _run_in_actor(spec_json: str, cancel: threading.Event, no_launch: threading.Event) -> str:
    """A Ray actor's trial: the spec and the result travel as JSON."""
    import ray

    spec = TrialSpec.model_validate_json(spec_json)
    gpus = [int(g) for g in ray.get_gpu_ids()] or None
    worker = f"ray:{_node_ip()}/pid{os.getpid()}"
    # Ray sets CUDA_VISIBLE_DEVICES for the actor; the engine inherits it, and its GPUs are
    # 0..tp-1 from its own point of view. The host-wide locks take Ray's own IDs, the node's
    # GPU indices.
    res = with_gpu_locks(
        spec,
        gpus,
        lambda: cancel.is_set() or no_launch.is_set(),
        worker,
        lambda fds: run_trial(
            spec,
            worker=worker,
            gpu_indices=list(range(len(gpus))) if gpus else None,
            cancel=cancel,
            hold_fds=fds,
        ),
    )
    return res.model_dump_json()


def _actor_class() -> Any:
    """The Ray actor class, built on first use so that `import ray` stays lazy."""
    global _ACTOR_CLS
    if _ACTOR_CLS is not None:
        return _ACTOR_CLS
    import ray

    class TrialActor:
        """Owns the GPUs Ray gave it; runs one trial at a time (a second thread serves
        cancel() while run() works)."""

        def __init__(self, registry_path: str | None) -> None:
            self._cancel = threading.Event()
            self._no_launch = threading.Event()
            if registry_path:
                # Engines a killed predecessor on this node left behind.
                from autotune.process import PidRegistry

                PidRegistry(Path(registry_path)).reap_orphans()

        def info(self) -> dict[str, Any]:
            ctx = ray.get_runtime_context()
            return {
                "pid": os.getpid(),
                "node": _node_ip(),
                "actor_id": ctx.get_actor_id(),
                "gpu_ids": [int(g) for g in ray.get_gpu_ids()],
            }

        def run(self, spec_json: str) -> str:
            self._cancel.clear()
            return _run_in_actor(spec_json, self._cancel, self._no_launch)

        def cancel(self) -> None:
            self._cancel.set()

        def stop_waiting(self) -> None:
            self._no_launch.set()

    _ACTOR_CLS = ray.remote(max_concurrency=2)(TrialActor)  # type: ignore[call-overload]
    return _ACTOR_CLS


class RayExecutor:
    """Ray actors, one per GPU group of `tp` GPUs (or one CPU each for the simulator and for a
    CPU target: pass simulate=True for both, "no GPU per trial").

    `address` joins an existing cluster (`ray start --head` on one machine, `ray start
    --address ...` on the others) so a sweep spans machines; without it a local Ray instance is
    started and shut down with the executor.
    """

    name = "ray"

    def __init__(
        self,
        workers: int | None = None,
        *,
        tp: int = 1,
        simulate: bool = False,
        address: str | None = None,
        registry_path: str | None = None,
    ):
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - ray is an optional extra
            from autotune.errors import ConfigError

            raise ConfigError(
                "the ray executor needs Ray: pip install 'autotune[ray]' (or use --executor "
                "inprocess)",
                field="--executor",
            ) from exc
        self._ray = ray
        self._owns_cluster = not ray.is_initialized() and address is None
        if not ray.is_initialized():
            if address is None:
                ray.init(
                    num_cpus=max(os.cpu_count() or 1, workers or 2),
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            else:  # the cluster's resources are its own: pass none
                ray.init(address=address, log_to_driver=False, configure_logging=False)
        # The simulator needs a CPU, a real engine its GPUs (Ray sets CUDA_VISIBLE_DEVICES).
        self._options: dict[str, Any] = (
            {"num_cpus": 1} if simulate else {"num_cpus": 1, "num_gpus": tp}
        )
        self._registry_path = registry_path
        if workers is None:  # one actor per GPU group the cluster has (2 for the simulator)
            gpus = int(ray.cluster_resources().get("GPU", 0))  # type: ignore[no-untyped-call]
            workers = 2 if simulate else max(1, gpus // tp)
        self.slots = workers
        self._lock = threading.Lock()
        self._info: dict[int, Any] = {}
        self._idle: queue.Queue[Any] = queue.Queue()
        self.actors: list[Any] = []
        for _ in range(workers):
            actor = self._new_actor()
            self._idle.put(actor)
        self._pending: dict[Any, tuple[Any, TrialSpec, Future[TrialResult]]] = {}
        self._cancelled = False
        self._no_launch = False
        self._told_to_stop: set[int] = set()
        self._closing = threading.Event()
        self._waiter = threading.Thread(target=self._wait_loop, name="ray-waiter", daemon=True)
        self._waiter.start()

    def _new_actor(self) -> Any:
        actor = _actor_class().options(**self._options).remote(self._registry_path)
        with self._lock:
            self.actors.append(actor)
            # Small results are inlined to the caller: readable after the actor has died.
            self._info[id(actor)] = actor.info.remote()
        return actor

    def busy_actors(self) -> list[Any]:
        with self._lock:
            return [a for a, _, _ in self._pending.values()]

    def submit(self, spec: TrialSpec) -> Future[TrialResult]:
        fut: Future[TrialResult] = Future()
        fut.set_running_or_notify_cancel()
        threading.Thread(
            target=self._dispatch, args=(spec, fut), name="ray-dispatch", daemon=True
        ).start()
        return fut

    def _dispatch(self, spec: TrialSpec, fut: Future[TrialResult]) -> None:
        actor = self._idle.get()  # blocks while every actor is busy
        if self._cancelled or self._no_launch:
            self._idle.put(actor)
            fut.set_result(
                TrialResult(
                    number=spec.number,
                    status=TrialStatus.INTERRUPTED,
                    reason="interrupted before launch (sweep stopping)",
                    repeat=spec.repeat,
                )
            )
            return
        ref = actor.run.remote(spec.model_dump_json())
        with self._lock:
            self._pending[ref] = (actor, spec, fut)

    def _wait_loop(self) -> None:
        ray = self._ray
        while not self._closing.is_set():
            with self._lock:
                refs = list(self._pending)
            if not refs:
                time.sleep(0.05)
                continue
            ready, _ = ray.wait(refs, num_returns=1, timeout=0.2)
            for ref in ready:
                with self._lock:
                    actor, spec, fut = self._pending.pop(ref)
                self._finish(ref, actor, spec, fut)

    def _finish(self, ref: Any, actor: Any, spec: TrialSpec, fut: Future[TrialResult]) -> None:
        ray = self._ray
        from ray.exceptions import RayActorError, RayError

        try:
            result = TrialResult.model_validate_json(ray.get(ref))
        except RayActorError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            result = lost(spec, f"the Ray actor running the trial died: {first[:300]}")
            self._replace(actor)
            fut.set_result(result)
            return
        except RayError as exc:
            result = lost(spec, f"Ray failed the trial: {type(exc).__name__}: {str(exc)[:300]}")
        self._idle.put(actor)
        fut.set_result(result)

    def _replace(self, dead: Any) -> None:
        """Swap a dead actor for a new one; stop the engine it left behind (its owner, the
        actor process, is gone, so the PID registry treats the engine as an orphan)."""
        with self._lock:
            if dead in self.actors:
                self.actors.remove(dead)
            info_ref = self._info.pop(id(dead), None)
        with contextlib.suppress(Exception):  # already gone
            self._ray.kill(dead, no_restart=True)
        dead_pid = None
        if info_ref is not None:
            try:
                dead_pid = self._ray.get(info_ref, timeout=2)["pid"]
            except Exception:  # it died before answering: its engines wait for a new actor
                dead_pid = None
        if self._registry_path and dead_pid is not None:
            from autotune.process import PidRegistry

            reg = PidRegistry(Path(self._registry_path))
            deadline = time.monotonic() + 10.0
            # The dead actor may linger as a zombie for a moment: its entries count as live.
            while time.monotonic() < deadline:
                reg.reap_orphans()
                if not any(e.get("owner_pid") == dead_pid for e in reg.entries()):
                    break
                time.sleep(0.2)
        if not self._closing.is_set():
            self._idle.put(self._new_actor())

    def cancel_all(self) -> None:
        self._cancelled = True
        for actor in self.busy_actors():
            with contextlib.suppress(Exception):  # a dead actor is reported via its pending ref
                actor.cancel.remote()

    def stop_launching(self) -> None:
        self._no_launch = True
        # Called on every poll of a stopping sweep: tell each busy actor once (one dispatched
        # just before the flag was set shows up busy on a later call).
        for actor in self.busy_actors():
            if id(actor) not in self._told_to_stop:
                self._told_to_stop.add(id(actor))
                with contextlib.suppress(Exception):  # a dead actor: reported via its ref
                    actor.stop_waiting.remote()

    def shutdown(self) -> None:
        self.cancel_all()
        deadline = time.monotonic() + 60.0
        while self.busy_actors() and time.monotonic() < deadline:
            time.sleep(0.1)
        self._closing.set()
        self._waiter.join(timeout=5)
        with self._lock:
            actors = list(self.actors)
        for actor in actors:
            with contextlib.suppress(Exception):  # already gone: shutting down regardless
                self._ray.kill(actor, no_restart=True)
        if self._owns_cluster:
            self._ray.shutdown()
