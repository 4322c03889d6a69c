"""Opening the results database: which URL (a path, an SQLAlchemy URL or $AUTOTUNE_DB), the
SQLAlchemy engine for it (SQLite in WAL mode with a busy timeout; pre-pinged pools elsewhere), and
error messages that name the database with its password masked.

SQLAlchemy is imported inside the functions, so that importing autotune.store stays light.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from autotune.errors import StorageError
from autotune.store.schema import create_schema

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry, Pool

DEFAULT_DB_PATH = Path("autotune.db")
DB_ENV = "AUTOTUNE_DB"  # a path or an SQLAlchemy URL, used when none is passed
SQLITE_BUSY_TIMEOUT_S = 30.0


class SQLiteConnectArgs(TypedDict):
    """What the sqlite3 driver gets on connect."""

    check_same_thread: bool
    timeout: float


class EngineOptions(TypedDict, total=False):
    """The create_engine keyword arguments the Store sets."""

    echo: bool
    connect_args: SQLiteConnectArgs
    poolclass: type[Pool]
    pool_pre_ping: bool


def mask_url(url: str) -> str:
    """The URL with its password replaced by ***, for messages and logs."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # unparsable: show only the scheme, which holds no secret
        return url.split("://", 1)[0] + "://***" if "://" in url else "<unparsable URL>"


def url_password(url: str) -> str | None:
    """The URL's password, or None (none, or an unparsable URL)."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).password
    except Exception:
        return None


def error_message(what: str, exc: BaseException, url: str) -> str:
    """ "<what> database <masked url>: <the driver's error, first line>", the password masked in
    the error too (drivers may echo the DSN back)."""
    orig = getattr(exc, "orig", None) or exc
    text = f"{type(orig).__name__}: {orig}".splitlines()[0]
    password = url_password(url)
    if password:
        text = text.replace(password, "***")
    return f"{what} database {mask_url(url)}: {text}"


def database_url(url: str | None, path: Path | str | None, *, create: bool = True) -> str:
    """The SQLAlchemy URL for a Store's `url` or SQLite `path` (at most one), else $AUTOTUNE_DB
    (a path or a URL), else ./autotune.db.

    Raises:
        StorageError: both given, or the SQLite file cannot be used (see sqlite_file_url).
    """
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
        url = sqlite_file_url(Path(path), create=create)
    return url


def sqlite_file_url(path: Path, *, create: bool = True) -> str:
    """`sqlite:///<absolute path>`, its folder created.

    Raises:
        StorageError: no file and not `create` (a reader makes no files), the folder cannot be
            made, or the path is a folder.
    """
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


def engine_options(url: str, echo: bool) -> EngineOptions:
    """create_engine's options for `url`: SQLite is shared by threads (the progress display
    reads) and waits when busy, an in-memory one is a single connection (else each connection
    sees an empty database); other backends ping pooled connections before use."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.pool import StaticPool

    parsed = make_url(url)
    options: EngineOptions = {"echo": echo}
    if parsed.get_backend_name() != "sqlite":
        options["pool_pre_ping"] = True
        return options
    options["connect_args"] = {"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S}
    if parsed.database in (None, "", ":memory:"):
        options["poolclass"] = StaticPool
    return options


def open_engine(url: str, echo: bool = False) -> Engine:
    """The engine for `url`, its tables and schema version in place.

    Raises:
        StorageError: a bad URL, a missing driver, or a database that cannot be opened (or is
            newer than this autotune).
    """
    from sqlalchemy import event
    from sqlmodel import create_engine

    try:
        options = engine_options(url, echo)
        engine = create_engine(url, **options)
        if "connect_args" in options:  # SQLite
            event.listen(engine, "connect", sqlite_pragmas)
        create_schema(engine, mask_url(url))
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
        raise StorageError(error_message("cannot open", exc, url) + hint) from exc


def sqlite_pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    """Set on every SQLite connection. WAL: readers never block the writer nor each other; a
    reader in another process (`autotune status`) sees committed rows while the sweep writes.
    busy_timeout: writers (our Store and Optuna's RDBStorage, in one or more processes) wait
    instead of failing."""
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
    finally:
        cur.close()
