"""The Store's writes: sweeps created and updated, trials added, updated and (at resume) marked
interrupted, measurements, failures and kernel results added. Each write is one committed
session; rows returned are detached copies, changed again only through these methods."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict, TypeVar, Unpack

from autotune.errors import StorageError
from autotune.store.models import (
    CalibrationRow,
    FailureRow,
    KernelResultRow,
    MeasurementRow,
    SpeedCalibrationRow,
    SweepRow,
    SweepStatus,
    TrialRow,
    TrialStatus,
    utcnow,
)
from autotune.store.queries import StoreQueries
from autotune.store.session import status_value

R = TypeVar("R", SweepRow, TrialRow, MeasurementRow, FailureRow, KernelResultRow)


class SweepUpdate(TypedDict, total=False):
    """The columns update_sweep sets (``id`` is read-only)."""

    name: str
    status: SweepStatus | str
    spec_yaml: str
    spec_hash: str
    engine: str
    engine_version: str | None
    model: str
    gpu: str
    created_at: datetime
    updated_at: datetime
    optuna_study_name: str | None
    best_trial_id: int | None
    notes: dict[str, Any]


class TrialUpdate(TypedDict, total=False):
    """The columns update_trial sets (``id`` is read-only)."""

    sweep_id: int
    number: int | None
    status: TrialStatus | str
    config: dict[str, Any]
    params: dict[str, Any]
    value: float | None
    values: Sequence[float] | None
    prediction: Mapping[str, object] | None
    launch: Mapping[str, object] | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None
    worker: str | None
    log_path: str | None
    pid: int | None


def spec_hash(spec_yaml: str) -> str:
    return hashlib.sha256(spec_yaml.encode()).hexdigest()[:16]


class StoreWrites(StoreQueries):
    """Writes to the results database."""

    # -- sweeps ------------------------------------------------------------------------------

    def create_sweep(
        self,
        name: str,
        *,
        spec_yaml: str = "",
        engine: str = "",
        model: str = "",
        gpu: str = "",
        engine_version: str | None = None,
        optuna_study_name: str | None = None,
        notes: Mapping[str, object] | None = None,
        status: SweepStatus | str = SweepStatus.RUNNING,
    ) -> SweepRow:
        """Add a sweep; StorageError if the name is taken."""
        if not name:
            raise StorageError("a sweep needs a non-empty name")
        if self.find_sweep(name) is not None:
            raise StorageError(
                f"sweep {name!r} already exists in {self.display_url}; "
                "resume it or pick another name"
            )
        row = SweepRow(
            name=name,
            status=status_value(SweepStatus, status, "sweep status"),
            spec_yaml=spec_yaml,
            spec_hash=spec_hash(spec_yaml),
            engine=engine,
            engine_version=engine_version,
            model=model,
            gpu=gpu,
            optuna_study_name=optuna_study_name if optuna_study_name is not None else name,
            notes=dict(notes or {}),
        )
        return self._add(row, "create sweep")

    def update_sweep(self, sweep_id: int, **fields: Unpack[SweepUpdate]) -> SweepRow:
        """Set columns of a sweep (``status`` is validated); bumps ``updated_at``."""
        columns: dict[str, object] = dict(fields)
        if "status" in columns:
            columns["status"] = status_value(SweepStatus, columns["status"], "sweep status")
        columns.setdefault("updated_at", utcnow())
        return self._update(SweepRow, sweep_id, columns, "update sweep")

    def update_sweep_status(self, sweep_id: int, status: SweepStatus | str) -> SweepRow:
        return self.update_sweep(sweep_id, status=status)

    # -- trials ------------------------------------------------------------------------------

    def add_trial(
        self,
        sweep_id: int,
        *,
        number: int | None = None,
        status: TrialStatus | str = TrialStatus.RUNNING,
        config: Mapping[str, object] | None = None,
        params: Mapping[str, object] | None = None,
        prediction: Mapping[str, object] | None = None,
        worker: str | None = None,
        log_path: str | Path | None = None,
        pid: int | None = None,
    ) -> TrialRow:
        st = status_value(TrialStatus, status, "trial status")
        row = TrialRow(
            sweep_id=sweep_id,
            number=number,
            status=st,
            config=dict(config or {}),
            params=dict(params or {}),
            prediction=dict(prediction) if prediction is not None else None,
            worker=worker,
            log_path=str(log_path) if log_path is not None else None,
            pid=pid,
            started_at=utcnow() if st == TrialStatus.RUNNING else None,
        )
        return self._add(row, "add trial")

    def update_trial(self, trial_id: int, **fields: Unpack[TrialUpdate]) -> TrialRow:
        """Set columns of a trial. ``status`` is validated; a final status sets ``finished_at``
        (unless given) and ``duration_s`` from ``started_at``; ``values`` also sets ``value``
        (the first objective) unless ``value`` is given."""
        columns: dict[str, object] = dict(fields)
        if "status" in columns:
            st = status_value(TrialStatus, columns["status"], "trial status")
            columns["status"] = st
            if st == TrialStatus.RUNNING:
                columns.setdefault("started_at", utcnow())
            elif st != TrialStatus.QUEUED:
                columns.setdefault("finished_at", utcnow())
        values = fields.get("values")
        if values is not None:
            floats = [float(v) for v in values]
            columns["values"] = floats
            columns.setdefault("value", floats[0] if floats else None)
        for key in ("launch", "prediction"):
            if isinstance(given := columns.get(key), Mapping):
                columns[key] = dict(given)
        return self._update(TrialRow, trial_id, columns, "update trial", derive_duration=True)

    def mark_interrupted(self, sweep_id: int) -> list[TrialRow]:
        """At resume: trials still marked running were cut off by a crash; mark them
        interrupted (finished now) and return them."""
        from sqlmodel import select

        now = utcnow()
        with self.session("mark interrupted trials") as s:
            rows = list(
                s.exec(
                    select(TrialRow).where(
                        TrialRow.sweep_id == sweep_id, TrialRow.status == TrialStatus.RUNNING.value
                    )
                )
            )
            for r in rows:
                r.status = TrialStatus.INTERRUPTED.value
                r.finished_at = now
                if r.started_at is not None:
                    r.duration_s = (now - r.started_at).total_seconds()
                s.add(r)
        return rows

    # -- measurements, failures and kernel results -------------------------------------------

    def add_measurement(
        self,
        trial_id: int,
        scenario: str,
        metrics: Mapping[str, object],
        *,
        repeat: int = 0,
        value: float | None = None,
    ) -> MeasurementRow:
        row = MeasurementRow(
            trial_id=trial_id, scenario=scenario, repeat=repeat, metrics=dict(metrics), value=value
        )
        return self._add(row, "add measurement")

    def add_failure(
        self,
        trial_id: int,
        failure_class: str,
        reason: str,
        *,
        evidence: str | None = None,
        log_tail: str | None = None,
    ) -> FailureRow:
        """Record why a trial failed; ``failure_class`` is an engines.base.FailureClass value."""
        row = FailureRow(
            trial_id=trial_id,
            failure_class=str(failure_class),
            reason=reason,
            evidence=evidence,
            log_tail=log_tail,
        )
        return self._add(row, "add failure")

    def add_kernel_result(
        self,
        *,
        gpu: str,
        dtype: str,
        n: int,
        k: int,
        m: int,
        config: Mapping[str, object],
        time_us: float | None,
        quant_block: str = "",
        tflops: float | None = None,
        tbps: float | None = None,
        error: str | None = None,
        provenance: Mapping[str, object] | None = None,
    ) -> KernelResultRow:
        row = KernelResultRow(
            gpu=gpu,
            dtype=dtype,
            quant_block=quant_block,
            n=n,
            k=k,
            m=m,
            config=dict(config),
            time_us=time_us,
            tflops=tflops,
            tbps=tbps,
            error=error,
            provenance=dict(provenance or {}),
        )
        return self._add(row, "add kernel result")

    def add_calibration(self, **fields: Any) -> CalibrationRow:
        """Keep one log's calibration; the same log (sha256) for the same target replaces its
        earlier row."""
        from sqlmodel import select

        row = CalibrationRow(**fields)
        with self.session("add calibration") as s:
            old = s.exec(
                select(CalibrationRow).where(
                    CalibrationRow.source_sha256 == row.source_sha256,
                    CalibrationRow.engine == row.engine,
                    CalibrationRow.gpu == row.gpu,
                    CalibrationRow.model == row.model,
                )
            ).all()
            for o in old:
                s.delete(o)
            s.add(row)
            s.flush()
            s.refresh(row)
        return row

    def add_speed_calibrations(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Keep one benchmark file's speed samples; the same file (sha256) for the same target
        replaces its earlier rows. Returns how many were kept."""
        from sqlmodel import select

        new = [SpeedCalibrationRow(**r) for r in rows]
        with self.session("add speed calibrations") as s:
            for key in {(r.source_sha256, r.engine, r.gpu, r.model) for r in new}:
                old = s.exec(
                    select(SpeedCalibrationRow).where(
                        SpeedCalibrationRow.source_sha256 == key[0],
                        SpeedCalibrationRow.engine == key[1],
                        SpeedCalibrationRow.gpu == key[2],
                        SpeedCalibrationRow.model == key[3],
                    )
                ).all()
                for o in old:
                    s.delete(o)
            s.add_all(new)
        return len(new)

    # -- helpers -----------------------------------------------------------------------------

    def _add(self, row: R, what: str) -> R:
        with self.session(what) as s:
            s.add(row)
            s.flush()
            s.refresh(row)
        return row

    def _update(
        self,
        model: type[R],
        row_id: int,
        fields: Mapping[str, object],
        what: str,
        *,
        derive_duration: bool = False,
    ) -> R:
        columns = set(model.model_fields)
        unknown = sorted(set(fields) - columns - {"id"}) + (["id"] if "id" in fields else [])
        if unknown:
            raise StorageError(
                f"{what}: unknown or read-only field(s) {', '.join(unknown)}; "
                f"valid: {', '.join(sorted(columns - {'id'}))}"
            )
        with self.session(what) as s:
            row = s.get(model, row_id)
            if row is None:
                raise StorageError(f"{what}: no {model.__tablename__} row with id {row_id}")
            for key, val in fields.items():
                setattr(row, key, val)
            if (
                derive_duration
                and isinstance(row, TrialRow)
                and "duration_s" not in fields
                and row.finished_at is not None
                and row.started_at is not None
            ):
                row.duration_s = (row.finished_at - row.started_at).total_seconds()
            s.add(row)
            s.flush()
            s.refresh(row)
        return row
