"""What every engine's failure classifier shares: ordered rules (a message pattern -> a class
and a reason), argparse's usage error on exit status 2, and the generic classes once no
engine-specific message matched (never ready, died while serving, or exited before ready, with
the exit status spelled out). Each engine gives its data: its rules, how it words a rule's
detail, its log prefix, the steps of its own between the rules and the generic classes."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune.engines.base import Failure, FailureClass

MAX_EVIDENCE = 600
AFTER_READY = " (after it was serving)"
# A line naming a Python exception (SGLang's and vLLM's tracebacks).
PYTHON_ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception)\b")


@dataclass(frozen=True)
class FailureRule:
    """An engine message and what it means; `reason` may hold `{detail}` (from the line)."""

    cls: FailureClass
    pattern: re.Pattern[str]
    reason: str


def clip(text: str) -> str:
    """Evidence text cut to MAX_EVIDENCE characters."""
    return text if len(text) <= MAX_EVIDENCE else text[: MAX_EVIDENCE - 3] + "..."


def usage_detail(line: str) -> str:
    """What argparse said after `error: `."""
    return line.split("error: ", 1)[-1].strip()


# A step of an engine's own: (log lines, was_ready) -> a Failure, or None to go on.
Step = Callable[[list[str], bool], Failure | None]


@dataclass(frozen=True)
class FailureClassifier:
    """One engine's classifier: its rules in order (the first that matches any line wins), its
    own steps after them, argparse's usage error on exit status 2 (when `usage_engine` names
    the engine), then the generic classes with `last_error`'s evidence.

    detail: the `{detail}` of a rule's reason, from the matched line.
    evidence: a matched line as the Failure's evidence (prefix stripped, clipped).
    last_error: the evidence for the generic classes, from all lines and the exit status.
    """

    rules: Sequence[FailureRule]
    detail: Callable[[FailureRule, str], str]
    evidence: Callable[[str], str]
    last_error: Callable[[list[str], int | None], str | None]
    hang_hints: str
    engine: str = "the engine"
    usage_engine: str | None = None
    steps: Sequence[Step] = ()

    def classify(
        self,
        log_text: str,
        returncode: int | None,
        *,
        was_ready: bool,
        timed_out: bool = False,
    ) -> Failure:
        """Classify a launch that did not serve, or a server that died.

        Args:
            log_text: the engine's combined stdout/stderr (all its processes).
            returncode: exit status (None while still running; negative = killed by a signal).
            was_ready: the server had answered /health (with 200) before it failed.
            timed_out: it never became ready before the deadline.
        """
        lines = log_text.splitlines()
        for step in (self.by_rules, *self.steps):
            found = step(lines, was_ready)
            if found is not None:
                return found
        if returncode == 2 and not was_ready:
            found = self.usage_failure(lines)
            if found is not None:
                return found
        return fallback_failure(
            self.last_error(lines, returncode),
            returncode,
            was_ready=was_ready,
            timed_out=timed_out,
            engine=self.engine,
            hang_hints=self.hang_hints,
        )

    def by_rules(self, lines: list[str], was_ready: bool) -> Failure | None:
        for rule in self.rules:
            hit = next((ln for ln in lines if rule.pattern.search(ln)), None)
            if hit is None:
                continue
            reason = rule.reason.format(detail=self.detail(rule, hit))
            if was_ready:
                reason += AFTER_READY
            return Failure(cls=rule.cls, reason=reason, evidence=self.evidence(hit))
        return None

    def usage_failure(self, lines: list[str]) -> Failure | None:
        """argparse's last `error:` line (it exits 2), when the engine has a usage message."""
        if self.usage_engine is None:
            return None
        usage = next((ln for ln in reversed(lines) if "error:" in ln), None)
        if usage is None:
            return None
        return Failure(
            cls=FailureClass.BAD_ARGUMENTS,
            reason=f"{self.usage_engine} rejected the command line ({usage_detail(usage)}): "
            "check the flags",
            evidence=self.evidence(usage),
        )


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
