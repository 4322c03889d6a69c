"""The decode ceiling: bandwidth over the bytes one decode step reads per token
(planner.perf), and how close the winner's single-stream decode gets."""

from __future__ import annotations

from typing import Any

from autotune.planner.dispatch import engine_label
from autotune.report.collect.data import DecodeCeiling, ReportData, TrialInfo
from autotune.report.collect.provenance import gpu_spec

# The field that turns speculative decoding on: SGLang, vLLM (the search space's), llama.cpp.
SPECULATIVE_FIELDS = ("speculative_algorithm", "speculative_method", "spec_type")


def decode_ceiling(data: ReportData) -> DecodeCeiling | None:
    """Bandwidth over the bytes one decode step reads per token (planner.perf), and how close
    the winner's single-stream decode gets."""
    w = data.winner
    if w is None:
        return None
    from autotune.errors import AutotuneError

    out = DecodeCeiling()
    spec_alg = next((w.config[k] for k in SPECULATIVE_FIELDS if w.config.get(k)), None)
    out.speculative = str(spec_alg) if spec_alg else None
    gpu = gpu_spec(data.provenance.gpu)
    try:
        _roofline(data, w, gpu, out)
    except (AutotuneError, LookupError, ValueError) as exc:
        out.note = f"no ceiling: {exc}"
    best = _measured_decode(w)
    if best is not None:
        out.measured_tok_s, out.measured_scenario = best[1], best[2]
        if out.ceiling_tok_s:
            out.share = best[1] / out.ceiling_tok_s
    return out


def _roofline(data: ReportData, w: TrialInfo, gpu: Any, out: DecodeCeiling) -> None:
    """Fill the ceiling, the bandwidth and the bytes read per token from the planner's
    performance model of the winner (AutotuneError, LookupError or ValueError when it cannot
    be built)."""
    from autotune.models.card import ModelCard
    from autotune.planner.dispatch import (
        default_version,
        load_target_model,
        plan_for,
        scheduler_plan,
    )
    from autotune.planner.perf import PerfModel, perf_summary
    from autotune.planner.sglang import Plan

    engine = data.provenance.engine
    target = load_target_model(engine, data.provenance.model)
    if not isinstance(target, ModelCard):
        raise LookupError(
            f"the roofline model reads a model card, and {engine_label(engine)} served a GGUF file"
        )
    if gpu is None:
        raise LookupError(f"{data.provenance.gpu} is not a catalogued GPU")
    plan = (
        Plan.model_validate(w.plan)
        if w.plan
        else plan_for(
            engine,
            target,
            gpu,
            dict(w.config),
            version=data.provenance.engine_version or default_version(engine),
            tp=data.tp,
        )
    )
    model = PerfModel(target, gpu, scheduler_plan(plan), config=dict(w.config))
    out.ceiling_tok_s = float(perf_summary(model)["decode_ceiling_tok_s"])
    out.bandwidth_gbs = gpu.effective_bandwidth_gbs
    out.weight_read_gb = round(model.weight_read_bytes / 1e9, 2)


def _measured_decode(w: TrialInfo) -> tuple[int, float, str] | None:
    """(rank, decode tok/s, scenario) of the winner's scenario nearest a single-stream decode:
    a decode scenario before any other, concurrency 1 before higher."""
    best: tuple[int, float, str] | None = None
    for name, s in w.scenarios.items():
        dec = s.main.mean if s.main.figure == "decode_tok_s" else s.figures.get("decode_tok_s")
        if dec is None:
            continue
        rank = (0 if s.kind == "decode" else 1) + (0 if (s.concurrency or 1) == 1 else 2)
        if best is None or rank < best[0]:
            best = (rank, dec, name)
    return best
