"""How far a candidate's greedy answers drift from the reference's.

Per probe: the first position where the greedy tokens differ, the share of the reference's
tokens the candidate reproduces up to there (after a divergence the two texts continue from
different prefixes, so later positions say nothing), and the mean KL divergence of the top-k
next-token distributions over the positions both answered from the same prefix.

KL over top-k: the reference's top-k tokens, renormalised; a token missing from the candidate's
top-k is given the candidate's smallest listed probability (an upper bound of what it gave it),
then renormalised over the same tokens. Zero for identical distributions; it grows with the
probability mass the candidate moved.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Answer:
    """One greedy answer: the generated tokens and, per position, the top-k log-probabilities
    (token -> logprob; empty where the engine gave none)."""

    tokens: tuple[str, ...]
    top: tuple[Mapping[str, float], ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"tokens": list(self.tokens), "top": [dict(t) for t in self.top]}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Answer:
        tokens = data.get("tokens") or []
        top = data.get("top") or []
        assert isinstance(tokens, list) and isinstance(top, list)
        return cls(tuple(str(t) for t in tokens), tuple(dict(t) for t in top))


@dataclass(frozen=True)
class ProbeDrift:
    probe: str
    length: int  # reference tokens
    first_divergence: int | None  # None: the candidate reproduced every token
    agreement: float  # share of the reference's tokens reproduced before the first divergence
    kl: float | None  # mean top-k KL before the divergence; None without log-probabilities


def top_k_kl(ref: Mapping[str, float], cand: Mapping[str, float]) -> float | None:
    """KL(ref || cand) over the reference's top-k tokens (module docstring)."""
    if not ref or not cand:
        return None
    floor = min(cand.values())
    p = {t: math.exp(lp) for t, lp in ref.items()}
    q = {t: math.exp(cand.get(t, floor)) for t in ref}
    sp, sq = sum(p.values()), sum(q.values())
    if sp <= 0 or sq <= 0:
        return None
    kl = 0.0
    for t in ref:
        pt, qt = p[t] / sp, q[t] / sq
        if pt > 0:
            kl += pt * math.log(pt / qt)
    return max(kl, 0.0)


def compare(probe: str, ref: Answer, cand: Answer) -> ProbeDrift:
    n = len(ref.tokens)
    first = next(
        (i for i in range(n) if i >= len(cand.tokens) or cand.tokens[i] != ref.tokens[i]), None
    )
    same = n if first is None else first
    kls = [
        k
        for i in range(min(same + 1, n, len(ref.top), len(cand.top)))
        if (k := top_k_kl(ref.top[i], cand.top[i])) is not None
    ]
    return ProbeDrift(
        probe=probe,
        length=n,
        first_divergence=first,
        agreement=same / n if n else 1.0,
        kl=statistics.fmean(kls) if kls else None,
    )


@dataclass(frozen=True)
class Drift:
    """A configuration's drift over the probe set."""

    token_agreement: float  # mean over probes
    min_agreement: float
    first_divergence: int | None  # earliest over probes (None: no probe diverged)
    mean_kl: float | None
    worst_probe: str | None
    probes: list[ProbeDrift] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "token_agreement": round(self.token_agreement, 4),
            "min_agreement": round(self.min_agreement, 4),
            "first_divergence": self.first_divergence,
            "mean_kl": None if self.mean_kl is None else round(self.mean_kl, 6),
            "worst_probe": self.worst_probe,
            "probes": [vars(p) for p in self.probes],
        }


def drift(ref: Mapping[str, Answer], cand: Mapping[str, Answer]) -> Drift:
    """The drift of `cand` from `ref` over the probes both answered (by probe id)."""
    per: Sequence[ProbeDrift] = [compare(p, ref[p], cand[p]) for p in ref if p in cand]
    if not per:
        raise ValueError("no probe answered by both the reference and the candidate")
    worst = min(per, key=lambda d: (d.agreement, -(d.kl or 0.0)))
    divs = [d.first_divergence for d in per if d.first_divergence is not None]
    kls = [d.kl for d in per if d.kl is not None]
    return Drift(
        token_agreement=statistics.fmean(d.agreement for d in per),
        min_agreement=min(d.agreement for d in per),
        first_divergence=min(divs) if divs else None,
        mean_kl=statistics.fmean(kls) if kls else None,
        worst_probe=worst.probe if worst.agreement < 1.0 or (worst.kl or 0) > 0 else None,
        probes=list(per),
    )
