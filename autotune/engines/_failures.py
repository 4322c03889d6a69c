"""What every engine's failure classifier does once no engine-specific message matched:
never ready, died while serving, or exited before ready, with the exit status spelled out."""

from __future__ import annotations

import signal

from autotune.engines.base import Failure, FailureClass


def exit_text(returncode: int | None) -> str:
    if returncode is None:
        return "no exit code"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def fallback_failure(
    evidence: str | None,
    returncode: int | None,
    *,
    was_ready: bool,
    timed_out: bool,
    engine: str,
    hang_hints: str,
) -> Failure:
    """The generic classes, in the order that decides them: timeout, then crash after ready."""
    if timed_out and not was_ready:
        return Failure(
            cls=FailureClass.NEVER_READY,
            reason="not ready before the startup deadline: raise the timeout or look for a hang "
            f"({hang_hints}) in the log",
            evidence=evidence,
        )
    if was_ready:
        return Failure(
            cls=FailureClass.CRASH_AFTER_READY,
            reason=f"the server died while serving ({exit_text(returncode)}): see the evidence",
            evidence=evidence,
        )
    return Failure(
        cls=FailureClass.CRASH,
        reason=f"{engine} exited before it was ready ({exit_text(returncode)}): see the evidence",
        evidence=evidence,
    )
