"""Kernel tuning as jobs (`autotune kernels tune`): start one in STATE/kernels/NAME, tell its
state, result and files, stop it; install an engine job's files where that engine reads them
(`autotune kernels install`, run as a child process like the jobs)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from autotune.service.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotAvailable,
    NotFound,
    ServiceError,
)
from autotune.service.jobs import CLI_PREFIX, JobManager, JobRecord
from autotune.service.policy import Policy, ServiceConfig
from autotune.service.schemas import (
    KernelsInstallOut,
    KernelsInstallRequest,
    KernelsRequest,
    KernelsState,
    KernelsStatus,
    StopRequest,
)
from autotune.service.state import StateDir
from autotune.service.views import job_info

KERNELS_PREFIX = "kernels:"  # job-table key of a kernel job (':' never occurs in sweep names)
INSTALL_TIMEOUT_S = 300.0  # finding the engine (another interpreter's probe) and the proof


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
        if req.engine is not None:
            self.policy.check_kernel_engine(req.engine, req.engine_python)
        key = KERNELS_PREFIX + req.name
        out_dir = self.state.root / "kernels" / req.name
        out_dir.mkdir(parents=True, exist_ok=True)
        result = out_dir / "result.json"
        result.unlink(missing_ok=True)
        self.jobs.start(
            key,
            req.cli_args(str(out_dir), own_python=self.jobs.python),
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

    def install_kernels(self, name: str, req: KernelsInstallRequest) -> KernelsInstallOut:
        """`kernels install --from STATE/kernels/NAME` for a finished engine job, into the
        engine found where the job read it (its engine_python, else the service's own
        environment); the install's own checks choose the files (tuned on that release's
        kernel) and prove its lookup finds them."""
        rec = self.jobs.get(KERNELS_PREFIX + name)
        if rec is None:
            raise NotFound(f"no kernel tuning job {name!r}")
        engine = rec.overrides.get("engine")
        if not isinstance(engine, str):
            raise Conflict(
                f"kernel job {name!r} tuned autotune's own kernels, which no engine reads; "
                "submit a job with engine (sglang or vllm) to tune the engine's own kernel"
            )
        state = kernels_state(rec)
        if state in ("queued", "running", "stopping"):
            raise Conflict(f"kernel job {name!r} is {state}; install once it has ended")
        if not req.dry_run and not self.config.allow_kernel_install:
            raise Forbidden(
                "installing writes into the engine's environment, which this service does not "
                "allow (allow_kernel_install in its config.yaml); ask with dry_run, or run "
                f"`autotune kernels install --engine {engine} --from "
                f"{self.state.root / 'kernels' / name}` on the server",
                field="dry_run",
            )
        python = rec.overrides.get("engine_python")
        args = ["kernels", "install", "--engine", engine]
        args += ["--from", str(self.state.root / "kernels" / name), "--json"]
        if isinstance(python, str):
            self.policy.check_kernel_engine(engine, python)  # the config may have changed since
            args += ["--engine-python", python]
        if req.device_name is not None:
            args += ["--device-name", req.device_name]
        if req.dry_run:
            args.append("--dry-run")
        result = self._run_cli(args)
        return KernelsInstallOut(name=name, dry_run=req.dry_run, result=result)

    def _run_cli(self, args: list[str]) -> dict[str, Any]:
        """`autotune ARGS --json` as a child process (the service never imports the CLI); its
        JSON error becomes Invalid (a user error, exit 2) or a ServiceError."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
        try:
            done = subprocess.run(
                [self.jobs.python, *CLI_PREFIX, *args],
                capture_output=True,
                text=True,
                env=env,
                cwd=self.state.root,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ServiceError(
                f"`autotune {' '.join(args[:2])}` took over {INSTALL_TIMEOUT_S:.0f} s"
            ) from None
        try:
            out = json.loads(done.stdout or "null")
        except ValueError:
            out = None
        if done.returncode == 0 and isinstance(out, dict):
            return out
        error = out.get("error") if isinstance(out, dict) else None
        if isinstance(error, dict):
            message = str(error.get("message") or "failed")
            field = error.get("field")
        else:
            message = (done.stderr.strip().splitlines() or ["failed"])[-1]
            field = None
        cls = Invalid if done.returncode == 2 else ServiceError
        raise cls(message, field=str(field) if field else None)


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
