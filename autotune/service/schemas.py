"""Request and response models of the HTTP API and the MCP tools (one set for both)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotune.sweep.spec import UNTIL_FORMAT
from autotune.sweep.spec_models import NAME_MAX, NAME_PATTERN

SweepState = Literal[
    "queued",  # waiting for GPUs another job holds; starts by itself (job.queue_position)
    "cancelled",  # stopped before it ever started (taken out of the queue, or stopped at once)
    "starting",  # the job runs but has not written the sweep yet
    "running",
    "stopping",  # stop requested, the job is winding down
    "finished",
    "stopped",  # a budget, deadline or stop ended it; resumable
    "failed",
    "interrupted",  # its process died while the sweep was running; resumable
    "failed_to_start",  # the job exited before it wrote the sweep (see job.log_tail)
]
TERMINAL_STATES = frozenset(
    {"finished", "stopped", "failed", "interrupted", "failed_to_start", "cancelled"}
)
QUEUE_DOC = (
    "Jobs that use the same GPUs run one at a time, first in, first out: a job's GPUs are the "
    "spec's engine.env.CUDA_VISIBLE_DEVICES (a CPU target: the CPU; kernel jobs and specs "
    "without it: all GPUs of the host); while any of them is held by a running job or one "
    "queued earlier, the job is `queued` with a 1-based job.queue_position and starts by "
    "itself when they are free. Jobs on disjoint GPUs run at once. Stopping a queued job takes "
    "it out of the queue (state cancelled); queued jobs survive a restart of the service."
)

ScalarValue = str | int | float | bool | None


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SweepOverrides(_Request):
    """Budget and execution overrides (the CLI's --max-trials, --wall-clock, ... flags)."""

    max_trials: int | None = Field(
        None, ge=1, le=100_000, description="launched trials in all (this run and earlier ones)"
    )
    wall_clock_s: float | None = Field(
        None, gt=0, le=30 * 86400, description="seconds from (re)start"
    )
    until: str | None = Field(
        None, pattern=UNTIL_FORMAT.pattern, description="stop at HH:MM local time"
    )
    workers: int | None = Field(None, ge=1, le=1024, description="trials at once")
    executor: Literal["inprocess", "ray"] | None = None

    def cli_flags(self) -> list[str]:
        flags: list[str] = []
        if self.max_trials is not None:
            flags += ["--max-trials", str(self.max_trials)]
        if self.wall_clock_s is not None:
            flags += ["--wall-clock", repr(float(self.wall_clock_s))]
        if self.until is not None:
            flags += ["--until", self.until]
        if self.workers is not None:
            flags += ["--workers", str(self.workers)]
        if self.executor is not None:
            flags += ["--executor", self.executor]
        return flags

    def given(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, include=set(SweepOverrides.model_fields))


class SweepSubmit(SweepOverrides):
    """POST /v1/sweeps as JSON: the spec as a mapping (`spec`) or as YAML text (`spec_yaml`).
    (The endpoint also takes the YAML itself as the body, Content-Type application/yaml.)"""

    spec: dict[str, Any] | None = Field(None, description="the sweep spec as a JSON object")
    spec_yaml: str | None = Field(
        None, max_length=1024 * 1024, description="the sweep spec as YAML text"
    )

    @model_validator(mode="after")
    def _one_spec(self) -> SweepSubmit:
        if (self.spec is None) == (self.spec_yaml is None):
            raise ValueError("give exactly one of spec (a mapping) or spec_yaml (YAML text)")
        return self


class ResumeRequest(SweepOverrides):
    """POST /v1/sweeps/{name}/resume; raise max_trials to continue a finished sweep."""


class StopRequest(_Request):
    force: bool = Field(
        False, description="SIGKILL instead of SIGTERM (engines are reaped at the next resume)"
    )
    wait_s: float = Field(0.0, ge=0, le=300, description="wait this long for the job to exit")


class JobInfo(BaseModel):
    kind: str
    state: Literal["queued", "running", "exited", "cancelled"] = Field(
        description="queued: waiting for its GPUs (see queue_position); cancelled: taken out "
        "of the queue before it started"
    )
    pid: int | None = Field(None, description="None while queued (no process yet)")
    started_at: datetime | None = Field(None, description="None while queued")
    ended_at: datetime | None = None
    exit_code: int | None = None
    runs: int = Field(description="process starts: 1 + resumes")
    started_by: str = Field(description="request, or recovery after a service restart")
    stop_requested: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    log_path: str
    log_tail: str | None = Field(None, description="end of the job's log when it failed")
    note: str | None = None
    queue_position: int | None = Field(
        None,
        description="while queued: 1-based place in the service's queue (submission order; "
        "1 starts next once its GPUs are free); None otherwise. " + QUEUE_DOC,
    )
    gpus: list[str] | None = Field(
        None, description="GPUs the job uses (CUDA_VISIBLE_DEVICES entries); None: all"
    )


class Links(BaseModel):
    status: str
    events: str
    stop: str
    resume: str
    report: str
    launch_sh: str
    winner_json: str


class SubmitResult(BaseModel):
    name: str = Field(description="the sweep's id: its name, unique in the database")
    state: SweepState = Field(
        description="starting, or queued behind jobs on the same GPUs. " + QUEUE_DOC
    )
    job: JobInfo
    links: Links


class TrialBrief(BaseModel):
    number: int | None
    status: str
    value: float | None = None
    values: list[float] | None = None
    config: dict[str, Any] = Field(default_factory=dict)


class FailureInfo(BaseModel):
    trial: int | None
    failure_class: str
    reason: str


class Progress(BaseModel):
    launched: int = Field(description="trials that started an engine")
    max_trials: int | None = Field(description="budget (spec or override); None: unbounded")
    fraction: float | None = Field(description="launched / max_trials")
    running: int
    elapsed_s: float | None = Field(description="since the job (re)started")
    eta_s: float | None = Field(description="at the pace so far, or to the deadline")


class SweepSummary(BaseModel):
    name: str
    state: SweepState
    status: str | None = Field(description="the database's status (None: not written yet)")
    trials: int
    best_value: float | None = None
    created_at: str | None = None
    updated_at: str | None = None
    job: Literal["queued", "running", "exited", "cancelled"] | None = None
    queue_position: int | None = Field(None, description="while queued: 1-based place")


class SweepList(BaseModel):
    sweeps: list[SweepSummary]


class SweepStatusOut(BaseModel):
    name: str
    state: SweepState = Field(description="what to do next follows from this")
    status: str | None = Field(description="the database's status (None: not written yet)")
    engine: str | None = None
    engine_version: str | None = None
    model: str | None = None
    gpu: str | None = None
    simulated: bool = False
    created_at: str | None = None
    updated_at: str | None = None
    progress: Progress
    counts: dict[str, int] = Field(default_factory=dict, description="trials by status")
    best: TrialBrief | None = None
    baseline: TrialBrief | None = None
    running: list[dict[str, Any]] = Field(default_factory=list)
    recent: list[dict[str, Any]] = Field(default_factory=list)
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    failures: list[FailureInfo] = Field(default_factory=list, description="the latest ten")
    stop_reason: str | None = None
    error: str | None = None
    finalists: list[dict[str, Any]] = Field(default_factory=list)
    objective: list[dict[str, Any]] | None = None
    job: JobInfo | None = None
    next_steps: list[str] = Field(default_factory=list, description="what can be done now")


class ReportOut(BaseModel):
    name: str
    simulated: bool
    winner_trial: int | None
    report_md: str
    launch_sh: str | None = Field(None, description="None: no winner yet (see notes)")
    winner: dict[str, Any]
    notes: list[str] = Field(default_factory=list)
    out_dir: str = Field(description="where the service wrote the files (server-local)")


class PlanRequest(_Request):
    model: str = Field(
        min_length=1, max_length=4096, description="built-in card or an allowed model folder"
    )
    gpu: str = Field(
        min_length=1, max_length=200, description="catalog GPU name, auto, or cpu (llama.cpp only)"
    )
    engine: str = Field("sglang", max_length=64)
    engine_version: str | None = Field(
        None,
        max_length=64,
        description="default: sglang 0.5.17, the newest vLLM, llama.cpp's pinned version",
    )
    tp: int = Field(1, ge=1, le=64)
    gpu_free_gib: float | None = Field(None, gt=0, le=1e6)
    host_free_gib: float | None = Field(None, gt=0, le=1e7)
    config: dict[str, ScalarValue] = Field(
        default_factory=dict, description="engine field -> value, e.g. mem_fraction_static: 0.92"
    )
    perf: bool = Field(False, description="add the roofline performance prediction")


class InspectRequest(_Request):
    path: str = Field(min_length=1, max_length=4096, description="server-local model folder")
    tp: int = Field(1, ge=1, le=64)


class InspectOut(BaseModel):
    exit_code: int = Field(description="0 ok, 10 warnings, 11 broken")
    report: dict[str, Any] = Field(description="the checkpoint inspector's report")


# A kernel job's shape bounds, shared with the MCP tool's arguments (mcp_tools/kernels.py).
NK_PATTERN = r"^\d{1,6},\d{1,6}$"
NK_MAX = 64
TP_MAX = 8


class KernelsRequest(_Request):
    """POST /v1/kernels: `autotune kernels tune` as a job (needs a GPU on the server). The
    output folder is the service's (STATE/kernels/NAME), not the request's."""

    name: str = Field(
        min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN, description="job name (its id)"
    )
    model: str | None = Field(
        None, max_length=4096, description="built-in card or an allowed model folder"
    )
    nk: list[Annotated[str, Field(pattern=NK_PATTERN)]] = Field(
        default_factory=list, max_length=NK_MAX, description="explicit GEMM shapes N,K"
    )
    tp: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        default_factory=lambda: [1], min_length=1, max_length=TP_MAX
    )
    kind: Literal["fp8", "int4"] | None = Field(None, description="default: from the card")
    batch_sizes: str | None = Field(
        None, pattern=r"^\d{1,6}(,\d{1,6}){0,63}$", description="comma-separated M values"
    )
    strategy: Literal["budgeted", "exhaustive"] = "budgeted"
    executor: Literal["local", "ray"] = "local"
    workers: int | None = Field(None, ge=1, le=1024)
    max_evals: int = Field(40, ge=1, le=100_000, description="budget cap per (shape, M)")
    budget_fraction: float = Field(0.1, gt=0, le=1)
    packing: Literal["awq", "gptq"] = "awq"
    deterministic: bool = Field(
        False, description="leave out configs whose output can differ from run to run"
    )
    deadline_s: float | None = Field(None, gt=0, le=30 * 86400)
    engine: Literal["sglang", "vllm"] | None = Field(
        None,
        description="tune this engine's own FP8 kernel (the release's fp8_kernel.py, read where "
        "it is installed, never imported) and write the files that release reads; install them "
        "with POST /v1/kernels/{name}/install. Default: autotune's own kernels",
    )
    engine_version: str | None = Field(
        None,
        pattern=r"^[0-9][0-9A-Za-z.+_-]{0,63}$",
        description="with engine: the release whose kernel is tuned: the one installed in "
        "engine_python's environment (default: the release installed there), or, without "
        "engine_python, a catalogued release (read from the service's environment when it has "
        "that release, else from its wheel); neither given: the release installed beside the "
        "service",
    )
    engine_python: str | None = Field(
        None,
        max_length=4096,
        description="with engine: the interpreter of the environment the engine is installed "
        "in (allowed_engine_pythons, or the interpreter of an allowed_launchers entry, in the "
        "service's config.yaml); default: the service's own environment",
    )

    @model_validator(mode="after")
    def _shapes(self) -> KernelsRequest:
        if self.model is None and not self.nk:
            raise ValueError("give model or at least one nk shape")
        if self.engine is None:
            for name in ("engine_version", "engine_python"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} needs engine (sglang or vllm)")
        elif self.kind == "int4":
            raise ValueError(
                "engine tunes the engine's FP8 block kernel; kind int4 is autotune's own W4A16 "
                "kernel: leave engine out, or kind out"
            )
        return self

    def cli_args(self, out_dir: str, *, own_python: str | None = None) -> list[str]:
        """`autotune kernels tune` for this request; `own_python`: the service's interpreter,
        whose environment an engine job reads when the request names no release and no
        interpreter (the release installed beside the service)."""
        args = ["kernels", "tune"]
        if self.model is not None:
            args += ["--model", self.model]
        for nk in self.nk:
            args += ["--nk", nk]
        for tp in self.tp:
            args += ["--tp", str(tp)]
        if self.kind is not None:
            args += ["--kind", self.kind]
        if self.batch_sizes is not None:
            args += ["--batch-sizes", self.batch_sizes]
        args += ["--strategy", self.strategy, "--executor", self.executor]
        if self.workers is not None:
            args += ["--workers", str(self.workers)]
        args += ["--max-evals", str(self.max_evals)]
        args += ["--budget-fraction", repr(float(self.budget_fraction))]
        args += ["--packing", self.packing]
        if self.deterministic:
            args.append("--deterministic")
        if self.deadline_s is not None:
            args += ["--deadline-s", repr(float(self.deadline_s))]
        if self.engine is not None:
            args += ["--engine", self.engine]
        if self.engine_version is not None:
            args += ["--engine-version", self.engine_version]
        python = self.engine_python
        if self.engine is not None and self.engine_version is None and python is None:
            python = own_python
        if python is not None:
            args += ["--engine-python", python]
        return [*args, "--out", out_dir, "--json"]


