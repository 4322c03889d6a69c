"""The service layer: what the HTTP API and the MCP tools both call (neither calls the other).

    service = Service.open(state_dir=None, db=None)   # STATE/config.yaml, the database, jobs
    service.startup()                                  # job monitor; resume interrupted sweeps
    result = service.submit_sweep(text=yaml_text)      # -> SubmitResult (a job is running)
    service.sweep_status(result.name)                  # -> SweepStatusOut

Every method raises AutotuneError subclasses only; `errors.http_status` maps them to HTTP.
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from autotune.errors import AutotuneError, ConfigError
from autotune.service.errors import Conflict, Forbidden, Invalid, NotAvailable, NotFound
from autotune.service.jobs import JobManager, JobRecord
from autotune.service.policy import Policy, ServiceConfig, load_config
from autotune.service.schemas import (
    FailureInfo,
    InspectOut,
    InspectRequest,
    KernelsRequest,
    KernelsState,
    KernelsStatus,
    PlanRequest,
    Progress,
    ReportOut,
    ResumeRequest,
    StopRequest,
    SubmitResult,
    SweepList,
    SweepOverrides,
    SweepStatusOut,
    SweepSummary,
    TrialBrief,
)
from autotune.service.state import StateDir
from autotune.service.views import (
    as_int,
    elapsed,
    job_info,
    links,
    next_steps,
    parse_time,
    spec_max_trials,
    sweep_state,
)

if TYPE_CHECKING:
    from autotune.planner.sglang import Plan
    from autotune.store.db import Store
    from autotune.sweep.spec import SweepSpec

log = logging.getLogger(__name__)

KERNELS_PREFIX = "kernels:"  # job-table key of a kernel job (':' never occurs in sweep names)


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
        self._report_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    @classmethod
    def open(cls, state_dir: Path | str | None = None, db: str | None = None) -> Service:
        state = StateDir.open(state_dir)
        config = load_config(state.config)
        return cls(state, open_store(db, state), config)

    def startup(self, *, recover: bool = True) -> list[str]:
        """Start the job monitor; with `recover`, resume the sweeps whose job died while they
        were running (returns their names). Recovery goes first: the monitor would record those
        deaths as plain exits. Queued jobs stay queued; the monitor starts them."""
        resumed = self.recover() if recover else []
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
        from autotune.sweep.spec import parse_spec, spec_from_yaml

        if (text is None) == (data is None):
            raise Invalid("give the spec as YAML text or as a mapping, exactly one")
        if text is not None:
            _refuse_aliases(text)
            spec = spec_from_yaml(text, source="submitted spec")
            return spec, text
        assert data is not None
        spec = parse_spec(dict(data), source="submitted spec")
        return spec, yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True)

    def check_spec(self, spec: SweepSpec, *, base: Path, workers: int | None = None) -> None:
        """Policy (what the local config allows; relative paths taken in `base`, the job's
        working folder), then what a sweep would load first (model card or GGUF file, GPU or
        cpu, search space): errors now, not in a job's log a second later."""
        from autotune.planner.dispatch import load_target_model, resolve_target_gpu
        from autotune.sweep.setup import build_space

        self.policy.check_spec(spec, workers=workers, base=base)
        # Load what the job will load: relative paths from its folder, not the service's cwd.
        model = self.policy.check_model(spec.target.model, field="target.model", base=base)
        load_target_model(spec.target.engine, model)
        if spec.target.gpu != "auto":  # auto is detected on the machine that runs the sweep
            resolve_target_gpu(spec.target.engine, spec.target.gpu, field="target.gpu")
        if spec.space.file != "builtin":
            space_file = self.policy.allowed_path(spec.space.file, field="space.file", base=base)
            spec = spec.model_copy(
                update={"space": spec.space.model_copy(update={"file": str(space_file)})}
            )
        build_space(spec)

    def submit_sweep(
        self,
        *,
        text: str | None = None,
        data: Mapping[str, Any] | None = None,
        overrides: SweepOverrides | None = None,
    ) -> SubmitResult:
        """Validate, check against the policy, and start `autotune sweep` as a job."""
        ov = overrides or SweepOverrides()
        spec, spec_text = self.parse_spec(text=text, data=data)
        refuse_env_refs(spec)
        name = spec.name
        work = self.state.work_dir("sweep", name)
        self.check_spec(spec, workers=ov.workers, base=work)
        if self.store.find_sweep(name) is not None:
            raise Conflict(
                f"sweep {name!r} already exists in {self.store.display_url}; resume it "
                f"(POST /v1/sweeps/{name}/resume, MCP resume_sweep) or rename it in the spec",
                field="name",
            )
        if self.jobs.busy(name):
            raise Conflict(f"sweep {name!r} is queued or being started already", field="name")
        # The spec lives in the job's folder, so the sweep resolves a relative space.file
        # against the same folder the policy checked it in. A file per submission: a refused
        # duplicate never rewrites what a starting job reads.
        work.mkdir(parents=True, exist_ok=True, mode=0o700)
        spec_file = work / f"spec.{uuid.uuid4().hex[:8]}.yaml"
        spec_file.write_text(spec_text)
        spec_file.chmod(0o600)
        args = ["sweep", str(spec_file), "--out", str(self.state.report_dir(name)), "--json"]
        rec = self.jobs.start(
            name, [*args, *ov.cli_flags()], overrides=ov.given(), gpus=job_gpus(spec), cwd=work
        )
        return SubmitResult(
            name=name, state=sweep_state(None, rec, None), job=job_info(rec), links=links(name)
        )

    # -- sweeps: read ------------------------------------------------------------------------

    def list_sweeps(self) -> SweepList:
        from autotune.sweep.status import sweeps_overview

        jobs = {k: v for k, v in self.jobs.refresh().items() if v.kind == "sweep"}
        out: list[SweepSummary] = []
        seen: set[str] = set()
        for row in sweeps_overview(self.store):
            rec = jobs.get(row["name"])
            seen.add(row["name"])
            out.append(
                SweepSummary(
                    name=row["name"],
                    state=sweep_state(row["status"], rec, parse_time(row["updated_at"])),
                    status=row["status"],
                    trials=row["trials"],
                    best_value=row["best_value"],
                    created_at=row["created_at"],
                    updated_at=row["updated_at"],
                    job=rec.state if rec is not None else None,
                    queue_position=rec.queue_position if rec is not None else None,
                )
            )
        for name, rec in jobs.items():
            if name not in seen:
                out.append(
                    SweepSummary(
                        name=name,
                        state=sweep_state(None, rec, None),
                        status=None,
                        trials=0,
                        job=rec.state,
                        queue_position=rec.queue_position,
                    )
                )
        return SweepList(sweeps=out)

    def sweep_status(self, name: str) -> SweepStatusOut:
        from autotune.sweep.status import sweep_status

        rec = self.jobs.get(name)
        if rec is not None and rec.kind != "sweep":
            rec = None
        row = self.store.find_sweep(name)
        if row is None:
            if rec is None:
                raise self._not_found(name)
            state = sweep_state(None, rec, None)
            out = SweepStatusOut(
                name=name,
                state=state,
                status=None,
                progress=Progress(
                    launched=0,
                    max_trials=as_int(rec.overrides.get("max_trials")),
                    fraction=0.0,
                    running=0,
                    elapsed_s=elapsed(rec),
                    eta_s=None,
                ),
                job=job_info(
                    rec, self.jobs.log_tail(name) if state == "failed_to_start" else None
                ),
            )
            out.next_steps = next_steps(out)
            return out
        info = sweep_status(self.store, name)
        state = sweep_state(row.status, rec, row.updated_at)
        trials = self.store.get_trials(row.id or 0)
        numbers = {t.id: t.number for t in trials}
        failures = [
            FailureInfo(
                trial=numbers.get(f.trial_id), failure_class=f.failure_class, reason=f.reason
            )
            for f in self.store.get_failures(row.id or 0)[-10:]
        ]
        max_trials = as_int((rec.overrides if rec else {}).get("max_trials")) or spec_max_trials(
            row.spec_yaml
        )
        launched = int(info["launched"])
        durations = [t.duration_s for t in trials if t.duration_s]
        running = len(info["running"])
        eta = None
        if max_trials is not None and durations and state in ("running", "starting"):
            per_slot = statistics.mean(durations) / max(1, running)
            eta = round(max(0, max_trials - launched) * per_slot, 1)
        notes = row.notes or {}
        out = SweepStatusOut(
            name=name,
            state=state,
            status=row.status,
            engine=info["engine"],
            engine_version=info["engine_version"],
            model=info["model"],
            gpu=info["gpu"],
            simulated=bool(info["simulated"]),
            created_at=info["created_at"],
            updated_at=info["updated_at"],
            progress=Progress(
                launched=launched,
                max_trials=max_trials,
                fraction=round(min(1.0, launched / max_trials), 4) if max_trials else None,
                running=running,
                elapsed_s=elapsed(rec),
                eta_s=eta,
            ),
            counts=info["counts"],
            best=TrialBrief(**info["best"]) if info["best"] else None,
            baseline=TrialBrief(**info["baseline"]) if info["baseline"] else None,
            running=info["running"],
            recent=info["recent"],
            failures_by_class=info["failures_by_class"],
            failures=failures,
            stop_reason=info.get("stop_reason"),
            error=notes.get("error"),
            finalists=list(info.get("finalists") or []),
            objective=info.get("objective"),
            job=job_info(rec, self._tail_if_failed(rec)) if rec is not None else None,
        )
        out.next_steps = next_steps(out)
        return out

    def _not_found(self, name: str) -> NotFound:
        """NotFound with the sweep names that do exist (the store's message)."""
        from autotune.errors import StorageError

        try:
            self.store.get_sweep(name)
        except StorageError as exc:
            return NotFound(str(exc))
        return NotFound(f"no sweep {name!r}")

    def trials(self, name: str) -> dict[int, TrialBrief]:
        """Every trial of the sweep by number (for progress events)."""
        row = self.store.find_sweep(name)
        if row is None:
            return {}
        return {
            t.number: TrialBrief(
                number=t.number,
                status=t.status,
                value=t.value,
                values=t.values,
                config={k: v for k, v in (t.config or {}).items() if v is not None},
            )
            for t in self.store.get_trials(row.id or 0)
            if t.number is not None
        }

    def _tail_if_failed(self, rec: JobRecord | None) -> str | None:
        if rec is None or rec.state == "running" or rec.exit_code in (0, None):
            return None
        return self.jobs.log_tail(rec.name)

    # -- sweeps: control ---------------------------------------------------------------------

    def stop_sweep(self, name: str, req: StopRequest | None = None) -> SweepStatusOut:
        req = req or StopRequest()
        rec = self.jobs.get(name)
        # A queued job is taken out of the queue (jobs.signal), a running one signalled.
        if rec is None or rec.kind != "sweep" or rec.state not in ("running", "queued"):
            row = self.store.find_sweep(name)
            if row is None and rec is None:
                raise self._not_found(name)
            if row is not None and row.status == "running" and rec is None:
                raise Conflict(
                    f"sweep {name!r} is running, but not as a job of this service (started from "
                    "a terminal?); stop it where it runs (Ctrl-C, or SIGTERM to its process)"
                )
            state = self.sweep_status(name).state
            raise Conflict(f"sweep {name!r} has no running job to stop (state {state})")
        self.jobs.signal(name, force=req.force)
        if req.wait_s:
            self.jobs.wait(name, req.wait_s)
        return self.sweep_status(name)

    def resume_sweep(
        self, name: str, req: ResumeRequest | None = None, *, started_by: str = "request"
    ) -> SubmitResult:
        """Continue a stopped, interrupted or finished sweep (`autotune sweep --resume`)."""
        from autotune.sweep.spec import spec_from_yaml

        req = req or ResumeRequest()
        row = self.store.find_sweep(name)
        if row is None:
            raise self._not_found(name)
        if self.jobs.busy(name):
            raise Conflict(f"sweep {name!r} is already running or queued as a job; stop it first")
        base = (row.notes or {}).get("spec_dir")
        spec = spec_from_yaml(
            row.spec_yaml,
            source=f"sweep {name} (stored spec)",
            base_dir=Path(base) if base else None,
        )
        work = self.state.work_dir("sweep", name)
        self.check_spec(spec, workers=req.workers, base=work)
        # The file it was submitted with holds its secrets (the database keeps references
        # only); without one the job needs them in the service's environment.
        submitted = sorted(work.glob("spec.*.yaml"), key=lambda p: p.stat().st_mtime)
        spec_arg = [str(submitted[-1])] if submitted else []
        args = ["sweep", *spec_arg, "--resume", name, "--json", *req.cli_flags()]
        rec = self.jobs.start(
            name,
            args,
            started_by=started_by,
            overrides=req.given(),
            gpus=job_gpus(spec),
            cwd=work,
        )
        return SubmitResult(
            name=name,
            state=sweep_state(row.status, rec, None),
            job=job_info(rec),
            links=links(name),
        )

    def recover(self) -> list[str]:
        """Resume sweeps whose job died while the sweep was running (a reboot, a kill)."""
        resumed: list[str] = []
        for rec in self.jobs.dead_since_last_run():
            if rec.kind != "sweep":
                self.jobs.annotate(
                    rec.name,
                    "the process ended while no service watched it; resubmit to continue "
                    "(the kernel result cache resumes)",
                )
                continue
            row = self.store.find_sweep(rec.name)
            if row is None or row.status != "running":
                continue
            try:
                overrides = ResumeRequest.model_validate(rec.overrides)
                self.resume_sweep(rec.name, overrides, started_by="recovery")
                resumed.append(rec.name)
                log.info("resumed sweep %s after its job died", rec.name)
            except AutotuneError as exc:
                self.jobs.annotate(rec.name, f"not resumed after a restart: {exc}")
                log.warning("sweep %s not resumed: %s", rec.name, exc)
        return resumed

    # -- reports -----------------------------------------------------------------------------

    def report(self, name: str, *, plots: bool = False) -> ReportOut:
        """Write the report from the database now (also while the sweep runs) and return it."""
        from autotune.report import write_report

        if self.store.find_sweep(name) is None:
            if self.jobs.get(name) is not None:
                raise NotFound(f"sweep {name!r} has not written anything yet; try again shortly")
            raise self._not_found(name)
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
        _kernels_available()
        if not self.config.allow_kernel_tuning:
            raise Forbidden(
                "kernel tuning jobs are switched off (allow_kernel_tuning in the service's "
                "config.yaml)"
            )
        if req.model is not None:
            self.policy.check_model(req.model, field="model")
        self.policy.check_workers(req.workers, field="workers")
        key = KERNELS_PREFIX + req.name
        out_dir = self.state.root / "kernels" / req.name
        out_dir.mkdir(parents=True, exist_ok=True)
        result = out_dir / "result.json"
        result.unlink(missing_ok=True)
        self.jobs.start(
            key,
            req.cli_args(str(out_dir)),
            kind="kernels",
            overrides=req.model_dump(exclude_none=True),
            stdout_path=result,
            gpus=None,  # the tuner takes every GPU it sees
            cwd=out_dir,
        )
        return self.kernels_status(req.name)

    def kernels_status(self, name: str) -> KernelsStatus:
        rec = self.jobs.get(KERNELS_PREFIX + name)
        if rec is None:
            raise NotFound(f"no kernel tuning job {name!r}")
        out_dir = self.state.root / "kernels" / name
        result: dict[str, Any] | None = None
        try:
            parsed = json.loads((out_dir / "result.json").read_text() or "null")
            result = parsed if isinstance(parsed, dict) else None
        except (OSError, ValueError):
            result = None
        files = sorted(
            str(p)
            for p in out_dir.rglob("*.json")
            if p.name != "result.json" and not p.name.endswith(".provenance.json")
        )
        state: KernelsState
        if rec.state == "queued":
            state = "queued"
        elif rec.state == "cancelled":
            state = "cancelled"
        elif rec.state == "running":
            state = "stopping" if rec.stop_requested else "running"
        elif rec.exit_code == 0:
            state = "finished"
        elif rec.stop_requested:
            state = "stopped"
        elif rec.exit_code is None:
            state = "lost"
        else:
            state = "failed"
        tail = self.jobs.log_tail(rec.name) if state in ("failed", "lost") else None
        return KernelsStatus(
            name=name,
            state=state,
            job=job_info(rec, tail),
            result=result,
            files=files,
            out_dir=str(out_dir),
        )

    def stop_kernels(self, name: str, req: StopRequest | None = None) -> KernelsStatus:
        req = req or StopRequest()
        key = KERNELS_PREFIX + name
        if self.jobs.get(key) is None:
            raise NotFound(f"no kernel tuning job {name!r}")
        self.jobs.signal(key, force=req.force)
        if req.wait_s:
            self.jobs.wait(key, req.wait_s)
        return self.kernels_status(name)


