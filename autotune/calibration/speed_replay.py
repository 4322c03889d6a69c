"""Predict a real speed record's figures with the roofline (planner/perf.py): the record's launch
is planned as the engine would size it, and each measured point is priced by the tool that
measured it.

- bench_one_batch (SGLang): a static batch driven straight through the model runner. Its prefill
  is one forward over every prompt of the batch; its decode figure is the median step, taken at
  the median context (input + output / 2).
- bench_serving: requests through the server. Median TPOT is one decode step of the running
  requests (the concurrency, up to the engine's running limit) with the prompts that join the
  batch meanwhile (at concurrency above 1); TTFT (concurrency 1 only, else it holds queueing) is the
  request's chunked prefill plus its per-request overhead.
- bench_latency (vLLM): a static batch through LLM.generate: its prompts' prefill in steps of the
  token budget, then output_len - 1 decode steps.

A point on a speculative launch has its decode figure predicted only where the record states the
run's accept length (a modelled one would test the accept table, not the step time): a verify
step over that many tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotune.calibration.replay import card_of, gpu_of
from autotune.calibration.speed_records import SpeedPoint, SpeedRecord
from autotune.errors import AutotuneError
from autotune.planner.perf import DecodeSeq, PerfModel, PrefillChunk

METRICS = ("decode_ms", "prefill_ms", "e2e_s")


@dataclass(frozen=True)
class SpeedFigure:
    """One measured figure of a record's point with its prediction (None: why is `skipped`)."""

    record: SpeedRecord
    point: SpeedPoint
    metric: str
    measured: float
    predicted: float | None = None
    skipped: str | None = None

    @property
    def ratio(self) -> float | None:
        return None if self.predicted is None else self.predicted / self.measured


def _config(record: SpeedRecord) -> dict[str, Any]:
    config = {k: v for k, v in record.args.items() if v is not None}
    if record.kv_cache_dtype not in ("auto", ""):
        config.setdefault("kv_cache_dtype", record.kv_cache_dtype)
    return config


def perf_model(record: SpeedRecord) -> PerfModel | str:
    """The record's launch as the roofline sees it, or why it cannot be planned."""
    from autotune.planner.dispatch import plan_for

    card = card_of(record)
    if card is None:
        return f"no card for {record.card or record.model}"
    gpu = gpu_of(record)
    if gpu is None:
        return f"GPU {record.gpu!r} is not in the catalog (or its memory size is not stated)"
    config = _config(record)
    try:
        plan = plan_for(record.engine, card, gpu, config, version=record.version, tp=record.tp)
    except AutotuneError as exc:
        return f"planner refused: {exc}"
    return PerfModel(card, gpu, plan, config=config)


def _prefill_steps_s(model: PerfModel, batch: int, prompt: int, budget: int) -> float:
    """A batch of prompts prefilled in forwards of at most `budget` tokens, first come first."""
    t, left = 0.0, [prompt] * batch
    while any(left):
        room, chunks = budget, []
        for i, n in enumerate(left):
            if n and room:
                take = min(n, room)
                chunks.append(PrefillChunk(take, prompt - n))
                left[i], room = n - take, room - take
        t += model.prefill_step_s(chunks)
    return t


def running(model: PerfModel, point: SpeedPoint) -> int:
    """Requests decoding at once: the point's batch, capped by the engine's running limit
    (a serving client's extra requests wait in its queue)."""
    cap = model.plan.max_running_requests
    return min(point.batch, cap) if cap and cap > 0 else point.batch


def _decode_s(model: PerfModel, point: SpeedPoint) -> float:
    q = 1 + model.spec_draft_tokens if model.spec_family else 1
    ctx = point.input_len + point.output_len // 2
    return model.decode_step_s([DecodeSeq(ctx, q)] * running(model, point))


def _tpot_s(model: PerfModel, point: SpeedPoint) -> float:
    """A served request's time per output token at steady concurrency: the decode step of the
    running batch, plus the prompts that join it. Each running request is replaced once per
    output_len steps, so every step carries running x input / output prompt tokens, priced at
    what they add to a forward (the weights are read once for both)."""
    n = running(model, point)
    joining = math.ceil(n * point.input_len / point.output_len) if n > 1 else 0
    extra = 0.0
    if joining:
        with_prompts = model.prefill_step_s([PrefillChunk(joining, 0)])
        extra = max(with_prompts - model.prefill_step_s([PrefillChunk(1, 0)]), 0.0)
    return _decode_s(model, point) + extra


def predict(record: SpeedRecord, model: PerfModel, point: SpeedPoint, metric: str) -> float | str:
    """The point's `metric` as predicted, or why it is not."""
    speculative = bool(model.spec_family)
    if metric == "decode_ms":
        if speculative and point.accept_length is None:
            return "a speculative launch: the record states no accept length"
        step = _tpot_s(model, point) if record.tool == "bench_serving" else _decode_s(model, point)
        return step / (point.accept_length or 1.0) * 1e3
    if metric == "prefill_ms":
        if record.tool == "bench_one_batch":
            chunks = [PrefillChunk(point.input_len, 0)] * point.batch
            return model.prefill_step_s(chunks) * 1e3
        if record.tool == "bench_serving":
            if point.batch != 1:
                return "TTFT under concurrency holds queueing"
            return model.prefill_s(point.input_len) * 1e3
        return "bench_latency states no prefill figure"
    if speculative:
        return "a speculative launch: the record states no accept length"
    budget = model.plan.chunked_prefill_size
    budget = budget if budget and budget > 0 else point.batch * point.input_len
    prefill = _prefill_steps_s(model, point.batch, point.input_len, budget)
    return prefill + (point.output_len - 1) * _decode_s(model, point)


def replay_speeds(record: SpeedRecord) -> list[SpeedFigure]:
    """Every measured figure of the record, predicted where the launch can be planned."""
    model = perf_model(record)
    figures: list[SpeedFigure] = []
    for point in record.points:
        for metric in METRICS:
            measured = getattr(point, metric)
            if measured is None:
                continue
            if isinstance(model, str):
                figures.append(SpeedFigure(record, point, metric, measured, skipped=model))
                continue
            got = predict(record, model, point, metric)
            if isinstance(got, str):
                figures.append(SpeedFigure(record, point, metric, measured, skipped=got))
            else:
                figures.append(SpeedFigure(record, point, metric, measured, predicted=got))
    return figures


def log_error(figure: SpeedFigure) -> float | None:
    """|log(predicted / measured)|, the error both directions share."""
    r = figure.ratio
    return None if r is None or r <= 0 else abs(math.log(r))
