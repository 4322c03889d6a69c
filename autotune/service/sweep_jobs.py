"""Sweeps as jobs: submit one (`autotune sweep` in its own folder), stop it, resume it, and
resume after a restart the sweeps whose job died while they ran."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import AutotuneError
from autotune.service.errors import Conflict
from autotune.service.jobs import JobManager
from autotune.service.policy import Policy
from autotune.service.schemas import (
    ResumeRequest,
    StopRequest,
    SubmitResult,
    SweepOverrides,
    SweepStatusOut,
)
from autotune.service.spec_intake import (
    check_spec,
    job_gpus,
    parse_spec,
    refuse_env_refs,
)
from autotune.service.state import StateDir
from autotune.service.sweep_queries import SweepQueries
from autotune.service.views import job_info, links, sweep_state

if TYPE_CHECKING:
    from autotune.store.db import Store

log = logging.getLogger("autotune.service.core")  # the logger recovery lines always had


class SweepJobs:
    """Starts and signals sweep jobs; `queries` answers what state a sweep is in."""

    def __init__(
        self,
        state: StateDir,
        store: Store,
        jobs: JobManager,
        policy: Policy,
        queries: SweepQueries,
    ):
        self.state = state
        self.store = store
        self.jobs = jobs
        self.policy = policy
        self.queries = queries

    def submit_sweep(
        self,
        *,
        text: str | None = None,
        data: Mapping[str, Any] | None = None,
        overrides: SweepOverrides | None = None,
    ) -> SubmitResult:
        """Validate, check against the policy, and start `autotune sweep` as a job."""
        ov = overrides or SweepOverrides()
        spec, spec_text = parse_spec(text=text, data=data)
        refuse_env_refs(spec)
        name = spec.name
        work = self.state.work_dir("sweep", name)
        check_spec(self.policy, spec, workers=ov.workers, base=work)
        if self.store.find_sweep(name) is not None:
            raise Conflict(
                f"sweep {name!r} already exists in {self.store.display_url}; resume it "
                f"(POST /v1/sweeps/{name}/resume, MCP resume_sweep) or rename it in the spec",
                field="name",
            )
        if self.jobs.busy(name):
            raise Conflict(f"sweep {name!r} is queued or being started already", field="name")
        spec_file = self._write_spec(work, spec_text)
        args = ["sweep", str(spec_file), "--out", str(self.state.report_dir(name)), "--json"]
        rec = self.jobs.start(
            name, [*args, *ov.cli_flags()], overrides=ov.given(), gpus=job_gpus(spec), cwd=work
        )
        return SubmitResult(
            name=name, state=sweep_state(None, rec, None), job=job_info(rec), links=links(name)
        )

    @staticmethod
    def _write_spec(work: Path, spec_text: str) -> Path:
        """The spec lives in the job's folder, so the sweep resolves a relative space.file
        against the same folder the policy checked it in. A file per submission: a refused
        duplicate never rewrites what a starting job reads."""
        work.mkdir(parents=True, exist_ok=True, mode=0o700)
        spec_file = work / f"spec.{uuid.uuid4().hex[:8]}.yaml"
        spec_file.write_text(spec_text)
        spec_file.chmod(0o600)
        return spec_file

    def stop_sweep(self, name: str, req: StopRequest | None = None) -> SweepStatusOut:
        req = req or StopRequest()
        rec = self.jobs.get(name)
        # A queued job is taken out of the queue (jobs.signal), a running one signalled.
        if rec is None or rec.kind != "sweep" or rec.state not in ("running", "queued"):
            row = self.store.find_sweep(name)
            if row is None and rec is None:
                raise self.queries.not_found(name)
            if row is not None and row.status == "running" and rec is None:
                raise Conflict(
                    f"sweep {name!r} is running, but not as a job of this service (started from "
                    "a terminal?); stop it where it runs (Ctrl-C, or SIGTERM to its process)"
                )
            state = self.queries.sweep_status(name).state
            raise Conflict(f"sweep {name!r} has no running job to stop (state {state})")
        self.jobs.signal(name, force=req.force)
        if req.wait_s:
            self.jobs.wait(name, req.wait_s)
        if req.force:  # SIGKILL: the sweep could not stop its engines and trials itself
            self.jobs.wait(name, max(req.wait_s, 5.0))  # a killed process is gone at once
            self.settle_dead(name)
        return self.queries.sweep_status(name)

    def settle_dead(self, name: str) -> None:
        """A sweep whose job died without stopping its trials (SIGKILL, a crash, a restart
        that does not resume it): the engines it started are stopped (their PIDs are in the
        registry the sweep wrote beside the database) and its running trials are marked
        interrupted, so that status and report do not call them running. Resuming does the
        same first; nothing happens while the job is alive."""
        row = self.store.find_sweep(name)
        if row is None or row.id is None or row.status != "running" or self.jobs.busy(name):
            return
        from autotune.process import PidRegistry
        from autotune.sweep.setup import registry_path_for

        registry = registry_path_for(self.store, self.state.report_dir(name))
        for entry in PidRegistry(registry).reap_orphans():
            log.info("stopped engine %s that sweep %s left running", entry["pid"], name)
        self.store.mark_interrupted(row.id)

    def resume_sweep(
        self, name: str, req: ResumeRequest | None = None, *, started_by: str = "request"
    ) -> SubmitResult:
        """Continue a stopped, interrupted or finished sweep (`autotune sweep --resume`)."""
        from autotune.sweep.spec import spec_from_yaml

        req = req or ResumeRequest()
        row = self.store.find_sweep(name)
        if row is None:
            raise self.queries.not_found(name)
        if self.jobs.busy(name):
            raise Conflict(f"sweep {name!r} is already running or queued as a job; stop it first")
        base = (row.notes or {}).get("spec_dir")
        spec = spec_from_yaml(
            row.spec_yaml,
            source=f"sweep {name} (stored spec)",
            base_dir=Path(base) if base else None,
        )
        work = self.state.work_dir("sweep", name)
        check_spec(self.policy, spec, workers=req.workers, base=work)
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

    def recover(self, *, resume: bool = True) -> list[str]:
        """Resume sweeps whose job died while the sweep was running (a reboot, a kill); with
        `resume` False, or where resuming fails, settle them (settle_dead) instead."""
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
            if not resume:
                self.settle_dead(rec.name)
                continue
            try:
                overrides = ResumeRequest.model_validate(rec.overrides)
                self.resume_sweep(rec.name, overrides, started_by="recovery")
                resumed.append(rec.name)
                log.info("resumed sweep %s after its job died", rec.name)
            except AutotuneError as exc:
                self.jobs.annotate(rec.name, f"not resumed after a restart: {exc}")
                log.warning("sweep %s not resumed: %s", rec.name, exc)
                self.settle_dead(rec.name)
        return resumed
