"""The Store's reads: sweeps by name, a sweep's trials (by status, the best one), a trial's
measurements, a sweep's failures (and their counts by class), and kernel results by GEMM shape.
Rows returned are detached copies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeVar

from autotune.errors import StorageError, did_you_mean
from autotune.store.models import (
    CalibrationRow,
    FailureRow,
    KernelResultRow,
    MeasurementRow,
    SpeedCalibrationRow,
    SweepRow,
    TrialRow,
    TrialStatus,
)
from autotune.store.session import StoreSession, status_value

# A calibration table keyed by (engine, GPU, model): memory shifts or speed runs.
_Calib = TypeVar("_Calib", CalibrationRow, SpeedCalibrationRow)


class StoreQueries(StoreSession):
    """Reads of the results database."""

    # -- sweeps ------------------------------------------------------------------------------

    def find_sweep(self, name: str) -> SweepRow | None:
        from sqlmodel import select

        with self.session("read sweep") as s:
            return s.exec(select(SweepRow).where(SweepRow.name == name)).first()

    def get_sweep(self, name: str) -> SweepRow:
        """The sweep called ``name``; StorageError listing the names that exist otherwise."""
        row = self.find_sweep(name)
        if row is None:
            names = [r.name for r in self.list_sweeps()]
            known = did_you_mean(name, names) if names else " (the database has no sweeps yet)"
            raise StorageError(f"no sweep {name!r} in {self.display_url}{known}")
        return row

    def list_sweeps(self) -> list[SweepRow]:
        from sqlmodel import col, select

        with self.session("list sweeps") as s:
            return list(
                s.exec(select(SweepRow).order_by(col(SweepRow.created_at), col(SweepRow.id)))
            )

    # -- trials ------------------------------------------------------------------------------

    def get_trial(self, trial_id: int) -> TrialRow:
        with self.session("read trial") as s:
            row = s.get(TrialRow, trial_id)
        if row is None:
            raise StorageError(f"no trial with id {trial_id} in {self.display_url}")
        return row

    def get_trials(
        self, sweep_id: int, status: TrialStatus | str | Sequence[TrialStatus | str] | None = None
    ) -> list[TrialRow]:
        """Trials of a sweep in trial-number order, optionally only some statuses."""
        from sqlmodel import col, select

        q = select(TrialRow).where(TrialRow.sweep_id == sweep_id)
        if status is not None:
            wanted = [status] if isinstance(status, str) else list(status)
            q = q.where(
                col(TrialRow.status).in_(
                    [status_value(TrialStatus, w, "trial status") for w in wanted]
                )
            )
        q = q.order_by(col(TrialRow.number), col(TrialRow.id))
        with self.session("read trials") as s:
            return list(s.exec(q))

    def best_trial(
        self, sweep_id: int, direction: Literal["maximize", "minimize"] = "maximize"
    ) -> TrialRow | None:
        """The complete trial with the best main objective ``value``, or None."""
        from sqlmodel import col, select

        if direction not in ("maximize", "minimize"):
            raise StorageError(f"direction must be 'maximize' or 'minimize', got {direction!r}")
        order = (
            col(TrialRow.value).desc() if direction == "maximize" else col(TrialRow.value).asc()
        )
        q = (
            select(TrialRow)
            .where(
                TrialRow.sweep_id == sweep_id,
                TrialRow.status == TrialStatus.COMPLETE.value,
                col(TrialRow.value).is_not(None),
            )
            .order_by(order, col(TrialRow.number))
            .limit(1)
        )
        with self.session("read best trial") as s:
            return s.exec(q).first()

    # -- measurements and failures -----------------------------------------------------------

    def get_measurements(self, trial_id: int) -> list[MeasurementRow]:
        from sqlmodel import col, select

        q = (
            select(MeasurementRow)
            .where(MeasurementRow.trial_id == trial_id)
            .order_by(
                col(MeasurementRow.scenario), col(MeasurementRow.repeat), col(MeasurementRow.id)
            )
        )
        with self.session("read measurements") as s:
            return list(s.exec(q))

    def get_failures(self, sweep_id: int) -> list[FailureRow]:
        from sqlmodel import col, select

        q = (
            select(FailureRow)
            .join(TrialRow, col(FailureRow.trial_id) == col(TrialRow.id))
            .where(TrialRow.sweep_id == sweep_id)
            .order_by(col(FailureRow.id))
        )
        with self.session("read failures") as s:
            return list(s.exec(q))

    def failures_by_class(self, sweep_id: int) -> dict[str, int]:
        """{failure_class: count} over the sweep's trials, most frequent first."""
        from sqlalchemy import func
        from sqlmodel import col, select

        q = (
            select(FailureRow.failure_class, func.count())
            .join(TrialRow, col(FailureRow.trial_id) == col(TrialRow.id))
            .where(TrialRow.sweep_id == sweep_id)
            .group_by(col(FailureRow.failure_class))
        )
        with self.session("count failures") as s:
            counts = {str(k): int(v) for k, v in s.exec(q)}
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    # -- kernel results ----------------------------------------------------------------------

    def get_kernel_results(
        self,
        *,
        gpu: str,
        dtype: str,
        n: int,
        k: int,
        m: int | None = None,
        quant_block: str | None = None,
    ) -> list[KernelResultRow]:
        """Results for one GEMM shape (all M unless given), fastest first, failures last."""
        from sqlmodel import col, select

        q = select(KernelResultRow).where(
            KernelResultRow.gpu == gpu,
            KernelResultRow.dtype == dtype,
            KernelResultRow.n == n,
            KernelResultRow.k == k,
        )
        if m is not None:
            q = q.where(KernelResultRow.m == m)
        if quant_block is not None:
            q = q.where(KernelResultRow.quant_block == quant_block)
        q = q.order_by(
            col(KernelResultRow.m),
            col(KernelResultRow.time_us).is_(None),
            col(KernelResultRow.time_us),
        )
        with self.session("read kernel results") as s:
            return list(s.exec(q))

    # -- calibrations --------------------------------------------------------------------------

    def get_calibrations(self, *, engine: str, gpu: str, model: str) -> list[CalibrationRow]:
        """The calibrations of one (engine, GPU, model), oldest first."""
        return self._target_rows(CalibrationRow, engine, gpu, model, "read calibrations")

    def get_speed_calibrations(
        self, *, engine: str, gpu: str, model: str
    ) -> list[SpeedCalibrationRow]:
        """The speed calibration runs of one (engine, GPU, model), oldest first."""
        return self._target_rows(
            SpeedCalibrationRow, engine, gpu, model, "read speed calibrations"
        )

    def _target_rows(
        self, row: type[_Calib], engine: str, gpu: str, model: str, what: str
    ) -> list[_Calib]:
        from sqlmodel import col, select

        q = (
            select(row)
            .where(row.engine == engine, row.gpu == gpu, row.model == model)
            .order_by(col(row.created_at), col(row.id))
        )
        with self.session(what) as s:
            return list(s.exec(q))
