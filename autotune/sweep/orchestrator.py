"""The sweep driver: ask Optuna, gate with the planner, dispatch to workers, store, tell.

    run_sweep(spec, store=Store(...), out_dir=...) -> SweepOutcome

Unattended by design: every trial's outcome is written to the database the moment it is known
(a kill -9 loses only what was running), SIGINT stops gracefully (first: no new trials; second:
running trials are stopped and marked interrupted), SIGTERM stops at once the same way, budgets
(trials, wall clock, a deadline) end the search, and `resume=True` continues a sweep: orphaned
engines are reaped, interrupted trials are re-queued, and Optuna's state is reconciled with ours.
"""

from __future__ import annotations

import logging
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from autotune.errors import ConfigError, StorageError, TrialInfeasible, UserError, locate
from autotune.secrets import protect_spec, protect_spec_text
from autotune.store.models import SweepStatus
from autotune.sweep.spec import SweepSpec, port_workers_error, until_deadline

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.sweep.executors import Executor

log = logging.getLogger(__name__)


class SweepOutcome(BaseModel):
    """What `run_sweep` hands back (the report is built from the database by name)."""

    name: str
    sweep_id: int
    db_url: str = Field(
        exclude=True,
        description="SQLAlchemy URL of the database (password included: never dumped)",
    )
    db_display: str = Field(description="the URL with its password masked")
    status: str
    stop_reason: str
    out_dir: str
    elapsed_s: float
    launched: int = Field(description="trials that started an engine (this sweep, all runs)")
    counts: dict[str, int] = Field(default_factory=dict, description="trials by status")
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    best: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    finalists: list[dict[str, Any]] = Field(default_factory=list)
    pareto: list[int] = Field(
        default_factory=list, description="multi-objective: trial numbers on the Pareto front"
    )
    planner_correction: dict[str, Any] = Field(default_factory=dict)
    seeds: list[dict[str, Any]] = Field(default_factory=list)
    signal: int | None = None
    infeasible: bool = Field(
        False, description="no trial met the constraints (or nothing fit): there is no winner"
    )
    early_stop_exit: int | None = Field(
        None, description="exit code of the failure class that stopped the sweep early"
    )

    @property
    def exit_code(self) -> int:
        if self.signal:
            return 128 + self.signal
        if self.early_stop_exit is not None:
            return self.early_stop_exit
        return TrialInfeasible.exit_code if self.infeasible else 0


@dataclass
class Budget:
    max_trials: int | None = None
    wall_clock_s: float | None = None
    deadline: datetime | None = None  # absolute (from --until)
    max_idle_asks: int = 200
    t0: float = field(default_factory=time.monotonic)

    def seconds_left(self) -> float | None:
        left: list[float] = []
        if self.wall_clock_s is not None:
            left.append(self.wall_clock_s - (time.monotonic() - self.t0))
        if self.deadline is not None:
            left.append((self.deadline - datetime.now().astimezone()).total_seconds())
        return min(left) if left else None


