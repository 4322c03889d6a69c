"""The guard in a sweep: which trials answer the probe set, what a worker sends and measures,
and the constraints a drift puts on a trial.

The reference is the baseline (trial 0), else, when it failed, the first completed trial whose
configuration has no lossy knob: it answers the probes and every later guarded trial is compared
with it. With several workers a trial that finishes before the baseline waits for it
(sweep/recording.held_for_reference). Guarded: every trial while there is no reference yet and
it is lossless (it may become the reference), every trial with a lossy knob, and every finalist
re-run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from autotune.quality.compare import Answer, Drift, drift
from autotune.quality.lossy import lossy_fields, speculative_only
from autotune.quality.probes import Probe, probe_set

SCENARIO = "quality"  # the measurement's scenario name; figures quality.token_agreement, ...
# The reference's figures: its answers compared with themselves.
IDENTICAL: dict[str, float | None] = {
    "token_agreement": 1.0,
    "min_agreement": 1.0,
    "first_divergence": None,
    "mean_kl": 0.0,
}


class QualityProbe(BaseModel):
    """What a worker runs after the workload (TrialSpec.quality)."""

    probes: list[dict[str, str]]
    max_tokens: int
    top_k: int
    reference: dict[str, dict[str, Any]] | None = Field(
        None, description="probe id -> the reference's answer (Answer JSON); None: none yet"
    )

    def probe_list(self) -> list[Probe]:
        return [Probe(**p) for p in self.probes]

    def reference_answers(self) -> dict[str, Answer] | None:
        if self.reference is None:
            return None
        return {k: Answer.from_json(v) for k, v in self.reference.items()}


# Probe prompts stay this far below the workload's longest request: the estimate counts words,
# a real tokenizer splits some (2,149 tokens for a 2,048-token estimate on llama.cpp's SPM).
PROMPT_MARGIN = 0.7


def probe_for(
    spec: Any, engine: str, config: Mapping[str, Any], reference: Mapping[str, Any] | None,
    *, finalist: bool, longest_request: int = 0,
) -> QualityProbe | None:  # fmt: skip
    """The probe a trial of `config` answers, or None when the guard leaves it alone. Its
    prompts fit what the workload already asks of every trial (`longest_request` tokens,
    prompt and answer), so a configuration that serves the workload can answer them."""
    q = spec.quality
    if not q.enabled:
        return None
    lossy = bool(lossy_fields(engine, config))
    if not (lossy or finalist or reference is None):
        return None
    room = int((longest_request - q.max_tokens) * PROMPT_MARGIN) if longest_request else 2048
    room = max(room, 16)
    probes = probe_set(
        q.probes, seed=spec.search.seed, tokens=min(256, room), long_tokens=min(2048, room)
    )
    return QualityProbe(
        probes=[vars(p) for p in probes],
        max_tokens=q.max_tokens,
        top_k=q.top_k,
        reference=dict(reference) if reference is not None else None,
    )


def measurement(
    answers: Mapping[str, Answer] | None,
    reference: Mapping[str, Answer] | None,
    *,
    error: str | None = None,
) -> dict[str, Any]:
    """The `quality` measurement of a trial: its answers, and its drift from the reference
    where there is one (a trial without a reference is a reference candidate: no drift)."""
    figures: dict[str, float | None] = {}
    result: dict[str, Any] = {"answers": None, "drift": None, "error": error}
    if answers is not None:
        result["answers"] = {k: a.to_json() for k, a in answers.items()}
    if answers is not None and reference is not None:
        d = drift(reference, answers)
        result["drift"] = d.to_json()
        figures = figures_of(d)
    return {"scenario": SCENARIO, "kind": SCENARIO, "figures": figures, "result": result}


def figures_of(d: Drift) -> dict[str, float | None]:
    return {
        "token_agreement": d.token_agreement,
        "min_agreement": d.min_agreement,
        "first_divergence": None if d.first_divergence is None else float(d.first_divergence),
        "mean_kl": d.mean_kl,
    }


def constraints(
    spec: Any, engine: str, config: Mapping[str, Any], result: Mapping[str, Any] | None
) -> dict[str, float]:
    """Optuna constraints (> 0: broken) of a guarded trial's drift: a lossy trial whose
    answers could not be compared is infeasible (the guard cannot vouch for it)."""
    q = spec.quality
    if not q.enabled or not lossy_fields(engine, config):
        return {}
    d = (result or {}).get("drift")
    if not isinstance(d, Mapping):
        return {"quality_unverified": 1.0}
    out: dict[str, float] = {}
    kl = d.get("mean_kl")
    if q.max_kl is not None:
        out["quality_kl"] = 1.0 if kl is None and not q.min_token_agreement else (
            0.0 if kl is None else (float(kl) - q.max_kl) / max(q.max_kl, 1e-9)
        )  # fmt: skip
    if q.min_token_agreement is not None:
        agree = float(d.get("token_agreement") or 0.0)
        out["quality_agreement"] = (q.min_token_agreement - agree) / max(
            q.min_token_agreement, 1e-9
        )
    return out


def defect(engine: str, config: Mapping[str, Any], result: Mapping[str, Any] | None) -> str | None:
    """Speculative decoding is its only lossy knob, yet a greedy answer diverged: an engine
    defect (greedy verification is lossless), with the evidence."""
    d = (result or {}).get("drift")
    if not speculative_only(engine, config) or not isinstance(d, Mapping):
        return None
    if d.get("first_divergence") is None:
        return None
    return (
        f"greedy answers diverge from the reference at token {d['first_divergence']} "
        f"(probe {d.get('worst_probe')}) although speculative decoding verifies greedily"
    )


def run_probe(
    probe: QualityProbe, base_url: str, *, model: str, api: str, api_key: str | None = None
) -> dict[str, Any]:
    """Answer the probe set on a serving engine; the `quality` measurement (an engine that
    cannot answer with log-probabilities gives a measurement with its error)."""
    import time

    from autotune.quality.client import ProbeError, fetch_answers

    t0 = time.monotonic()
    try:
        answers = fetch_answers(
            base_url,
            probe.probe_list(),
            model=model,
            api=api,
            max_tokens=probe.max_tokens,
            top_k=probe.top_k,
            api_key=api_key,
        )
    except ProbeError as exc:
        return measurement(None, None, error=str(exc))
    m = measurement(answers, probe.reference_answers())
    m["result"]["seconds"] = round(time.monotonic() - t0, 3)  # the guard's cost in this trial
    return m


def simulated_answers(probe: QualityProbe, config: Mapping[str, Any]) -> dict[str, Any]:
    """The `quality` measurement as the simulated engine answers (analytic mode, no HTTP)."""
    from autotune.sim import tokens
    from autotune.sim.quality import answer, lossiness

    noise = lossiness(config)
    answers = {}
    for p in probe.probe_list():
        pieces, _, tops = answer(tokens.encode(p.prompt), probe.max_tokens, probe.top_k, noise)
        answers[p.id] = Answer(tuple(pieces), tuple(tops))
    return measurement(answers, probe.reference_answers())