# -- helpers ---------------------------------------------------------------------------------


def job_gpus(spec: SweepSpec) -> list[str] | None:
    """The GPUs a sweep's job uses, for the queue: its engine.env CUDA_VISIBLE_DEVICES entries,
    `cpu` for a CPU target, else None (all GPUs: the sweep takes what NVML shows)."""
    if spec.target.cpu:
        return ["cpu"]
    visible = spec.engine.env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    return [d.strip() for d in visible.split(",") if d.strip()]


def _sqlite_files(store: Store) -> list[Path]:
    """The database file when it is SQLite (its -wal/-shm/-journal sit beside it)."""
    url = getattr(store, "engine", None)
    url = getattr(url, "url", None)
    if url is None or not str(url.drivername).startswith("sqlite"):
        return []
    db = url.database
    return [Path(db)] if db and db != ":memory:" else []


def _kernels_available() -> None:
    import importlib.util

    for module in ("autotune.cli.kernels", "kernels_tuning.runner"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            raise NotAvailable(
                f"kernel tuning is not available in this installation ({module} is missing)"
            )


def _refuse_aliases(text: str) -> None:
    """YAML anchors/aliases can expand a small body into an enormous document."""
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise Invalid(
                    "YAML aliases (*name) are not accepted by the service; write the values out",
                    field="spec",
                )
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", source="submitted spec") from None


def refuse_env_refs(spec: Any) -> None:
    """A submitted spec gives secret values, it does not name the service's environment: a
    `${env:NAME}` reference would hand the service owner's variable to the requester's
    engine. (The database stores such references; they are resolved only for a resume.)"""
    from autotune.secrets import ref_name

    def walk(node: Any, field: str) -> None:
        if ref_name(node) is not None:
            raise Forbidden(
                "a submitted spec cannot refer to the service's environment; give the value "
                "itself (it is stored as a reference, never in clear)",
                field=field,
            )
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{field}.{k}" if field else str(k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{field}[{i}]")

    walk(spec.model_dump(mode="json"), "")


__all__ = ["Service", "open_store"]