class StopController:
    """Signals -> stop requests. `graceful`: start no new trial; `hard`: stop running ones."""

    def __init__(self) -> None:
        self.graceful = threading.Event()
        self.hard = threading.Event()
        self.reason = ""
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def request(self, reason: str, *, hard: bool = False) -> None:
        if not self.reason or (hard and not self.hard.is_set()):
            self.reason = reason
        self.graceful.set()
        if hard:
            self.hard.set()

    def _handler(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        self.signum = signum
        if signum == signal.SIGINT and not self.graceful.is_set():
            self.request(f"{name}: finishing running trials (send again to stop them now)")
        else:
            self.request(f"{name}: running trials stopped and marked interrupted", hard=True)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


def default_out_dir(name: str) -> Path:
    return Path("reports") / name


def make_out_dir(out: Path, *, field: str) -> None:
    """Create `out` and prove it writable (ConfigError naming `field` otherwise)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".autotune-write-test-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"cannot write the output folder {str(out)!r}: {reason}; give a writable folder",
            field=field,
        ) from None


def registry_path_for(store: Store, out_dir: Path) -> Path:
    """The PID registry sits beside an SQLite database (so every sweep that uses that file
    shares it), else in the output folder."""
    from sqlalchemy.engine import make_url

    url = make_url(store.storage_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return Path(url.database).with_name(Path(url.database).name + ".pids.jsonl")
    return out_dir / "pids.jsonl"


def run_sweep(
    spec: SweepSpec,
    *,
    store: Store,
    spec_yaml: str = "",
    resume: bool = False,
    out_dir: Path | None = None,
    executor: Executor | None = None,
    executor_kind: str | None = None,
    workers: int | None = None,
    ray_address: str | None = None,
    max_trials: int | None = None,
    wall_clock_s: float | None = None,
    until: str | None = None,
    progress: bool | str = False,
    stop: StopController | None = None,
    install_signals: bool = True,
    on_trial: Callable[[dict[str, Any]], None] | None = None,
    spec_dir: Path | None = None,
) -> SweepOutcome:
    """Run (or resume) the sweep `spec` to its budget; returns its outcome.

    CLI flags override the spec's budget and execution (`max_trials`, `wall_clock_s`,
    `until`, `workers`, `executor_kind`, `ray_address`). `executor` injects a ready executor
    (tests, the analytic benchmark); otherwise one is built and shut down here. `progress`:
    True/False (the rich bar or nothing) or a `--progress` choice (auto, rich, json, none).
    """
    from autotune.sweep.driver import Sweep

    until_text = until or spec.budget.until
    budget = Budget(
        max_trials=max_trials if max_trials is not None else spec.budget.max_trials,
        wall_clock_s=wall_clock_s if wall_clock_s is not None else spec.budget.wall_clock_s,
        deadline=until_deadline(until_text) if until_text else None,
        max_idle_asks=spec.budget.max_idle_asks,
    )
    stop = stop or StopController()
    # Secrets become ${env:NAME} references before anything is stored or printed; their values
    # stay in memory and go only to the workers (autotune.secrets).
    spec, secrets = protect_spec(spec)
    check_target(spec)  # bad names fail here, before the database is touched
    if not spec_yaml:  # programmatic callers: store a spec that `--resume` can read back
        import yaml

        spec_yaml = yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
    else:
        spec_yaml = protect_spec_text(spec_yaml, secrets, source=f"sweep {spec.name}")
    # The output folder is made before the sweep row: a folder that cannot be written is a
    # clear error, not a sweep left marked running (a resumed one keeps its folder).
    existing = store.find_sweep(spec.name) if resume else None
    stored_out = ((existing.notes or {}) if existing is not None else {}).get("out_dir")
    out = (
        Path(out_dir)
        if out_dir is not None
        else (Path(stored_out) if stored_out else default_out_dir(spec.name))
    )
    make_out_dir(out, field="--out" if out_dir is not None else "output folder")
    row = _sweep_row(store, spec, spec_yaml, resume, spec_dir)
    row = store.update_sweep(
        row.id or 0,
        notes={**(row.notes or {}), "out_dir": str(out.resolve()), "driver": _driver_identity()},
    )
    own_executor = executor is None
    n_workers = workers or spec.execution.workers
    sweep = Sweep(
        spec,
        store=store,
        row=row,
        out_dir=out,
        budget=budget,
        stop=stop,
        on_trial=on_trial,
        secrets=secrets.values,
    )
    if install_signals:
        stop.install()
    try:
        sweep.reap_orphans()
        if executor is None:
            executor = build_executor(
                spec,
                kind=executor_kind or spec.execution.executor,
                workers=n_workers,
                ray_address=ray_address or spec.execution.ray_address,
                registry_path=str(sweep.registry_path),
            )
        from autotune.sweep.progress import SweepProgress, resolve_progress

        mode = resolve_progress(progress) if isinstance(progress, str) else None
        with SweepProgress(
            spec.name,
            enabled=bool(progress),
            metric=spec.objective_refs()[0].metric,
            mode=mode,
            total=budget.max_trials,
        ) as bar:
            return sweep.run(executor, bar, resumed=resume)
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt | SystemExit):
            store.update_sweep(
                row.id or 0,
                status=SweepStatus.FAILED,
                notes={**sweep.notes, "error": secrets.hide(str(exc))[:500]},
            )
        raise
    finally:
        if own_executor and executor is not None:
            executor.shutdown()
        if install_signals:
            stop.restore()


def check_target(spec: SweepSpec) -> None:
    """Resolve the model (card or GGUF file), the GPU (or cpu) and the search space once, for
    their clear errors."""
    from autotune.planner.dispatch import load_target_model, resolve_target_gpu
    from autotune.sweep.driver import build_space

    checks: list[tuple[str, Callable[[], object]]] = [
        ("target.model", lambda: load_target_model(spec.target.engine, spec.target.model)),
        (
            "target.gpu",
            lambda: resolve_target_gpu(spec.target.engine, spec.target.gpu, field="target.gpu"),
        ),
        ("space.file", lambda: build_space(spec)),
    ]
    for field_name, run in checks:
        try:
            run()
        except UserError as exc:  # the spec field at fault, not a CLI flag or a bare name
            raise locate(exc, field_name) from None


def _driver_identity() -> dict[str, Any]:
    import socket

    import psutil

    me = psutil.Process()
    return {"pid": me.pid, "host": socket.gethostname(), "create_time": me.create_time()}


def _driver_alive(notes: dict[str, Any]) -> int | None:
    """PID of the driver recorded in `notes` if it still runs on this host (the test `autotune
    status` shows: a killed driver, zombie included, does not block --resume)."""
    from autotune.sweep.status import DRIVER_ALIVE, driver_state

    return int(notes["driver"]["pid"]) if driver_state(notes) == DRIVER_ALIVE else None


def _sweep_row(
    store: Store, spec: SweepSpec, spec_yaml: str, resume: bool, spec_dir: Path | None
) -> Any:
    existing = store.find_sweep(spec.name)
    if resume:
        if existing is None:
            store.get_sweep(spec.name)  # raises with the names that exist
        assert existing is not None
        alive = _driver_alive(existing.notes or {})
        if existing.status == SweepStatus.RUNNING.value and alive is not None:
            raise StorageError(
                f"sweep {spec.name!r} is running now (driver pid {alive}); stop it first "
                "(SIGINT or SIGTERM) or watch it with `autotune status`"
            )
        return store.update_sweep(existing.id or 0, status=SweepStatus.RUNNING)
    if existing is not None:
        raise StorageError(
            f"sweep {spec.name!r} already exists in {store.display_url} (status "
            f"{existing.status}); resume it with --resume {spec.name} or rename it in the spec"
        )
    return store.create_sweep(
        spec.name,
        spec_yaml=spec_yaml,
        engine=spec.target.engine,
        engine_version=spec.target.engine_version,
        model=spec.target.model,
        gpu=spec.target.gpu,
        optuna_study_name=f"autotune/{spec.name}",
        notes={"simulated": spec.simulated, "spec_dir": str(spec_dir) if spec_dir else None},
    )


def build_executor(
    spec: SweepSpec,
    *,
    kind: str,
    workers: int | None,
    ray_address: str | None,
    registry_path: str | None,
) -> Executor:
    from autotune.sweep.executors import InProcessExecutor, RayExecutor, gpu_groups

    no_gpu = spec.simulated or spec.target.cpu
    executor: Executor
    if kind == "inprocess":
        # default slots: 2 simulators, 1 CPU engine (it uses every core), one per GPU group
        n = workers or (2 if spec.simulated else 1 if spec.target.cpu else 1_000_000)
        groups = gpu_groups(n, spec.target.tp, simulate=no_gpu)
        if spec.target.gpus is not None and not no_gpu:
            groups = groups[: max(1, spec.target.gpus // spec.target.tp)]
        executor = InProcessExecutor(groups=groups)
    elif kind == "ray":
        executor = RayExecutor(
            workers if workers or not spec.target.cpu else 1,
            tp=spec.target.tp,
            simulate=no_gpu,
            address=ray_address,
            registry_path=registry_path,
        )
    else:
        raise ConfigError(f"unknown executor {kind!r}; valid: inprocess, ray", field="--executor")
    if spec.engine.port is not None and executor.slots > 1:
        # the spec check cannot see --workers or the GPU groups detected here
        executor.shutdown()
        raise port_workers_error(spec.engine.port, f"{executor.slots} (--workers or GPU groups)")
    return executor


def wait_any(futures: list[Future[Any]], timeout_s: float) -> set[Future[Any]]:
    if not futures:
        time.sleep(min(timeout_s, 0.05))
        return set()
    done, _ = wait(futures, timeout=timeout_s, return_when=FIRST_COMPLETED)
    return set(done)


def study_name(spec: SweepSpec) -> str:
    return f"autotune/{spec.name}"


__all__ = [
    "Budget",
    "StopController",
    "SweepOutcome",
    "build_executor",
    "run_sweep",
]
