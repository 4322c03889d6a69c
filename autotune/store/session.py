"""A Store's open database and its sessions, the one place that opens them: the base of the
Store's queries (queries.py) and writes (writes.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Self

from autotune.errors import StorageError
from autotune.store.connection import database_url, error_message, mask_url, open_engine
from autotune.store.models import SweepStatus, TrialStatus

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlmodel import Session


class StoreSession:
    """An open results database (see Store for the arguments).

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
        url = database_url(url, path, create=create)
        self.storage_url: str = url
        self.display_url = mask_url(url)
        self.engine: Engine = open_engine(url, echo)

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
            raise StorageError(error_message(f"{what}:", exc, self.storage_url)) from exc


def status_value(enum: type[SweepStatus] | type[TrialStatus], value: object, what: str) -> str:
    """The stored form of a sweep or trial status given as the enum or its value.

    Raises:
        StorageError: not one of the enum's values (`what` names it: "trial status").
    """
    try:
        return enum(str(value)).value
    except ValueError:
        valid = ", ".join(e.value for e in enum)
        raise StorageError(f"{what} must be one of {valid}; got {value!r}") from None
