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
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError, StorageError, UserError, locate
from autotune.secrets import protect_spec, protect_spec_text
from autotune.store.models import SweepStatus
from autotune.sweep import driver
from autotune.sweep.control import Budget, StopController
from autotune.sweep.outcome import SweepOutcome
from autotune.sweep.resume_spec import check_same_target, resumed_row
from autotune.sweep.setup import build_space, prepare, reap_orphans, registry_path_for
from autotune.sweep.spec import SweepSpec, port_workers_error, until_deadline
from autotune.sweep.state import start_notes
from autotune.sweep.status import DRIVER_ALIVE, driver_state
from autotune.sweep.study import study_name

if TYPE_CHECKING:
    from autotune.secrets import SpecSecrets
    from autotune.store.db import Store
    from autotune.store.models import SweepRow
    from autotune.sweep.executors import Executor
    from autotune.sweep.progress import SweepProgress
    from autotune.sweep.setup import SweepSetup

log = logging.getLogger(__name__)


def default_out_dir(name: str) -> Path:
    return Path("reports") / name


def make_out_dir(out: Path, *, field: str) -> None:
    """Create `out` and prove it writable (ConfigError naming `field` otherwise)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        tempfile.NamedTemporaryFile(dir=out, prefix=".autotune-write-test-").close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"cannot write the output folder {str(out)!r}: {reason}; give a writable folder",
            field=field,
        ) from None


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
    budget = budget_for(spec, max_trials=max_trials, wall_clock_s=wall_clock_s, until=until)
    stop = stop or StopController()
    # Secrets become ${env:NAME} references before anything is stored or printed; their values
    # stay in memory and go only to the workers (autotune.secrets).
    spec, secrets = protect_spec(spec)
    # bad names fail here, before the database is touched
    check_target(spec, executor_kind=executor_kind)
    spec_yaml = _stored_yaml(spec, spec_yaml, secrets)
    existing = _check_name(store, spec, resume=resume)
    if existing is not None:
        check_same_target(existing, spec)
    out = _output_folder(spec, existing, out_dir)
    own_executor = executor is None
    if executor is None:
        # Before the sweep's row: a Ray cluster that cannot be joined (or GPUs that are not
        # there) fails the command without leaving a row that blocks a rerun under its name.
        executor = build_executor(
            spec,
            kind=executor_kind or spec.execution.executor,
            workers=workers or spec.execution.workers,
            ray_address=ray_address or spec.execution.ray_address,
            registry_path=str(registry_path_for(store, out)),
        )
    try:
        row = _open_row(store, spec, spec_yaml, existing, out=out, spec_dir=spec_dir)
        notes = start_notes(row)
        setup = prepare(
            spec, store=store, row=row, out_dir=out, notes=notes, secrets=secrets.values
        )
    except BaseException:
        if own_executor:
            executor.shutdown()
        raise
    return _drive(
        setup,
        store=store,
        notes=notes,
        budget=budget,
        stop=stop,
        secrets=secrets,
        executor=executor,
        own_executor=own_executor,
        progress=progress,
        resumed=resume,
        on_trial=on_trial,
        install_signals=install_signals,
    )


def _drive(
    setup: SweepSetup,
    *,
    store: Store,
    notes: dict[str, Any],
    budget: Budget,
    stop: StopController,
    secrets: SpecSecrets,
    executor: Executor,
    own_executor: bool,
    progress: bool | str,
    resumed: bool,
    on_trial: Callable[[dict[str, Any]], None] | None,
    install_signals: bool,
) -> SweepOutcome:
    """Run the prepared sweep in `executor` (shut down here when `own_executor`): orphaned
    engines reaped, signals handled meanwhile. A sweep that ends in an error is marked FAILED
    with it (secrets hidden)."""
    if install_signals:
        stop.install()
    try:
        reap_orphans(setup.registry_path, notes)
        with _progress_bar(setup.spec, progress, budget) as bar:
            return driver.run(
                setup,
                store=store,
                notes=notes,
                budget=budget,
                stop=stop,
                executor=executor,
                bar=bar,
                resumed=resumed,
                on_trial=on_trial,
            )
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt | SystemExit):
            store.update_sweep(
                setup.sweep_id,
                status=SweepStatus.FAILED,
                notes={**notes, "error": secrets.hide(str(exc))[:500]},
            )
        raise
    finally:
        if own_executor:
            executor.shutdown()
        if install_signals:
            stop.restore()


def budget_for(
    spec: SweepSpec,
    *,
    max_trials: int | None = None,
    wall_clock_s: float | None = None,
    until: str | None = None,
) -> Budget:
    """The spec's budget, with the CLI's flags in place of its fields where given."""
    until_text = until or spec.budget.until
    return Budget(
        max_trials=max_trials if max_trials is not None else spec.budget.max_trials,
        wall_clock_s=wall_clock_s if wall_clock_s is not None else spec.budget.wall_clock_s,
        deadline=until_deadline(until_text) if until_text else None,
        max_idle_asks=spec.budget.max_idle_asks,
    )


def _stored_yaml(spec: SweepSpec, spec_yaml: str, secrets: SpecSecrets) -> str:
    """The spec text the sweep row keeps, secrets as references: the given text, or for
    programmatic callers a dump of `spec` that `--resume` can read back."""
    if not spec_yaml:
        import yaml

        return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
    return protect_spec_text(spec_yaml, secrets, source=f"sweep {spec.name}")


def _output_folder(spec: SweepSpec, existing: SweepRow | None, out_dir: Path | None) -> Path:
    """The sweep's output folder (`--out`, a resumed sweep's own, else reports/NAME), made and
    proven writable before the row: a folder that cannot be written is a clear error, not a
    sweep left marked running."""
    stored_out = ((existing.notes or {}) if existing is not None else {}).get("out_dir")
    out = (
        Path(out_dir)
        if out_dir is not None
        else (Path(stored_out) if stored_out else default_out_dir(spec.name))
    )
    make_out_dir(out, field="--out" if out_dir is not None else "output folder")
    return out


def _open_row(
    store: Store,
    spec: SweepSpec,
    spec_yaml: str,
    existing: SweepRow | None,
    *,
    out: Path,
    spec_dir: Path | None,
) -> SweepRow:
    """The sweep's row (created, or `existing` marked running again), noting its output
    folder and this driver's identity."""
    row = _sweep_row(store, spec, spec_yaml, existing, spec_dir)
    return store.update_sweep(
        row.id or 0,
        notes={**(row.notes or {}), "out_dir": str(out.resolve()), "driver": _driver_identity()},
    )


