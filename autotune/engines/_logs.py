"""The loop SGLang's and vLLM's startup-log parsers share: rank 0's messages in order, the ready
line, the simulator's marker, the figures each engine's readers take from a line, and the
warnings worth keeping. Each engine gives its data: its readers (a pattern and what it takes),
its marker texts and whether a line holds one figure only."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

Figures = dict[str, object]

# What log collectors put before an engine's own line, when people paste what they saw: a
# `docker compose` service column (`svc-1  | `) and a `docker logs -t` RFC 3339 timestamp.
_OUTER_RE = re.compile(
    r"^(?:[\w.-]+\s*\| )?(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})? )?"
)


def strip_outer(line: str) -> str:
    """The engine's own line without a collector's prefix (unchanged when there is none)."""
    return _OUTER_RE.sub("", line, count=1)


# What a reader takes from a matched line into the figures.
Take = Callable[[Figures, re.Match[str]], None]
# The patterns a reader tries in order (the first that matches is read) and what it takes.
Reader = tuple[tuple[re.Pattern[str], ...], Take]


@dataclass
class StartupScan:
    """What the loop found: the readers' figures, readiness, the simulator's marker, warnings."""

    values: Figures = field(default_factory=dict)
    ready: bool = False
    simulated: bool = False
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StartupFormat:
    """One engine's startup log.

    exclusive: a line holds one figure at most (the first reader that matches takes it, and a
        line it took is not a warning); otherwise every reader reads every line, and a line with
        figures may be a warning too.
    """

    ready_text: str
    simulated_marker: str
    readers: Sequence[Reader]
    warning_markers: Sequence[str]
    exclusive: bool

    def scan(self, messages: Iterable[str]) -> StartupScan:
        """Read rank 0's messages (log prefixes already stripped)."""
        out = StartupScan()
        for msg in messages:
            if self.ready_text in msg:
                out.ready = True
            elif self.simulated_marker in msg:
                out.simulated = True
            elif not (self.read(msg, out.values) and self.exclusive):
                self.keep_warning(msg, out.warnings)
        return out

    def read(self, msg: str, values: Figures) -> bool:
        """Apply the readers to one message; whether any matched."""
        matched = False
        for patterns, take in self.readers:
            m = first_match(patterns, msg)
            if m is None:
                continue
            take(values, m)
            matched = True
            if self.exclusive:
                break
        return matched

    def keep_warning(self, msg: str, warnings: list[str]) -> None:
        if any(marker in msg for marker in self.warning_markers) and msg.strip() not in warnings:
            warnings.append(msg.strip())


def first_match(patterns: Iterable[re.Pattern[str]], text: str) -> re.Match[str] | None:
    for pattern in patterns:
        if (m := pattern.search(text)) is not None:
            return m
    return None


def keep_first(**fields: tuple[str, Callable[[str], object]]) -> Take:
    """A reader's action: each field from a group of the match, converted, unless already set
    (the first line wins)."""

    def take(values: Figures, m: re.Match[str]) -> None:
        for key, (group, convert) in fields.items():
            values.setdefault(key, convert(m[group]))

    return take


def add_to(values: Figures, key: str, amount: float) -> None:
    """Sum a figure over the lines that report one (a draft model's weights, several graphs)."""
    before = values.get(key)
    values[key] = (before if isinstance(before, float) else 0.0) + amount


def add_up(key: str, group: str) -> Take:
    """A reader's action: add the match's `group` (a float) to the figure `key` (add_to)."""

    def take(values: Figures, m: re.Match[str]) -> None:
        add_to(values, key, float(m[group]))

    return take
