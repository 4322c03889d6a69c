"""The results database's schema: its tables created where missing, and its schema version
recorded in at_meta (a database newer than this autotune is refused; there are no migrations yet,
SCHEMA_VERSION 1 being the only one)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from autotune.errors import StorageError
from autotune.store.models import SCHEMA_VERSION, TABLES, MetaRow

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def create_schema(engine: Engine, display_url: str) -> None:
    """Create the tables and the schema-version row. Two processes opening a new database at
    once (a sweep and `autotune status`) both see it empty; the loser's CREATE or INSERT fails
    and a second pass sees what the winner made.

    Raises:
        StorageError: the database's schema is newer than this autotune's.
    """
    from sqlalchemy.exc import IntegrityError, OperationalError
    from sqlmodel import SQLModel

    tables = [t.__table__ for t in TABLES]  # type: ignore[attr-defined]
    for attempt in range(3):
        try:
            SQLModel.metadata.create_all(engine, tables=tables)
            check_schema(engine, display_url)
            return
        except (IntegrityError, OperationalError):
            if attempt == 2:
                raise
            time.sleep(0.05 * (attempt + 1))


def check_schema(engine: Engine, display_url: str) -> None:
    """Record the schema version in a new database; refuse a newer one.

    Raises:
        StorageError: the database's schema version is newer than SCHEMA_VERSION.
    """
    from sqlmodel import Session

    with Session(engine) as s:
        row = s.get(MetaRow, "schema_version")
        if row is None:
            s.add(MetaRow(key="schema_version", value=str(SCHEMA_VERSION)))
            s.commit()
        elif int(row.value) > SCHEMA_VERSION:
            raise StorageError(
                f"database {display_url} has schema version {row.value}, newer "
                f"than this autotune's {SCHEMA_VERSION}; upgrade autotune to read it"
            )