class KernelsInstallRequest(_Request):
    """POST /v1/kernels/{name}/install: `autotune kernels install` on a finished engine job's
    files, into the engine installed where the job tuned it."""

    dry_run: bool = Field(
        True,
        description="show where the files would go and prove the release's own lookup finds "
        "them in a temporary copy, changing nothing (a real install needs allow_kernel_install "
        "in the service's config.yaml)",
    )
    device_name: str | None = Field(
        None,
        max_length=200,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="only the files for this device, e.g. NVIDIA_H200",
    )


class KernelsInstallOut(BaseModel):
    name: str
    dry_run: bool
    result: dict[str, Any] = Field(
        description="`kernels install --json`: the release, the folder its lookup reads, the "
        "files, what was copied or replaced, and the proof that the release's own lookup "
        "finds each file"
    )


KernelsState = Literal[
    "queued", "cancelled", "running", "stopping", "finished", "failed", "stopped", "lost"
]


class KernelsStatus(BaseModel):
    name: str
    state: KernelsState = Field(
        description="lost: the process is gone and its end was not seen (resubmit: the result "
        "cache resumes); queued: waiting for the GPUs (a kernel job uses all of them), see "
        "job.queue_position; cancelled: stopped while queued"
    )
    job: JobInfo
    result: dict[str, Any] | None = Field(None, description="`kernels tune --json` output")
    files: list[str] = Field(default_factory=list, description="tuned config files written")
    out_dir: str


class Health(BaseModel):
    ok: bool
    version: str


class ErrorOut(BaseModel):
    detail: str = Field(description="what is wrong and what would be valid")
    error: str = Field(description="error class, e.g. Forbidden, ConfigError")
    field: str | None = Field(None, description="the request field at fault, when known")
    errors: list[dict[str, Any]] | None = Field(None, description="every validation error")
