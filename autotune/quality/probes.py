"""The probe set: a few seeded prompts of each kind of text the sweep's workloads use (code,
prose, extraction) and one long-context prompt, the same for every configuration of a sweep.

Prompts come from autotune.bench.prompts (seeded, no tokenizer needed) and end with an
instruction-like tail so that a model continues them; what matters is only that the baseline
and the candidate see the same text.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.bench.prompts import TextKind, make_text

KINDS: tuple[TextKind, ...] = ("code", "prose", "extraction")


@dataclass(frozen=True)
class Probe:
    id: str
    kind: str  # code, prose, extraction, long
    prompt: str


def probe_set(
    n: int = 8, *, seed: int = 0, tokens: int = 256, long_tokens: int = 2048
) -> list[Probe]:
    """`n` probes: the three text kinds in turn, every fourth a long-context prose prompt."""
    out: list[Probe] = []
    for i in range(n):
        if i % 4 == 3:
            kind, text_kind, size = "long", "prose", long_tokens
        else:
            text_kind = KINDS[(i - i // 4) % 3]
            kind, size = text_kind, tokens
        text = make_text(text_kind, size, f"quality:{seed}:{i}")  # type: ignore[arg-type]
        out.append(Probe(id=f"q{i}-{kind}", kind=kind, prompt=text))
    return out
