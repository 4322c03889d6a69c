"""The one exception tree of autotune; the CLI maps each branch to an exit code.

    AutotuneError                      exit 1
    ├── UserError                      exit 2   bad input: fix the file, flag or name
    │   ├── ConfigError                         a spec/space/flag value is invalid
    │   │   └── CompanionFieldError             a field set without the other field it needs
    │   ├── UnknownNameError                    unknown GPU, model card, engine (with suggestions)
    │   ├── ModelLoadError                      a model folder or checkpoint cannot be read
    │   └── UnsupportedFlagError                the engine version has no such flag
    ├── HardwareError                  exit 3   no NVIDIA driver / GPU not detectable
    ├── EngineError                    exit 4   an engine process failed
    │   ├── EngineLaunchError                   exited before ready (carries argv, returncode, log tail)
    │   │   └── PortInUseError                  its port was taken before spawn (carries port, host)
    │   ├── EngineStartupTimeout                never became ready within the deadline
    │   └── EngineCrashed                       died after it was ready
    ├── BenchmarkError                 exit 5   the benchmark could not run or the server misbehaved
    ├── StorageError                   exit 6   the database could not be read or written
    └── TrialInfeasible                exit 7   the planner rejected a configuration (carries reasons);
                                                `autotune sweep` exits 7 too when no trial met the
                                                constraints or fit (SweepOutcome.infeasible)

Messages state what was expected and what was received, and name the file, field or flag.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


class AutotuneError(Exception):
    """Base of every error autotune raises on purpose."""

    exit_code = 1


class UserError(AutotuneError):
    """The user's input is wrong; the message says where and what would be valid."""

    exit_code = 2


class ConfigError(UserError, ValueError):
    """A configuration file, field or flag value is invalid."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        where = ": ".join(p for p in (source, field) if p)
        super().__init__(f"{where}: {message}" if where else message)


class CompanionFieldError(ConfigError):
    """A field that means something only beside another field's value was set without it
    (the searched companion may still supply it, so a spec check lets it pass)."""


class UnknownNameError(UserError, LookupError):
    """A name (GPU, model card, engine, parameter) is not known; suggests close matches."""

    def __init__(self, kind: str, name: str, valid: Iterable[str]):
        self.kind = kind
        self.name = name
        self.valid = sorted(valid)
        super().__init__(f"unknown {kind} {name!r}{did_you_mean(name, self.valid)}")


class ModelLoadError(UserError):
    """A model folder, config.json or safetensors file cannot be read."""


class UnsupportedFlagError(UserError):
    """The engine version does not have a flag the configuration needs."""


class HardwareError(AutotuneError):
    """The GPU cannot be detected or does not match the catalog."""

    exit_code = 3


class EngineError(AutotuneError):
    """An engine process failed."""

    exit_code = 4

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str] | None = None,
        returncode: int | None = None,
        log_tail: str = "",
    ):
        self.command = list(command) if command else None
        self.returncode = returncode
        self.log_tail = log_tail
        super().__init__(message)


class EngineLaunchError(EngineError):
    """The engine exited (or could not be spawned) before it became ready."""


class PortInUseError(EngineLaunchError):
    """The engine's port was already bound by another process, so nothing was spawned.

    Raised by our own pre-spawn check; an engine that prints "Address already in use" itself is
    classified from its log by the adapter instead.
    """

    def __init__(
        self,
        message: str,
        *,
        port: int,
        host: str,
        command: Sequence[str] | None = None,
    ):
        self.port = port
        self.host = host
        super().__init__(message, command=command)


class EngineStartupTimeout(EngineError):
    """The engine did not become ready before the deadline."""


class EngineCrashed(EngineError):
    """The engine died after it had become ready."""


class BenchmarkError(AutotuneError):
    """A benchmark could not be completed or the server answered malformed data."""

    exit_code = 5


class StorageError(AutotuneError):
    """The results database could not be opened, read or written."""

    exit_code = 6


class TrialInfeasible(AutotuneError):
    """The planner rejected a configuration before launch."""

    exit_code = 7

    def __init__(self, reasons: Sequence[str]):
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons) or "infeasible")


def locate(exc: UserError, field: str) -> UserError:
    """`exc` with the spec field (or flag) that held the bad value named first, unless it
    already names one; its class (and exit code) are kept."""
    if getattr(exc, "field", None):
        return exc
    exc.field = field  # type: ignore[attr-defined]
    exc.args = (f"{field}: {exc}", *exc.args[1:])
    return exc


def did_you_mean(name: str, valid: Sequence[str]) -> str:
    """Return ' (did you mean X?); valid: ...' for an error message."""
    low = name.lower()
    starts = [v for v in valid if low and v.lower().startswith(low)]
    close = (
        starts
        + [c for c in difflib.get_close_matches(name, valid, n=3, cutoff=0.5) if c not in starts]
    )[:3]
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    shown = ", ".join(valid[:30]) + (", ..." if len(valid) > 30 else "")
    return f"{hint} valid: {shown}"
