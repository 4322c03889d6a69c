"""Kernel tuning as jobs (`autotune kernels tune`): start one in STATE/kernels/NAME, tell its
state, result and files, stop it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.service.errors import Forbidden, NotAvailable, NotFound
from autotune.service.jobs import JobManager, JobRecord
from autotune.service.policy import Policy, ServiceConfig
from autotune.service.schemas import KernelsRequest, KernelsState, KernelsStatus, StopRequest
from autotune.service.state import StateDir
from autotune.service.views import job_info

KERNELS_PREFIX = "kernels:"  # job-table key of a kernel job (':' never occurs in sweep names)


class KernelJobs:
    def __init__(self, state: StateDir, config: ServiceConfig, jobs: JobManager, policy: Policy):
        self.state = state
        self.config = config
        self.jobs = jobs
        self.policy = policy

    def submit_kernels(self, req: KernelsRequest) -> KernelsStatus:
        kernels_available()
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
        result = read_result(out_dir)
        files = sorted(
            str(p)
            for p in out_dir.rglob("*.json")
            if p.name != "result.json" and not p.name.endswith(".provenance.json")
        )
        state = kernels_state(rec)
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


def read_result(out_dir: Path) -> dict[str, Any] | None:
    """The tuner's --json summary (its stdout), None while it has written none."""
    try:
        parsed = json.loads((out_dir / "result.json").read_text() or "null")
        return parsed if isinstance(parsed, dict) else None
    except (OSError, ValueError):
        return None


def kernels_state(rec: JobRecord) -> KernelsState:
    """One word for a kernel job, from its record."""
    if rec.state == "queued":
        return "queued"
    if rec.state == "cancelled":
        return "cancelled"
    if rec.state == "running":
        return "stopping" if rec.stop_requested else "running"
    if rec.exit_code == 0:
        return "finished"
    if rec.stop_requested:
        return "stopped"
    if rec.exit_code is None:
        return "lost"
    return "failed"


def kernels_available() -> None:
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
