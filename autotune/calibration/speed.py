"""Speed calibration: serving-benchmark runs against the roofline (planner/perf.py).

Each run of a benchmark file (calibration/bench.py) is compared with the PerfModel of its launch
(GPU, engine, model, and the configuration from the startup log given with it, the file's own
SGLang server_info, or --set flags):

- decode: measured tok/s per stream (1000 / mean TPOT; ITL where the tool wrote no TPOT) over the
  roofline's decode_tok_s(streams, depth) / streams, at the run's concurrency and the mean
  context while decoding (input + output / 2). With speculative decoding the server's reported
  accept length replaces the modelled one, so the factor is the step speed alone. TPOT under
  concurrency also holds the other requests' prefill chunks; the factor absorbs them.
- prefill: only from runs with one request at a time (a concurrent request's TTFT holds
  queueing): the factor f that makes the model's TTFT (request overhead + prefill steps / f)
  equal the measured mean TTFT.

PerfModel(decode_eff=, prefill_eff=) divides its decode and prefill step times by the factors, so
a factor is measured speed over built-in speed. Several runs combine as exp(median(log ratio)).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.calibration.bench import BenchRun, read_bench
from autotune.calibration.calibrate import ENGINES, LoggedLaunch, planner_config
from autotune.errors import ConfigError
from autotune.planner.perf import PerfModel

PHASES = ("decode", "prefill")
# /server_info keys that are the scheduler's or the server's state, not ServerArgs fields
_NOT_ARGS = frozenset(
    {"status", "max_total_num_tokens", "max_req_input_len", "startup_time", "internal_states",
     "version", "kv_events"}
)  # fmt: skip


@dataclass(frozen=True)
class SpeedSample:
    """One run's phase: the roofline's speed against the measured one."""

    phase: str
    run_index: int
    streams: int
    input_len: int
    output_len: int
    context_len: int
    predicted_tok_s: float
    measured_tok_s: float
    ratio: float  # the efficiency factor this run asks for


@dataclass(frozen=True)
class SpeedCalibration:
    """One benchmark file's lesson for the speed model of one (engine, GPU, model)."""

    engine: str
    engine_version: str
    gpu: str
    model: str
    tp: int
    config_from: str
    samples: tuple[SpeedSample, ...]
    skipped: tuple[str, ...]
    source: str
    source_sha256: str

    def factor(self, phase: str) -> tuple[float | None, int]:
        return combine(s.ratio for s in self.samples if s.phase == phase)

    def rows(self) -> list[dict[str, Any]]:
        """The database rows (one per sample), with the file's provenance."""
        head = {
            "engine": self.engine,
            "engine_version": self.engine_version,
            "gpu": self.gpu,
            "model": self.model,
            "tp": self.tp,
            "source": self.source,
            "source_sha256": self.source_sha256,
        }
        return [{**head, **s.__dict__} for s in self.samples]


def combine(ratios: Iterable[float]) -> tuple[float | None, int]:
    """exp(median(log ratio)) and how many ratios fed it: one odd run moves it little."""
    logs = [math.log(r) for r in ratios if r > 0]
    if not logs:
        return None, 0
    return round(math.exp(statistics.median(logs)), 4), len(logs)


def stored_factors(rows: Sequence[Any], *, tp: int | None = None) -> dict[str, Any]:
    """The combined factors of stored rows (attributes phase, ratio, tp, source): the rows of
    this TP size where there are any."""
    same = [r for r in rows if tp is None or r.tp == tp] or list(rows)
    out: dict[str, Any] = {}
    for phase in PHASES:
        f, n = combine(r.ratio for r in same if r.phase == phase)
        out[f"{phase}_efficiency"] = f
        out[f"{phase}_runs"] = n
    out["sources"] = sorted({r.source for r in same})
    return out


def calibrated_speed(perf: PerfModel, factors: Mapping[str, Any]) -> dict[str, Any]:
    """The roofline's summary figures with stored factors applied (`plan --calibrated`)."""
    from autotune.planner.perf import PERF_PROMPT_LENGTHS

    d = factors.get("decode_efficiency") or 1.0
    p = factors.get("prefill_efficiency") or 1.0
    cal = perf.with_efficiency(decode_eff=d, prefill_eff=p)
    return {
        **factors,
        "decode_tok_s": round(cal.decode_tok_s(1), 2),
        "decode_tok_s_2streams": round(cal.decode_tok_s(2), 2),
        "prefill_tok_s": {str(n): round(cal.prefill_tok_s(n), 1) for n in PERF_PROMPT_LENGTHS},
    }


