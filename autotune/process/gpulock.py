"""Host-wide locks, one per GPU index: two sweeps, from the service or the CLI, never launch
engines on the same GPU at the same time.

Each GPU has a file ``gpu<N>.lock`` in a folder every user of the machine shares
(``/tmp/autotune-gpu-locks``, or ``$AUTOTUNE_GPU_LOCK_DIR``), and the lock is an ``flock`` on it.
The kernel drops an flock when the last descriptor of its open file is closed, so a lock dies
with its holder, SIGKILL included: there are no stale locks to clean up. The holder writes who
it is into the file, so that a waiting sweep can say whom it waits for.

EngineProcess hands the descriptors to the engine's watchdog as well (``fds``): a driver killed
mid-trial frees its GPUs only once its engine is gone, not while it still holds their memory.

Example:
    >>> with GpuLocks([0, 1], label="sweep-a/trial-3") as locks:
    ...     if locks.acquire(cancelled=stop_event.is_set):
    ...         ...  # launch the engine on GPUs 0 and 1
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import stat
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from autotune.errors import HardwareError

log = logging.getLogger(__name__)

LOCK_DIR_ENV = "AUTOTUNE_GPU_LOCK_DIR"
DEFAULT_LOCK_DIR = Path("/tmp/autotune-gpu-locks")  # fixed, not $TMPDIR: every user must agree
POLL_S = 0.5
REPEAT_NOTICE_S = 60.0


def lock_dir() -> Path:
    """The shared folder of the lock files ($AUTOTUNE_GPU_LOCK_DIR, else the default)."""
    return Path(os.environ.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)


def lock_path(index: int, folder: Path | None = None) -> Path:
    return (folder or lock_dir()) / f"gpu{index}.lock"


def holder(index: int, folder: Path | None = None) -> dict[str, Any] | None:
    """What the current (or last) holder of GPU ``index`` wrote: pid, host, label, since."""
    try:
        fd = os.open(lock_path(index, folder), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        info = json.loads(data)
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def _describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "another process (it did not say which)"
    what = f"pid {info.get('pid')}"
    if info.get("label"):
        what += f" ({info['label']})"
    if info.get("since"):
        what += f", since {info['since']}"
    return what


def _open_dir(folder: Path) -> None:
    """Create the shared folder: sticky and writable by all (several users share the GPUs;
    the sticky bit keeps one user from deleting another's lock files)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        st = folder.stat()
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != 0o1777:
            folder.chmod(0o1777)  # mkdir's mode is cut by the umask
    except OSError as exc:
        raise HardwareError(
            f"cannot use the GPU lock folder {folder}: {exc.strerror or exc}; make it writable "
            f"or point {LOCK_DIR_ENV} at a folder shared by everyone who runs sweeps here"
        ) from exc


def _open_lock(path: Path) -> int:
    """A descriptor on the lock file (created readable and writable by all). O_NOFOLLOW: in a
    world-writable folder a planted symlink must not redirect us to another file."""
    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, os.O_RDWR | flags, 0o666)
    except PermissionError:
        # another user's file without write access for us: flock needs no write access
        try:
            return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise HardwareError(f"cannot open the GPU lock file {path}: {exc}") from exc
    except OSError as exc:
        raise HardwareError(
            f"cannot open the GPU lock file {path}: {exc.strerror or exc} (set {LOCK_DIR_ENV} "
            "to another shared folder)"
        ) from exc
    with contextlib.suppress(OSError):  # not ours: its owner's mode stands
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o666)
    return fd


class GpuLocks:
    """Exclusive host-wide locks on some GPU indices, held from ``acquire`` until ``release``
    (or until this process dies). Indices are taken in ascending order, so two sweeps that
    want overlapping sets cannot deadlock."""

    def __init__(self, indices: Iterable[int], *, label: str = "", folder: Path | None = None):
        self.indices = sorted(set(indices))
        self.label = label
        self.folder = folder or lock_dir()
        self._held: dict[int, int] = {}  # GPU index -> descriptor
        self.waited_s = 0.0

    @property
    def fds(self) -> list[int]:
        """Descriptors of the locks held now."""
        return list(self._held.values())

    @property
    def held(self) -> bool:
        return len(self._held) == len(self.indices)

    def acquire(
        self,
        *,
        cancelled: Callable[[], bool] = lambda: False,
        timeout_s: float | None = None,
        poll_s: float = POLL_S,
        notify: Callable[[str], None] | None = None,
    ) -> bool:
        """Take every lock; wait (polling, never blocking in flock) while another process holds
        one. Returns False, holding nothing, once ``cancelled()`` is true or ``timeout_s`` has
        passed. ``notify`` (default: log a warning) hears whom we wait for, at first and then
        every minute. Raises HardwareError if the lock folder or a file cannot be used."""
        if self.held:
            return True
        if not self.indices:
            return True
        _open_dir(self.folder)
        t0 = time.monotonic()
        say = notify or log.warning
        for index in self.indices:
            if index in self._held:
                continue
            fd = _open_lock(lock_path(index, self.folder))
            last_notice: float | None = None
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        os.close(fd)
                        self.release()
                        raise HardwareError(f"cannot lock GPU {index}: {exc}") from exc
                now = time.monotonic()
                if cancelled() or (timeout_s is not None and now - t0 >= timeout_s):
                    os.close(fd)
                    self.release()
                    self.waited_s = round(now - t0, 3)
                    return False
                if last_notice is None or now - last_notice >= REPEAT_NOTICE_S:
                    last_notice = now
                    say(
                        f"{self.label or 'trial'}: GPU {index} is in use by "
                        f"{_describe(holder(index, self.folder))}; waiting for it (the lock is "
                        "freed when that sweep's engine stops or its process ends)"
                    )
                time.sleep(poll_s)
            self._held[index] = fd
            self._write_holder(fd)
        self.waited_s = round(time.monotonic() - t0, 3)
        return True

    def _write_holder(self, fd: int) -> None:
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "label": self.label,
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        # Best effort: who holds it is news for waiters, the flock is the lock.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)

    def release(self) -> None:
        """Give up every lock held. Closing (not LOCK_UN) releases ours only: a watchdog that
        shares the open file keeps the GPU locked until its engine is gone."""
        held, self._held = self._held, {}
        for fd in held.values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
