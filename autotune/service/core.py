"""The service layer: what the HTTP API and the MCP tools both call (neither calls the other).

    service = Service.open(state_dir=None, db=None)   # STATE/config.yaml, the database, jobs
    service.startup()                                  # job monitor; resume interrupted sweeps
    result = service.submit_sweep(text=yaml_text)      # -> SubmitResult (a job is running)
    service.sweep_status(result.name)                  # -> SweepStatusOut

Every method raises AutotuneError subclasses only; `errors.http_status` maps them to HTTP.
`Service` is the one front door; the work is done by its parts: spec_intake (a submitted spec
checked), sweep_jobs (submit, stop, resume, recover), sweep_queries (list, status, trials),
kernel_jobs (kernel tuning); reports, the planner and the inspector are answered here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.service.errors import NotFound
from autotune.service.jobs import JobManager
from autotune.service.kernel_jobs import KernelJobs
from autotune.service.policy import Policy, ServiceConfig, load_config
from autotune.service.schemas import (
    InspectOut,
    InspectRequest,
    KernelsInstallOut,
    KernelsInstallRequest,
    KernelsRequest,
    KernelsStatus,
    PlanRequest,
    ReportOut,
    ResumeRequest,
    StopRequest,
    SubmitResult,
    SweepList,
    SweepOverrides,
    SweepStatusOut,
    TrialBrief,
)
from autotune.service.spec_intake import check_spec, parse_spec
from autotune.service.state import StateDir
from autotune.service.sweep_jobs import SweepJobs
from autotune.service.sweep_queries import SweepQueries

if TYPE_CHECKING:
    from autotune.planner.sglang import Plan
    from autotune.store.db import Store
    from autotune.sweep.spec import SweepSpec


def open_store(db: str | None, state: StateDir) -> Store:
    """--db (URL or SQLite file), else $AUTOTUNE_DB, else STATE/autotune.db."""
    import os

    from autotune.store.db import DB_ENV, Store

    raw = db if db is not None else (os.environ.get(DB_ENV, "").strip() or None)
    if raw is None:
        return Store(path=state.default_db)
    return Store(url=raw) if "://" in raw else Store(path=Path(raw))


class Service:
    def __init__(self, state: StateDir, store: Store, config: ServiceConfig):
        self.state = state
        self.store = store
        self.config = config
        # The state folder (token, config, job table, database) is never a readable path, even
        # under an allowed root; nor is a database kept elsewhere.
        self.policy = Policy(config, private=[state.root, *_sqlite_files(store)])
        # Jobs find the database through the environment: a URL with a password never
        # appears on a command line.
        self.jobs = JobManager(state, env={"AUTOTUNE_DB": store.storage_url})
        self.sweep_queries = SweepQueries(store, self.jobs)
        self.sweep_jobs = SweepJobs(state, store, self.jobs, self.policy, self.sweep_queries)
        self.kernel_jobs = KernelJobs(state, config, self.jobs, self.policy)
        self._report_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    @classmethod
    def open(cls, state_dir: Path | str | None = None, db: str | None = None) -> Service:
        state = StateDir.open(state_dir)
        config = load_config(state.config)
        return cls(state, open_store(db, state), config)

    def startup(self, *, recover: bool = True) -> list[str]:
        """Start the job monitor; with `recover`, resume the sweeps whose job died while they
        were running (returns their names), else mark their trials interrupted. Recovery goes first: the monitor would record those
        deaths as plain exits. Queued jobs stay queued; the monitor starts them."""
        resumed = self.sweep_jobs.recover(resume=recover)
        self.jobs.start_monitor()
        return resumed

    def shutdown(self) -> None:
        """Stop watching; the jobs themselves keep running (they outlive the service)."""
        self.jobs.stop_monitor()
        self.store.close()

    # -- sweeps: submit ----------------------------------------------------------------------

    def parse_spec(
        self, *, text: str | None = None, data: Mapping[str, Any] | None = None
    ) -> tuple[SweepSpec, str]:
        """A submitted spec (YAML text or a mapping) -> (spec, the YAML text to store)."""
        return parse_spec(text=text, data=data)

    def check_spec(self, spec: SweepSpec, *, base: Path, workers: int | None = None) -> None:
        """The policy, then what a sweep would load first (spec_intake.check_spec)."""
        check_spec(self.policy, spec, base=base, workers=workers)

    def submit_sweep(
        self,
        *,
        text: str | None = None,
        data: Mapping[str, Any] | None = None,
        overrides: SweepOverrides | None = None,
    ) -> SubmitResult:
        """Validate, check against the policy, and start `autotune sweep` as a job."""
        return self.sweep_jobs.submit_sweep(text=text, data=data, overrides=overrides)

    # -- sweeps: read ------------------------------------------------------------------------

    def list_sweeps(self) -> SweepList:
        return self.sweep_queries.list_sweeps()

    def sweep_status(self, name: str) -> SweepStatusOut:
        return self.sweep_queries.sweep_status(name)

    def trials(self, name: str) -> dict[int, TrialBrief]:
        """Every trial of the sweep by number (for progress events)."""
        return self.sweep_queries.trials(name)

    # -- sweeps: control ---------------------------------------------------------------------

    def stop_sweep(self, name: str, req: StopRequest | None = None) -> SweepStatusOut:
        return self.sweep_jobs.stop_sweep(name, req)

    def resume_sweep(
        self, name: str, req: ResumeRequest | None = None, *, started_by: str = "request"
    ) -> SubmitResult:
        """Continue a stopped, interrupted or finished sweep (`autotune sweep --resume`)."""
        return self.sweep_jobs.resume_sweep(name, req, started_by=started_by)

    def recover(self) -> list[str]:
        """Resume sweeps whose job died while the sweep was running (a reboot, a kill)."""
        return self.sweep_jobs.recover()

    # -- reports -----------------------------------------------------------------------------

    def report(self, name: str, *, plots: bool = False) -> ReportOut:
        """Write the report from the database now (also while the sweep runs) and return it."""
        from autotune.report import write_report

        if self.store.find_sweep(name) is None:
            if self.jobs.get(name) is not None:
                raise NotFound(f"sweep {name!r} has not written anything yet; try again shortly")
            raise self.sweep_queries.not_found(name)
        with self._report_lock(name):
            paths = write_report(self.store, name, self.state.report_dir(name), plots=plots)
            report_md = Path(paths.report_md).read_text()
            launch_sh = Path(paths.launch_sh).read_text() if paths.launch_sh else None
            winner = json.loads(Path(paths.winner_json).read_text())
        return ReportOut(
            name=name,
            simulated=paths.simulated,
            winner_trial=paths.winner_trial,
            report_md=report_md,
            launch_sh=launch_sh,
            winner=winner,
            notes=paths.notes,
            out_dir=paths.out_dir,
        )

    def _report_lock(self, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._report_locks.setdefault(name, threading.Lock())

    # -- planner and inspector ---------------------------------------------------------------

    def plan(self, req: PlanRequest) -> Plan:
        """The planner, resolved exactly as `autotune plan` resolves its flags (one helper:
        autotune.planner.dispatch.plan_target)."""
        from autotune.planner.dispatch import plan_target

        model = self.policy.check_model(req.model, field="model")
        return plan_target(
            req.engine,
            model,
            req.gpu,
            dict(req.config),
            version=req.engine_version,
            tp=req.tp,
            gpu_free_gib=req.gpu_free_gib,
            host_free_gib=req.host_free_gib,
            perf=req.perf,
        )

    def inspect(self, req: InspectRequest) -> InspectOut:
        from autotune.inspect import inspect_checkpoint

        path = self.policy.allowed_path(req.path, field="path")
        report = inspect_checkpoint(path, tp=req.tp)
        return InspectOut(exit_code=report.exit_code, report=report.model_dump(mode="json"))

    # -- kernel tuning -----------------------------------------------------------------------

    def submit_kernels(self, req: KernelsRequest) -> KernelsStatus:
        return self.kernel_jobs.submit_kernels(req)

    def kernels_status(self, name: str) -> KernelsStatus:
        return self.kernel_jobs.kernels_status(name)

    def stop_kernels(self, name: str, req: StopRequest | None = None) -> KernelsStatus:
        return self.kernel_jobs.stop_kernels(name, req)

    def install_kernels(
        self, name: str, req: KernelsInstallRequest | None = None
    ) -> KernelsInstallOut:
        return self.kernel_jobs.install_kernels(name, req or KernelsInstallRequest())


def _sqlite_files(store: Store) -> list[Path]:
    """The database file when it is SQLite (its -wal/-shm/-journal sit beside it)."""
    url = getattr(store, "engine", None)
    url = getattr(url, "url", None)
    if url is None or not str(url.drivername).startswith("sqlite"):
        return []
    db = url.database
    return [Path(db)] if db and db != ":memory:" else []


__all__ = ["Service", "open_store"]
