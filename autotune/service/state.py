"""The service's state folder: token, local configuration, job table, submitted specs, job logs
and reports. One folder serves `autotune serve` and `autotune mcp` alike.

    STATE/token          bearer token (0600), created on first start
    STATE/config.yaml    what a submitted spec may name (allowed_paths, allowed_engines, ...)
    STATE/jobs.json      job table (which process runs which sweep), guarded by jobs.lock
    STATE/autotune.db    the results database unless --db / $AUTOTUNE_DB names another
    STATE/logs/NAME.log, STATE/reports/NAME/, STATE/kernels/NAME/
    STATE/work/KIND/NAME/ a job's working folder (its cwd, and the spec it was submitted with):
                         never the state folder itself, so a relative path in a spec cannot
                         reach the token, the configuration or the database
    STATE/specs/         specs submitted before jobs had a working folder (read on resume)
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from autotune.errors import ConfigError

STATE_ENV = "AUTOTUNE_STATE_DIR"


def default_state_dir() -> Path:
    """$AUTOTUNE_STATE_DIR, else $XDG_STATE_HOME/autotune, else ~/.local/state/autotune."""
    env = os.environ.get(STATE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "autotune"


@dataclass(frozen=True)
class StateDir:
    root: Path

    @classmethod
    def open(cls, root: Path | str | None = None) -> StateDir:
        """The folder (created owner-only if missing) and its sub-folders."""
        path = Path(root).expanduser() if root is not None else default_state_dir()
        path = path.resolve()
        try:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            for sub in ("specs", "logs", "reports", "work"):
                (path / sub).mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the state folder: {exc.strerror or exc}",
                source=str(path),
                field="--state-dir",
            ) from None
        mode = path.stat().st_mode
        if mode & 0o022:
            raise ConfigError(
                f"the state folder is writable by others (mode {mode & 0o777:04o}): they could "
                "replace its token or configuration; use a folder only you can write "
                "(chmod 700), e.g. the default ~/.local/state/autotune",
                source=str(path),
                field="--state-dir",
            )
        return cls(path)

    @property
    def token(self) -> Path:
        return self.root / "token"

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def jobs(self) -> Path:
        return self.root / "jobs.json"

    @property
    def jobs_lock(self) -> Path:
        return self.root / "jobs.lock"

    @property
    def serve_lock(self) -> Path:
        return self.root / "serve.lock"

    @property
    def default_db(self) -> Path:
        return self.root / "autotune.db"

    def spec_file(self, name: str) -> Path:
        return self.root / "specs" / f"{name}.yaml"

    def log_file(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def report_dir(self, name: str) -> Path:
        return self.root / "reports" / name

    def work_dir(self, kind: str, name: str) -> Path:
        """The working folder of job `name` of `kind` (sweep, kernels); not created here."""
        return self.root / "work" / kind / name


@contextmanager
def hold_serve_lock(state: StateDir) -> Iterator[None]:
    """One `autotune serve` per state folder (two would both resume the same sweeps)."""
    fh = open(state.serve_lock, "a+")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            raise ConfigError(
                f"another autotune serve (pid {holder}) uses this state folder; stop it, or "
                "give this one its own --state-dir",
                source=str(state.root),
                field="--state-dir",
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        fh.close()
