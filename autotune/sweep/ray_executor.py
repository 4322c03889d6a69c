"""The Ray executor: Ray actors that own GPU groups, one per trial running, each running its
trial under the host-wide GPU locks (executors.with_gpu_locks). Apart from executors.py, which
holds what every executor shares, so that each module stays under the size rule; `import ray`
stays inside the functions (Ray is an optional extra).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from autotune.store.models import TrialStatus
from autotune.sweep.executors import TrialFn, lost, too_many_gpus, trial_gpus, with_gpu_locks
from autotune.sweep.ray_connect import connect_ray
from autotune.sweep.trial import TrialResult, TrialSpec, run_trial

log = logging.getLogger(__name__)

_ACTOR_CLS: Any = None
RAY_PLACE_PATIENCE_S = 15.0  # an actor not placed by then: retire another idle actor


def _node_ip() -> str:
    import ray

    return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


def _run_in_actor(
    spec_json: str,
    cancel: threading.Event,
    no_launch: threading.Event,
    trial_fn: TrialFn | None = None,
) -> str:
    """A Ray actor's trial: the spec and the result travel as JSON."""
    import ray

    spec = TrialSpec.model_validate_json(spec_json)
    gpus = [int(g) for g in ray.get_gpu_ids()] or None
    worker = f"ray:{_node_ip()}/pid{os.getpid()}"
    run = trial_fn or run_trial
    # Ray sets CUDA_VISIBLE_DEVICES for the actor to the IDs it gave it; the trial gives the
    # engine the same IDs (not 0..tp-1, which the engine's own CUDA_VISIBLE_DEVICES would
    # turn into the node's first GPUs, whatever Ray gave), and the host-wide locks and the
    # memory watch take them as the node's GPU indices.
    res = with_gpu_locks(
        spec,
        gpus,
        lambda: cancel.is_set() or no_launch.is_set(),
        worker,
        lambda fds: run(
            spec,
            worker=worker,
            gpu_indices=gpus,
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

        def __init__(self, registry_path: str | None, trial_fn: TrialFn | None = None) -> None:
            self._cancel = threading.Event()
            self._no_launch = threading.Event()
            self._trial_fn = trial_fn  # None: run_trial (tests pass a stand-in)
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
            return _run_in_actor(spec_json, self._cancel, self._no_launch, self._trial_fn)

        def cancel(self) -> None:
            self._cancel.set()

        def stop_waiting(self) -> None:
            self._no_launch.set()

    _ACTOR_CLS = ray.remote(max_concurrency=2)(TrialActor)  # type: ignore[call-overload]
    return _ACTOR_CLS


class RayExecutor:
    """Ray actors that own GPUs, one per trial running: each has as many GPUs as its trial's
    TP size needs (trial_gpus; TP 1 and TP 2 trials mix), or one CPU for the simulator and for
    a CPU target (pass simulate=True for both, "no GPU per trial").

    An idle actor runs the next trial of its size. A trial of another size gets a new actor,
    which Ray places once that many GPUs of one node are free; idle actors of other sizes are
    retired to free theirs, and there are never more actors than slots. One dispatcher places
    the trials in the order they come, so a TP 2 trial is not starved by TP 1 trials.

    `address` joins an existing cluster (`ray start --head` on one machine, `ray start
    --address ...` on the others) so a sweep spans machines; without it a local Ray instance is
    started and shut down with the executor. `trial_fn` replaces run_trial in the actors (a
    module-level function: it is pickled to them).
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
        trial_fn: TrialFn | None = None,
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
                    # "local": a cluster of our own even where `ray start` runs one here (or
                    # RAY_ADDRESS names one), which would refuse num_cpus; --ray-address auto
                    # joins that one
                    address="local",
                    num_cpus=max(os.cpu_count() or 1, workers or 2),
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            else:  # the cluster's resources are its own: pass none
                connect_ray(ray, address)
        self._simulate = simulate  # the simulator needs a CPU, a real engine its GPUs
        self._registry_path = registry_path
        self._trial_fn = trial_fn
        if workers is None:  # one actor per GPU group the cluster has (2 for the simulator)
            gpus = int(ray.cluster_resources().get("GPU", 0))  # type: ignore[no-untyped-call]
            workers = 2 if simulate else max(1, gpus // tp)
        self.slots = workers
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # an actor became idle, or a flag set
        self._info: dict[int, Any] = {}
        self._gpus_of: dict[int, int] = {}  # id(actor) -> its GPU count
        self._idle: list[Any] = []
        self._busy: set[int] = set()  # id() of actors running (or about to run) a trial
        self.actors: list[Any] = []
        self._pending: dict[Any, tuple[Any, TrialSpec, Future[TrialResult]]] = {}
        self._cancelled = False
        self._no_launch = False
        self._told_to_stop: set[int] = set()
        self._closing = threading.Event()
        for _ in range(workers):
            actor = self._new_actor(0 if simulate else tp)
            with self._lock:
                self._idle.append(actor)
        self._queue: queue.Queue[tuple[TrialSpec, Future[TrialResult]]] = queue.Queue()
        self._dispatcher = threading.Thread(
            target=self._dispatch_loop, name="ray-dispatch", daemon=True
        )
        self._dispatcher.start()
        self._waiter = threading.Thread(target=self._wait_loop, name="ray-waiter", daemon=True)
        self._waiter.start()

    def _new_actor(self, gpus: int) -> Any:
        options: dict[str, Any] = {"num_cpus": 1, "num_gpus": gpus} if gpus else {"num_cpus": 1}
        actor = _actor_class().options(**options).remote(self._registry_path, self._trial_fn)
        with self._lock:
            self.actors.append(actor)
            self._gpus_of[id(actor)] = gpus
            # Small results are inlined to the caller: readable after the actor has died.
            self._info[id(actor)] = actor.info.remote()
        return actor

    def _retire(self, actor: Any) -> None:
        """Kill an actor no trial uses (Ray frees its GPUs)."""
        with self._lock:
            if actor in self.actors:
                self.actors.remove(actor)
            self._info.pop(id(actor), None)
            self._gpus_of.pop(id(actor), None)
            self._busy.discard(id(actor))
        with contextlib.suppress(Exception):  # already gone
            self._ray.kill(actor, no_restart=True)

    def busy_actors(self) -> list[Any]:
        with self._lock:
            return [a for a, _, _ in self._pending.values()]

    def submit(self, spec: TrialSpec) -> Future[TrialResult]:
        fut: Future[TrialResult] = Future()
        fut.set_running_or_notify_cancel()
        self._queue.put((spec, fut))
        return fut

    def _stopping(self) -> bool:
        return self._cancelled or self._no_launch or self._closing.is_set()

    def _dispatch_loop(self) -> None:
        while not self._closing.is_set():
            try:
                spec, fut = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            try:
                self._dispatch(spec, fut)
            except Exception as exc:  # a Ray fault must not leave the trial unanswered
                log.exception("could not start trial %s on Ray", spec.number)
                fut.set_result(lost(spec, f"Ray could not start the trial: {exc}"[:300]))
        while True:  # closing: what is still queued never launched
            try:
                spec, fut = self._queue.get_nowait()
            except queue.Empty:
                return
            fut.set_result(_not_launched(spec))

    def _dispatch(self, spec: TrialSpec, fut: Future[TrialResult]) -> None:
        need = 0 if self._simulate else trial_gpus(spec)
        most = self._largest_node_gpus() if need else 0
        if need > most:
            where = "the largest node of the Ray cluster"
            fut.set_result(too_many_gpus(spec, need, most, where))
            return
        actor = self._actor_for(need)
        if actor is None:
            fut.set_result(_not_launched(spec))
            return
        try:
            ref = actor.run.remote(spec.model_dump_json())
        except Exception:
            self._retire(actor)  # its slot is free again
            raise
        with self._lock:
            self._pending[ref] = (actor, spec, fut)

    def _largest_node_gpus(self) -> int:
        nodes = self._ray.nodes()  # type: ignore[no-untyped-call]
        return max(
            (int(n.get("Resources", {}).get("GPU", 0)) for n in nodes if n.get("Alive")),
            default=0,
        )

    def _actor_for(self, need: int) -> Any | None:
        """An actor with `need` GPUs for the next trial, once a slot is free and Ray has placed
        it (marked busy); None when the sweep stops meanwhile."""
        with self._changed:
            while True:
                if self._stopping():
                    return None
                if len(self._busy) < self.slots:
                    same = self._take_idle(need, same=True)
                    if same is not None:
                        return same
                    break
                self._changed.wait(timeout=0.1)
        while True:  # no idle actor of this size: at most `slots` actors, then a new one
            with self._lock:
                full = len(self.actors) >= self.slots
                victim = self._take_idle(need, same=False) if full else None
            if victim is None:
                break
            self._retire(victim)
        actor = self._new_actor(need)
        with self._lock:
            self._busy.add(id(actor))
            placed = self._info[id(actor)]
        total = int(self._ray.cluster_resources().get("GPU", 0))  # type: ignore[no-untyped-call]
        last_retired = time.monotonic()
        # Ray places it once `need` GPUs of one node are free (its answer to info() comes once
        # its process has started too). Idle actors of other sizes may hold the missing GPUs:
        # one is retired while our own actors leave too few free, or when the new one has
        # waited a while all the same (GPUs others use, or spread over nodes). One of this
        # size may come back meanwhile.
        while not self._ray.wait([placed], timeout=0.1)[0]:
            if self._stopping():
                self._retire(actor)
                return None
            with self._lock:
                same = self._take_idle(need, same=True)
                held = sum(self._gpus_of.values()) - need  # by our other actors
                patient = time.monotonic() - last_retired < RAY_PLACE_PATIENCE_S
                short = same is None and (total - held < need or not patient)
                victim = self._take_idle(need, same=False) if short else None
            if same is not None:
                self._retire(actor)
                return same
            if victim is not None:
                self._retire(victim)
                last_retired = time.monotonic()
        return actor

    def _take_idle(self, need: int, *, same: bool) -> Any | None:
        """An idle actor with (`same`) or without `need` GPUs, out of the idle list: marked
        busy when it is to run a trial, or about to be retired. The lock is held."""
        found = next((a for a in self._idle if (self._gpus_of.get(id(a)) == need) == same), None)
        if found is not None:
            self._idle.remove(found)
            self._busy.add(id(found))
        return found

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
        with self._changed:
            self._busy.discard(id(actor))
            self._idle.append(actor)
            self._changed.notify_all()
        fut.set_result(result)

    def _replace(self, dead: Any) -> None:
        """Swap a dead actor for a new one of its size; stop the engine it left behind (its
        owner, the actor process, is gone, so the PID registry treats the engine as an
        orphan)."""
        with self._lock:
            if dead in self.actors:
                self.actors.remove(dead)
            info_ref = self._info.pop(id(dead), None)
            gpus = self._gpus_of.pop(id(dead), 0)
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
        actor = None if self._closing.is_set() else self._new_actor(gpus)
        with self._changed:  # the slot is free once its new actor is there
            self._busy.discard(id(dead))
            if actor is not None:
                self._idle.append(actor)
            self._changed.notify_all()

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
        self._dispatcher.join(timeout=5)
        self._waiter.join(timeout=5)
        with self._lock:
            actors = list(self.actors)
        for actor in actors:
            with contextlib.suppress(Exception):  # already gone: shutting down regardless
                self._ray.kill(actor, no_restart=True)
        if self._owns_cluster:
            self._ray.shutdown()


def _not_launched(spec: TrialSpec) -> TrialResult:
    return TrialResult(
        number=spec.number,
        status=TrialStatus.INTERRUPTED,
        reason="interrupted before launch (sweep stopping)",
        repeat=spec.repeat,
    )