def fit_runs(runs: Sequence[BenchRun], perf: PerfModel) -> tuple[list[SpeedSample], list[str]]:
    """Per-run decode and prefill ratios, and why runs gave none."""
    samples: list[SpeedSample] = []
    skipped: list[str] = []
    for r in runs:
        streams = max(1, round(r.streams))
        inp, out = round(r.input_len), round(r.output_len)
        if r.tpot_ms is not None and r.output_len > 1:
            depth = round(r.input_len + r.output_len / 2)
            predicted = perf.decode_tok_s(streams, depth) / streams
            if r.accept_length and perf.spec_family:
                predicted *= r.accept_length / perf.accept_length("prose")
            measured = 1000.0 / r.tpot_ms
            samples.append(
                SpeedSample(
                    "decode",
                    r.index,
                    streams,
                    inp,
                    out,
                    depth,
                    round(predicted, 3),
                    round(measured, 3),
                    round(measured / predicted, 5),
                )  # fmt: skip
            )
        else:
            skipped.append(f"run {r.index}: no decode (no TPOT or ITL, or one output token)")
        if r.ttft_ms is None or inp < 1:
            skipped.append(f"run {r.index}: no prefill (no TTFT)")
            continue
        if streams > 1:
            skipped.append(f"run {r.index}: no prefill ({streams} concurrent requests queue)")
            continue
        total = perf.prefill_s(inp)
        steps = total - perf.request_overhead_s
        ttft = r.ttft_ms / 1000.0
        if ttft <= perf.request_overhead_s or steps <= 0:
            skipped.append(f"run {r.index}: no prefill (TTFT within the request overhead)")
            continue
        f = steps / (ttft - perf.request_overhead_s)
        samples.append(
            SpeedSample(
                "prefill",
                r.index,
                1,
                inp,
                out,
                inp,
                round(inp / total, 2),
                round(inp / ttft, 2),
                round(f, 5),
            )  # fmt: skip
        )
    return samples, skipped


def calibrate_bench(
    path: Path,
    *,
    model: str,
    gpu: str,
    launch: LoggedLaunch | None = None,
    engine: str | None = None,
    version: str | None = None,
    tp: int | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> SpeedCalibration:
    """Fit one benchmark file's runs against the roofline of its launch.

    Raises:
        ConfigError: not a benchmark result, the engine or version cannot be told, or the model
            has no card for the roofline.
    """
    from autotune.hardware.detect import resolve_gpu
    from autotune.models.card import ModelCard
    from autotune.planner.dispatch import load_target_model, plan_for, scheduler_plan

    runs = read_bench(path)
    info = next((r.server_info for r in runs if r.server_info), None)
    eng = engine or (launch.engine if launch else None) or _engine_of(runs[0])
    if eng not in ENGINES:
        raise ConfigError(f"{path}: cannot tell the engine; pass --engine", field="--engine")
    ver = version or (launch.version if launch else None) or _info_version(info)
    if ver is None:
        raise ConfigError(
            f"{path}: the {eng} version is in neither the file nor a startup log; pass "
            "--engine-version",
            field="--engine-version",
        )
    config, config_from = _launch_config(launch, info, overrides)
    ranks = tp or int(config.get("tp_size") or config.get("tensor_parallel_size") or 1)
    card = load_target_model(eng, model)
    if not isinstance(card, ModelCard):
        raise ConfigError(f"{model}: the roofline needs a model card", field="--model")
    spec = resolve_gpu(gpu)
    cfg = planner_config(eng, config)
    if ranks > 1:
        cfg.setdefault("tp_size", ranks)
    plan = plan_for(eng, card, spec, cfg, version=ver, tp=ranks)
    perf = PerfModel(card, spec, scheduler_plan(plan), config=cfg)
    samples, skipped = fit_runs(runs, perf)
    return SpeedCalibration(
        engine=eng,
        engine_version=ver,
        gpu=spec.name,
        model=model,
        tp=ranks,
        config_from=config_from,
        samples=tuple(samples),
        skipped=tuple(skipped),
        source=str(path),
        source_sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
    )


def _engine_of(run: BenchRun) -> str | None:
    """SGLang's bench names the server it drove (--backend sglang*, vllm); vLLM's bench is
    taken to have run against vLLM."""
    if run.tool == "vllm":
        return "vllm"
    b = (run.backend or "").lower()
    return "sglang" if b.startswith("sglang") else "vllm" if b.startswith("vllm") else None


def _info_version(info: Mapping[str, Any] | None) -> str | None:
    v = (info or {}).get("version")
    return str(v) if v else None


def _launch_config(
    launch: LoggedLaunch | None,
    info: Mapping[str, Any] | None,
    overrides: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], str]:
    """The launch's configuration: the startup log's, else the SGLang server's own /server_info
    recorded in the file, else the --set flags alone."""
    if launch is not None:
        cfg, src = dict(launch.config), f"startup log {launch.path}"
    elif info:
        cfg = {k: v for k, v in info.items() if k not in _NOT_ARGS and not isinstance(v, Mapping)}
        src = "the file's server_info"
    else:
        cfg, src = {}, "--set flags" if overrides else "engine defaults"
    cfg.update(overrides or {})
    return cfg, src
