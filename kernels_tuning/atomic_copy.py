"""Copying a set of tuned files into a folder all or nothing: temporaries in the destination,
then renames, each replaced file kept aside until the copy is committed; any failure, or a
rollback, restores what was there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernels_tuning import output
from kernels_tuning.tuned_files import TunedFile


@dataclass
class Copied:
    """What copy_all_or_nothing wrote: kept by commit(), undone by rollback()."""

    done: list[tuple[Path, str | None]]  # (target, backup of the file it replaced)
    created: list[Path]  # folders this run created

    @property
    def written(self) -> list[str]:
        return [t.name for t, _ in self.done]

    @property
    def replaced(self) -> list[str]:
        return [t.name for t, b in self.done if b]

    def commit(self) -> None:
        for _, backup in self.done:
            if backup:
                Path(backup).unlink(missing_ok=True)

    def rollback(self) -> None:
        for target, backup in reversed(self.done):
            if backup is not None:
                os.replace(backup, target)
            else:
                target.unlink(missing_ok=True)
        for d in reversed(self.created):
            _rmdir_if_empty(d)


def copy_all_or_nothing(files: Sequence[TunedFile], dest: Path) -> Copied:
    """Copy each file and its sidecar into dest under its installed name: temporaries first,
    then renames, each replaced file kept aside until commit(); any failure undoes it all."""
    pairs = [(t.source, t.name) for t in files] + [
        (t.sidecar, output.provenance_path(Path(t.name)).name)
        for t in files
        if t.sidecar.is_file()
    ]
    copied = Copied([], _missing_parents(dest))
    temps: dict[str, str] = {}
    try:
        dest.mkdir(parents=True, exist_ok=True)
        for src, name in pairs:
            fd, tmp = tempfile.mkstemp(prefix=".autotune-", suffix=".tmp", dir=dest)
            temps[name] = tmp
            with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
                shutil.copyfileobj(inp, out)
                out.flush()
                os.fsync(out.fileno())
        for _, name in pairs:
            target = dest / name
            backup = None
            if target.exists():
                fd, backup = tempfile.mkstemp(prefix=".autotune-old-", dir=dest)
                os.close(fd)
                try:
                    os.replace(target, backup)
                except BaseException:
                    Path(backup).unlink(missing_ok=True)
                    raise
            copied.done.append((target, backup))
            os.replace(temps[name], target)
            del temps[name]
    except BaseException:
        copied.rollback()
        for tmp in temps.values():
            Path(tmp).unlink(missing_ok=True)
        raise
    return copied


def _missing_parents(path: Path) -> list[Path]:
    out: list[Path] = []
    p = Path(os.path.abspath(path))
    while not p.exists():
        out.append(p)
        p = p.parent
    return list(reversed(out))


def _rmdir_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (or already gone): left as it is
        path.rmdir()
