"""Tables of the results database (sqlmodel). Only ``autotune.store.db`` opens sessions.

Every table name starts with ``at_`` so that Optuna's own tables (``studies``, ``trials``,
``trial_params``, ...) live side by side in the same database file without a clash.
Timestamps are stored as UTC and read back timezone-aware. JSON columns hold plain dicts/lists;
assign a new object to change one (in-place mutation is not tracked).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, DateTime, Text, TypeDecorator, UniqueConstraint
from sqlalchemy.engine import Dialect
from sqlmodel import Field, SQLModel

SCHEMA_VERSION = 1


class SweepStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"  # a budget, deadline or signal ended it; resumable
    FAILED = "failed"


class TrialStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    PRUNED = "pruned"  # planner rejected it, or a cheap scenario cut it short
    INTERRUPTED = "interrupted"  # was running when the sweep process died


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC; returns aware datetimes on every backend (SQLite keeps no timezone)."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware one (UTC)")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None else None


class SweepRow(SQLModel, table=True):
    """One sweep: its spec (verbatim YAML and hash), target and state."""

    __tablename__ = "at_sweeps"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True)
    status: str = Field(default=SweepStatus.RUNNING.value, index=True)
    spec_yaml: str = Field(default="", sa_type=Text)
    spec_hash: str = ""
    engine: str = ""
    engine_version: str | None = None
    model: str = ""
    gpu: str = ""
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    optuna_study_name: str | None = None
    best_trial_id: int | None = None
    notes: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)


class TrialRow(SQLModel, table=True):
    """One candidate configuration: what was asked, predicted, launched and measured."""

    __tablename__ = "at_trials"
    __table_args__ = (UniqueConstraint("sweep_id", "number", name="uq_at_trials_sweep_number"),)

    id: int | None = Field(default=None, primary_key=True)
    sweep_id: int = Field(foreign_key="at_sweeps.id", index=True)
    number: int | None = Field(default=None, description="Optuna trial number")
    status: str = Field(default=TrialStatus.QUEUED.value, index=True)
    config: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    params: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    value: float | None = Field(default=None, description="main objective, for ordering")
    values: list[float] | None = Field(default=None, sa_type=JSON)
    prediction: dict[str, Any] | None = Field(default=None, sa_type=JSON)
    launch: dict[str, Any] | None = Field(default=None, sa_type=JSON)
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    duration_s: float | None = None
    worker: str | None = None
    log_path: str | None = None
    pid: int | None = None


class MeasurementRow(SQLModel, table=True):
    """One scenario run (one repeat) of a trial: the full scenario result and its main figure."""

    __tablename__ = "at_measurements"

    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(foreign_key="at_trials.id", index=True)
    scenario: str
    repeat: int = 0
    metrics: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    value: float | None = None
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class FailureRow(SQLModel, table=True):
    """Why a trial did not produce a result (engines.base.FailureClass values)."""

    __tablename__ = "at_failures"

    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(foreign_key="at_trials.id", index=True)
    failure_class: str = Field(index=True)
    reason: str
    evidence: str | None = Field(default=None, sa_type=Text)
    log_tail: str | None = Field(default=None, sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class KernelResultRow(SQLModel, table=True):
    """One timed Triton config for one GEMM shape on one GPU (the kernel tuner's cache)."""

    __tablename__ = "at_kernel_results"

    id: int | None = Field(default=None, primary_key=True)
    gpu: str = Field(index=True, description="device name as the engines spell it")
    dtype: str = Field(index=True, description="kind, e.g. fp8_w8a8 or int4_w4a16")
    quant_block: str = Field(default="", description="e.g. '128x128' (FP8) or 'g128' (INT4)")
    n: int
    k: int
    m: int
    config: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    time_us: float | None = Field(default=None, description="None: failed the gate or to run")
    tflops: float | None = None
    tbps: float | None = None
    error: str | None = None
    provenance: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class CalibrationRow(SQLModel, table=True):
    """What one real launch's startup log said about the planner on one (engine, GPU, model):
    logged minus planned, GiB (`autotune calibrate`, autotune.calibration.calibrate)."""

    __tablename__ = "at_calibrations"

    id: int | None = Field(default=None, primary_key=True)
    engine: str = Field(index=True)
    engine_version: str
    gpu: str = Field(index=True, description="GPU catalog name")
    model: str = Field(index=True)
    tp: int = 1
    predicted_kv: int
    logged_kv: int
    cell_bytes: int | None = None
    free_shift_gib: float | None = None
    weights_shift_gib: float | None = None
    kv_memory_shift_gib: float | None = None
    source: str = Field(description="the log file")
    source_sha256: str = Field(index=True)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class SpeedCalibrationRow(SQLModel, table=True):
    """What one serving-benchmark run said about the roofline's speed on one (engine, GPU,
    model): the efficiency factor it asks for, measured over predicted (`autotune calibrate` on
    bench_serving / vllm bench serve results, autotune.calibration.speed)."""

    __tablename__ = "at_speed_calibrations"

    id: int | None = Field(default=None, primary_key=True)
    engine: str = Field(index=True)
    engine_version: str
    gpu: str = Field(index=True, description="GPU catalog name")
    model: str = Field(index=True)
    tp: int = 1
    phase: str = Field(description="decode or prefill")
    run_index: int = Field(description="the run's position in its file")
    streams: int
    input_len: int
    output_len: int
    context_len: int
    predicted_tok_s: float
    measured_tok_s: float
    ratio: float
    source: str = Field(description="the benchmark result file")
    source_sha256: str = Field(index=True)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class MetaRow(SQLModel, table=True):
    """Key/value facts about the database itself (schema version)."""

    __tablename__ = "at_meta"

    key: str = Field(primary_key=True)
    value: str


TABLES = [
    SweepRow,
    TrialRow,
    MeasurementRow,
    FailureRow,
    KernelResultRow,
    CalibrationRow,
    SpeedCalibrationRow,
    MetaRow,
]