def _progress_bar(spec: SweepSpec, progress: bool | str, budget: Budget) -> SweepProgress:
    from autotune.sweep.progress import SweepProgress, resolve_progress

    mode = resolve_progress(progress) if isinstance(progress, str) else None
    return SweepProgress(
        spec.name,
        enabled=bool(progress),
        metric=spec.objective_refs()[0].metric,
        mode=mode,
        total=budget.max_trials,
    )


def check_target(spec: SweepSpec, *, executor_kind: str | None = None) -> None:
    """Resolve the model (card or GGUF file), the GPU (or cpu) and the search space once, for
    their clear errors; a real sweep's installed engine must follow the spec's release (here
    when trials start on this machine, `executor_kind` overriding the spec's executor as
    --executor does; a Ray trial's worker checks its own node: sweep/installed.py)."""
    from autotune.planner.dispatch import load_target_model, resolve_target_gpu
    from autotune.sweep.installed import check_installed_engine

    checks: list[tuple[str, Callable[[], object]]] = [
        ("target.model", lambda: load_target_model(spec.target.engine, spec.target.model)),
        (
            "target.gpu",
            lambda: resolve_target_gpu(spec.target.engine, spec.target.gpu, field="target.gpu"),
        ),
        ("space.file", lambda: build_space(spec)),
    ]
    if not spec.simulated and (executor_kind or spec.execution.executor) != "ray":
        # the engine the launcher starts follows the spec's release (sweep/installed.py); Ray
        # trials start on the cluster's nodes, whose workers check their own installs
        t, e = spec.target, spec.engine
        checks.append(
            (
                "target.engine_version",
                lambda: check_installed_engine(t.engine, t.engine_version, e.launcher, e.env),
            )
        )
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
    return int(notes["driver"]["pid"]) if driver_state(notes) == DRIVER_ALIVE else None


def _check_name(store: Store, spec: SweepSpec, *, resume: bool) -> SweepRow | None:
    """The row of the sweep to resume (None for a new sweep), checked before anything is
    started: a new sweep's name must be free, a resumed one must exist and not be running."""
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
        return existing
    if existing is not None:
        raise StorageError(
            f"sweep {spec.name!r} already exists in {store.display_url} (status "
            f"{existing.status}); resume it with --resume {spec.name} or rename it in the spec"
        )
    return None


def _sweep_row(
    store: Store,
    spec: SweepSpec,
    spec_yaml: str,
    existing: SweepRow | None,
    spec_dir: Path | None,
) -> SweepRow:
    if existing is not None:
        changes = resumed_row(store, existing, spec, spec_yaml, spec_dir)
        return store.update_sweep(existing.id or 0, status=SweepStatus.RUNNING, **changes)
    return store.create_sweep(
        spec.name,
        spec_yaml=spec_yaml,
        engine=spec.target.engine,
        engine_version=spec.target.engine_version,
        model=spec.target.model,
        gpu=spec.target.gpu,
        optuna_study_name=study_name(spec),
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
    from autotune.sweep.executors import InProcessExecutor, gpu_groups
    from autotune.sweep.ray_executor import RayExecutor

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


__all__ = [
    "Budget",
    "StopController",
    "SweepOutcome",
    "build_executor",
    "registry_path_for",
    "run_sweep",
]
