"""The results database: the only module that opens sessions.

SQLite by default (one file; WAL mode, so ``autotune status`` in another process reads while a
sweep writes), any SQLAlchemy URL otherwise (PostgreSQL for a shared cluster). Optuna's
RDBStorage takes the same URL (``Store.storage_url``) and keeps its tables beside ours.
Every SQLAlchemy failure surfaces as StorageError naming the database, password masked.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from autotune.errors import StorageError, did_you_mean
from autotune.store.models import (
    SCHEMA_VERSION,
    TABLES,
    FailureRow,
    KernelResultRow,
    MeasurementRow,
    MetaRow,
    SweepRow,
    SweepStatus,
    TrialRow,
    TrialStatus,
    utcnow,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlmodel import Session

DEFAULT_DB_PATH = Path("autotune.db")
DB_ENV = "AUTOTUNE_DB"  # a path or an SQLAlchemy URL, used when none is passed
SQLITE_BUSY_TIMEOUT_S = 30.0

R = TypeVar("R", SweepRow, TrialRow, MeasurementRow, FailureRow, KernelResultRow)


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***, for messages and logs."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # unparsable: show only the scheme, which holds no secret
        return url.split("://", 1)[0] + "://***" if "://" in url else "<unparsable URL>"


def spec_hash(spec_yaml: str) -> str:
    return hashlib.sha256(spec_yaml.encode()).hexdigest()[:16]


class Store:
    """Sweeps, trials, measurements, failures and kernel results in one database.

    Args:
        url: any SQLAlchemy URL (``postgresql+psycopg://user:pw@host/db``, ``sqlite:///x.db``).
        path: an SQLite file (parent folders are created). Give at most one of url/path;
            with neither, ``$AUTOTUNE_DB`` (path or URL) or ``./autotune.db``.
        create: False for readers: a missing SQLite file is a StorageError, not a new file.

    Example:
        >>> with Store(path=Path("autotune.db")) as store:
        ...     sweep = store.create_sweep("night-1", spec_yaml=text, engine="sglang",
        ...                                model="qwen3.8-27b-fp8", gpu="h200-141g")
        ...     optuna.create_study(storage=store.storage_url, study_name="night-1")

    Rows returned are detached copies: change them through ``update_*`` methods.
    Raises StorageError when the database cannot be opened, read or written.
    """

    def __init__(
        self,
        url: str | None = None,
        path: Path | str | None = None,
        *,
        echo: bool = False,
        create: bool = True,
    ):
        if url is not None and path is not None:
            raise StorageError("Store: give either url or path, not both")
        if url is None and path is None:
            env = os.environ.get(DB_ENV, "").strip()
            if "://" in env:
                url = env
            else:
                path = Path(env) if env else DEFAULT_DB_PATH
        if url is None:
            assert path is not None
            url = self._sqlite_file_url(Path(path), create=create)
        self.storage_url: str = url
        self.display_url = mask_url(url)
        self.engine: Engine = self._open(url, echo)

    # -- opening -----------------------------------------------------------------------------

    @staticmethod
    def _sqlite_file_url(path: Path, *, create: bool = True) -> str:
        path = path.expanduser().resolve()
        if not create and not path.exists():  # a reader (status, report) makes no files
            raise StorageError(
                f"no database at {path}: no sweep has used it yet; give the --db of a sweep "
                "(or set AUTOTUNE_DB)"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the folder for database {path}: {exc}") from exc
        if path.is_dir():
            raise StorageError(
                f"database path {path} is a folder; name a file, e.g. {path}/autotune.db"
            )
        return f"sqlite:///{path}"

    @staticmethod
    def _url_password(url: str) -> str | None:
        try:
            from sqlalchemy.engine import make_url

            return make_url(url).password
        except Exception:
            return None

    def _open(self, url: str, echo: bool) -> Engine:
        from sqlalchemy import event
        from sqlalchemy.engine import make_url
        from sqlalchemy.pool import StaticPool
        from sqlmodel import SQLModel, create_engine

        try:
            parsed = make_url(url)
            kwargs: dict[str, Any] = {"echo": echo}
            is_sqlite = parsed.get_backend_name() == "sqlite"
            if is_sqlite:
                # Readers in other threads (progress display) share the engine.
                kwargs["connect_args"] = {
                    "check_same_thread": False,
                    "timeout": SQLITE_BUSY_TIMEOUT_S,
                }
                if parsed.database in (None, "", ":memory:"):
                    kwargs["poolclass"] = StaticPool  # one connection, else each sees an empty DB
            else:
                kwargs["pool_pre_ping"] = True
            engine = create_engine(url, **kwargs)
            if is_sqlite:
                event.listen(engine, "connect", _sqlite_pragmas)
            self._create_schema(engine, SQLModel.metadata)
            return engine
        except StorageError:
            raise
        except ImportError as exc:
            raise StorageError(
                f"database {mask_url(url)}: its driver is not installed ({exc.name or exc}); "
                "install it (e.g. pip install psycopg for postgresql+psycopg://)"
            ) from exc
        except Exception as exc:  # ArgumentError (bad URL), OperationalError, DatabaseError
            from sqlalchemy.exc import ArgumentError

            hint = (
                "; expected e.g. sqlite:////abs/path/autotune.db or "
                "postgresql+psycopg://user:password@host/dbname"
                if isinstance(exc, ArgumentError)
                else ""
            )
            raise StorageError(self._message("cannot open", exc, url) + hint) from exc

    def _create_schema(self, engine: Engine, metadata: Any) -> None:
        """Create the tables and the schema-version row. Two processes opening a new database
        at once (a sweep and `autotune status`) both see it empty; the loser's CREATE or INSERT
        fails and a second pass sees what the winner made."""
        from sqlalchemy.exc import IntegrityError, OperationalError

        tables = [t.__table__ for t in TABLES]  # type: ignore[attr-defined]
        for attempt in range(3):
            try:
                metadata.create_all(engine, tables=tables)
                self._check_schema(engine)
                return
            except (IntegrityError, OperationalError):
                if attempt == 2:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def _check_schema(self, engine: Engine) -> None:
        from sqlmodel import Session

        with Session(engine) as s:
            row = s.get(MetaRow, "schema_version")
            if row is None:
                s.add(MetaRow(key="schema_version", value=str(SCHEMA_VERSION)))
                s.commit()
            elif int(row.value) > SCHEMA_VERSION:
                raise StorageError(
                    f"database {mask_url(self.storage_url)} has schema version {row.value}, newer "
                    f"than this autotune's {SCHEMA_VERSION}; upgrade autotune to read it"
                )

    def _message(self, what: str, exc: BaseException, url: str | None = None) -> str:
        url = url or self.storage_url
        orig = getattr(exc, "orig", None) or exc
        text = f"{type(orig).__name__}: {orig}".splitlines()[0]
        password = self._url_password(url)
        if password:  # drivers may echo the DSN back
            text = text.replace(password, "***")
        return f"{what} database {mask_url(url)}: {text}"

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.display_url!r})"

    @contextmanager
    def session(self, what: str = "access") -> Iterator[Session]:
        """A session that commits on success; SQLAlchemy errors become StorageError."""
        from sqlalchemy.exc import SQLAlchemyError
        from sqlmodel import Session

        try:
            with Session(self.engine, expire_on_commit=False) as s:
                yield s
                s.commit()
        except SQLAlchemyError as exc:
            raise StorageError(self._message(f"{what}:", exc)) from exc

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
        notes: Mapping[str, Any] | None = None,
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
            status=_status(SweepStatus, status, "sweep status"),
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

    def update_sweep(self, sweep_id: int, **fields: Any) -> SweepRow:
        """Set columns of a sweep (``status`` is validated); bumps ``updated_at``."""
        if "status" in fields:
            fields["status"] = _status(SweepStatus, fields["status"], "sweep status")
        fields.setdefault("updated_at", utcnow())
        return self._update(SweepRow, sweep_id, fields, "update sweep")

    def update_sweep_status(self, sweep_id: int, status: SweepStatus | str) -> SweepRow:
        return self.update_sweep(sweep_id, status=status)

    # -- trials ------------------------------------------------------------------------------

    def add_trial(
        self,
        sweep_id: int,
        *,
        number: int | None = None,
        status: TrialStatus | str = TrialStatus.RUNNING,
        config: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        prediction: Mapping[str, Any] | None = None,
        worker: str | None = None,
        log_path: str | Path | None = None,
        pid: int | None = None,
    ) -> TrialRow:
        st = _status(TrialStatus, status, "trial status")
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

    def update_trial(self, trial_id: int, **fields: Any) -> TrialRow:
        """Set columns of a trial. ``status`` is validated; a final status sets ``finished_at``
        (unless given) and ``duration_s`` from ``started_at``; ``values`` also sets ``value``
        (the first objective) unless ``value`` is given."""
        if "status" in fields:
            st = _status(TrialStatus, fields["status"], "trial status")
            fields["status"] = st
            if st == TrialStatus.RUNNING:
                fields.setdefault("started_at", utcnow())
            elif st != TrialStatus.QUEUED:
                fields.setdefault("finished_at", utcnow())
        if fields.get("values") is not None:
            fields["values"] = [float(v) for v in fields["values"]]
            fields.setdefault("value", fields["values"][0] if fields["values"] else None)
        for key in ("launch", "prediction"):
            if isinstance(fields.get(key), Mapping):
                fields[key] = dict(fields[key])
        return self._update(TrialRow, trial_id, fields, "update trial", derive_duration=True)

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
                col(TrialRow.status).in_([_status(TrialStatus, w, "trial status") for w in wanted])
            )
        q = q.order_by(col(TrialRow.number), col(TrialRow.id))
        with self.session("read trials") as s:
            return list(s.exec(q))

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

    def add_measurement(
        self,
        trial_id: int,
        scenario: str,
        metrics: Mapping[str, Any],
        *,
        repeat: int = 0,
        value: float | None = None,
    ) -> MeasurementRow:
        row = MeasurementRow(
            trial_id=trial_id, scenario=scenario, repeat=repeat, metrics=dict(metrics), value=value
        )
        return self._add(row, "add measurement")

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

    def add_kernel_result(
        self,
        *,
        gpu: str,
        dtype: str,
        n: int,
        k: int,
        m: int,
        config: Mapping[str, Any],
        time_us: float | None,
        quant_block: str = "",
        tflops: float | None = None,
        tbps: float | None = None,
        error: str | None = None,
        provenance: Mapping[str, Any] | None = None,
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
        fields: dict[str, Any],
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


def _status(enum: type[SweepStatus] | type[TrialStatus], value: object, what: str) -> str:
    try:
        return enum(str(value)).value
    except ValueError:
        valid = ", ".join(e.value for e in enum)
        raise StorageError(f"{what} must be one of {valid}; got {value!r}") from None


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL: readers never block the writer nor each other; a reader in another process
    # (`autotune status`) sees committed rows while the sweep writes. busy_timeout: writers
    # (our Store and Optuna's RDBStorage, in one or more processes) wait instead of failing.
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
    finally:
        cur.close()
