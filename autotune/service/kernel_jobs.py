"""Kernel tuning as jobs (`autotune kernels tune`): start one in STATE/kernels/NAME, tell its
state, result and files, stop it; install an engine job's files where that engine reads them
(`autotune kernels install`, run as a child process like the jobs)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from autotune.errors import HardwareError
from autotune.service.errors import (
    Conflict,
    Forbidden,
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
TORCH_PROBE_TIMEOUT_S = 120.0  # importing torch and initialising CUDA in the job's interpreter
CACHE_NAME = "cache.jsonl"  # the tuner's result cache in its --out folder (resumes)
PROVENANCE_SUFFIX = ".provenance.json"  # a tuned file's sidecar (kernels_tuning.output)


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
        tuning_gpus_here(self.jobs.python)
        key = KERNELS_PREFIX + req.name
        old = self.jobs.get(key)
        if old is not None and kernels_state(old) in ("queued", "running", "stopping"):
            raise Conflict(f"kernel job {req.name!r} is {kernels_state(old)}; stop it first")
        out_dir = self.state.root / "kernels" / req.name
        out_dir.mkdir(parents=True, exist_ok=True)
        # An earlier run's files would be taken for this one's (status, install); its result
        # cache stays, so the same items are not timed again.
        for child in out_dir.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            elif child.name != CACHE_NAME:
                child.unlink()
        self.jobs.start(
            key,
            req.cli_args(str(out_dir), own_python=self.jobs.python),
            kind="kernels",
            overrides=req.model_dump(exclude_none=True),
            stdout_path=out_dir / "result.json",
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
        state = kernels_state(rec, result)
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
        """`kernels install` of the files a finished engine job wrote (its result, not
        whatever else the folder holds), into the engine found where the job read it (its
        engine_python, else the service's own environment); the install's own checks choose
        the files (tuned on that release's kernel) and prove its lookup finds them."""
        rec = self.jobs.get(KERNELS_PREFIX + name)
        if rec is None:
            raise NotFound(f"no kernel tuning job {name!r}")
        engine = rec.overrides.get("engine")
        if not isinstance(engine, str):
            raise Conflict(
                f"kernel job {name!r} tuned autotune's own kernels, which no engine reads; "
                "submit a job with engine (sglang or vllm) to tune the engine's own kernel"
            )
        out_dir = self.state.root / "kernels" / name
        files = _result_files(out_dir)
        state = kernels_state(rec, read_result(out_dir))
        if state != "finished" and not (state == "stopped" and files):
            raise Conflict(
                f"kernel job {name!r} is {state}; only a finished job's files are installed "
                "(or a stopped one's, when it wrote its result)"
            )
        if not files:
            raise Conflict(f"kernel job {name!r} wrote no tuned files (see its result)")
        python = rec.overrides.get("engine_python")
        # The config may have changed since the job was submitted.
        self.policy.check_kernel_engine(engine, python if isinstance(python, str) else None)
        if not req.dry_run and not self.config.allow_kernel_install:
            raise Forbidden(
                "installing writes into the engine's environment, which this service does not "
                "allow (allow_kernel_install in its config.yaml); ask with dry_run, or run "
                f"`autotune kernels install --engine {engine} --from {out_dir}` on the server",
                field="dry_run",
            )
        tuned = sorted({f.relative_to(out_dir).parts[1] for f in files})
        with tempfile.TemporaryDirectory(prefix="autotune-install-") as tmp:
            staged = Path(tmp) / "files"
            for f in files:  # this run's files and their provenance sidecars only
                for src in (f, f.with_name(f.name[: -len(".json")] + PROVENANCE_SUFFIX)):
                    if src.is_file():
                        dest = staged / src.relative_to(out_dir)
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(src, dest)
            args = ["kernels", "install", "--engine", engine, "--from", str(staged), "--json"]
            if isinstance(python, str):
                args += ["--engine-python", python]
            if req.device_name is not None:
                args += ["--device-name", req.device_name]
            if req.dry_run:
                args.append("--dry-run")
            where = f"kernel job {name!r} tuned {engine} {', '.join(tuned)}"
            result = self._run_cli(args, cwd=Path(tmp), context=where)
        return KernelsInstallOut(name=name, dry_run=req.dry_run, result=result)

    def _run_cli(self, args: list[str], *, cwd: Path, context: str) -> dict[str, Any]:
        """`autotune ARGS --json` as a child process (the service never imports the CLI). Its
        user error (exit 2: the job's files and the installed engine disagree, the
        interpreter cannot be asked) is a Conflict, anything else a ServiceError; `context`
        says which job."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
        try:
            done = subprocess.run(
                [self.jobs.python, *CLI_PREFIX, *args],
                capture_output=True,
                text=True,
                env=env,
                cwd=cwd,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ServiceError(
                f"{context}: `autotune {' '.join(args[:2])}` took over {INSTALL_TIMEOUT_S:.0f} s"
            ) from None
        try:
            out = json.loads(done.stdout or "null")
        except ValueError:
            out = None
        if done.returncode == 0 and isinstance(out, dict):
            return out
        error = out.get("error") if isinstance(out, dict) else None
        if isinstance(error, dict) and error.get("message"):
            message = str(error["message"])  # names the CLI flag at fault, when one is
        else:
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            message = f"`autotune {' '.join(args[:2])}` exited with {done.returncode}: {tail}"
        cls = Conflict if done.returncode == 2 else ServiceError
        raise cls(f"{context}; {message.strip()}")


def _result_files(out_dir: Path) -> list[Path]:
    """The tuned files the job's own result lists, inside its folder and present."""
    result = read_result(out_dir) or {}
    listed = result.get("files")
    if not isinstance(listed, list):
        return []
    root = out_dir.resolve()
    files = [Path(str(f)).resolve() for f in listed]
    return [
        f
        for f in files
        if f.is_relative_to(root) and len(f.relative_to(root).parts) >= 3 and f.is_file()
    ]


def read_result(out_dir: Path) -> dict[str, Any] | None:
    """The tuner's --json summary (its stdout), None while it has written none."""
    try:
        parsed = json.loads((out_dir / "result.json").read_text() or "null")
        return parsed if isinstance(parsed, dict) else None
    except (OSError, ValueError):
        return None


def kernels_state(rec: JobRecord, result: dict[str, Any] | None = None) -> KernelsState:
    """One word for a kernel job, from its record and its `result` (result.json): a job whose
    exit the service did not see (it was restarted meanwhile) finished when the tuner wrote
    its summary, which it does only once it is done."""
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
        return (
            "finished" if result is not None and isinstance(result.get("files"), list) else "lost"
        )
    return "failed"


def tuning_gpus_here(python: str) -> None:
    """Refuse a job that can only fail, before anything of an earlier run is dropped: the
    tuner (run by `python`) reads the device's limits and times kernels through torch's CUDA on
    this host's GPUs (with Ray workers too, its driver reads them here), the ones the service's
    CUDA_VISIBLE_DEVICES leaves it. NVML answers fast; where it sees GPUs (or cannot be asked:
    a container without its library), the tuner's own interpreter is asked as the tuner asks."""
    from autotune.process.gpu import gpu_memory_used
    from autotune.sweep.executors import visible_gpu_ids

    used = gpu_memory_used()
    count = len(used) if used is not None else 0
    seen: str | None = None
    if used is not None and not visible_gpu_ids(count):
        seen = (
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r} hides them"
            if count
            else "the NVIDIA driver reports no GPU"
        )
    elif not torch_sees_cuda(python, os.environ.get("CUDA_VISIBLE_DEVICES")):
        seen = (
            f"torch in {python} sees no CUDA device (a CPU build of torch, or no driver: "
            "pip install 'autotune[kernels]' with PyTorch's CUDA build)"
        )
    if seen is not None:
        raise HardwareError(
            f"kernel tuning times kernels on an NVIDIA GPU of the service's host, and {seen}; "
            "run the service on a GPU machine (shapes and installs of tuned files need none)"
        )


@functools.cache
def torch_sees_cuda(python: str, visible: str | None) -> bool:
    """`torch.cuda.is_available()` in `python`'s environment, as the tuner checks it (False
    without torch); asked once per interpreter and CUDA_VISIBLE_DEVICES (importing torch
    takes seconds)."""
    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"
    try:
        done = subprocess.run(
            [python, "-c", probe], capture_output=True, timeout=TORCH_PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


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
