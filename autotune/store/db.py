"""The results database: `Store`, the only class that opens sessions.

SQLite by default (one file; WAL mode, so ``autotune status`` in another process reads while a
sweep writes), any SQLAlchemy URL otherwise (PostgreSQL for a shared cluster). Optuna's
RDBStorage takes the same URL (``Store.storage_url``) and keeps its tables beside ours.
Every SQLAlchemy failure surfaces as StorageError naming the database, password masked.

The Store is built in layers, one module each: connection.py (which database, the engine),
schema.py (tables and schema version), session.py (the open database and its sessions),
queries.py (reads) and writes.py (writes).
"""

from __future__ import annotations

from autotune.store.connection import DB_ENV, DEFAULT_DB_PATH, SQLITE_BUSY_TIMEOUT_S, mask_url
from autotune.store.writes import StoreWrites, SweepUpdate, TrialUpdate, spec_hash

__all__ = [
    "DB_ENV",
    "DEFAULT_DB_PATH",
    "SQLITE_BUSY_TIMEOUT_S",
    "Store",
    "SweepUpdate",
    "TrialUpdate",
    "mask_url",
    "spec_hash",
]


class Store(StoreWrites):
    """Sweeps, trials, measurements, failures and kernel results in one database.

    Args:
        url: any SQLAlchemy URL (``postgresql+psycopg://user:pw@host/db``, ``sqlite:///x.db``).
        path: an SQLite file (parent folders are created). Give at most one of url/path;
            with neither, ``$AUTOTUNE_DB`` (path or URL) or ``./autotune.db``.
        echo: log SQLAlchemy's statements.
        create: False for readers: a missing SQLite file is a StorageError, not a new file.

    Example:
        >>> with Store(path=Path("autotune.db")) as store:
        ...     sweep = store.create_sweep("night-1", spec_yaml=text, engine="sglang",
        ...                                model="qwen3.8-27b-fp8", gpu="h200-141g")
        ...     optuna.create_study(storage=store.storage_url, study_name="night-1")

    Rows returned are detached copies: change them through ``update_*`` methods.
    Raises StorageError when the database cannot be opened, read or written.
    """
