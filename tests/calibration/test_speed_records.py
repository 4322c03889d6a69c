"""Real speeds from the field: the records' schema, and the roofline's replay of each tool's
figures (calibration/speed_replay.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.calibration.speed_records import (
    SpeedRecord,
    load_speed_record,
    load_speed_records,
)
from autotune.calibration.speed_replay import perf_model, replay_speeds
from autotune.errors import ConfigError
from autotune.planner.perf import DecodeSeq, PerfModel, PrefillChunk

RECORDS = load_speed_records(Path(__file__).resolve().parents[1] / "data" / "real_speeds")

OUT = "Decode.  median latency: 0.00610 s, median throughput:    163.93 token/s"


def _record(**over: object) -> SpeedRecord:
    base: dict[str, object] = dict(
        source="https://github.com/sgl-project/sglang/issues/1",
        posted="2025-05-01",
        engine="sglang",
        version="0.4.6.post1",
        version_from="stated",
        gpu="NVIDIA H100 80GB HBM3",
        gpu_vendor="nvidia",
        tp=1,
        model="meta-llama/Llama-3.1-8B-Instruct",
        quantization="bf16",
        tool="bench_one_batch",
        points=[
            dict(batch=16, input_len=1024, output_len=128, decode_ms=8.0, prefill_ms=400.0,
                 output=OUT)
        ],
    )  # fmt: skip
    base.update(over)
    return SpeedRecord.model_validate(base)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_committed_record_replays(record: SpeedRecord) -> None:
    """Every committed record loads, and each figure is predicted or says why not."""
    figures = replay_speeds(record)
    assert figures, f"{record.path}: no measured figure"
    for f in figures:
        assert (f.predicted is not None and f.predicted > 0) or f.skipped, f
    for point in record.points:
        assert point.output.strip(), f"{record.path}: a point without its verbatim output"


def test_bad_record_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "source: https://github.com/a/b/issues/1\nposted: 2025-01-01\nengine: sglang\n"
        "version: 0.4.6\nversion_from: stated\ngpu: H100\ngpu_vendor: nvidia\nmodel: m\n"
        "quantization: bf16\ntool: bench_one_batch\n"
        "points: [{batch: 0, input_len: 1, output_len: 1, decode_ms: 1, output: x}]\n"
    )
    with pytest.raises(ConfigError) as exc:
        load_speed_record(path)
    assert "bad.yaml" in str(exc.value) and "points.0.batch" in str(exc.value)


def test_point_needs_a_figure() -> None:
    with pytest.raises(ValueError, match="decode_ms, prefill_ms or e2e_s"):
        _record(points=[dict(batch=1, input_len=8, output_len=8, output=OUT)])


def _model(record: SpeedRecord) -> PerfModel:
    model = perf_model(record)
    assert isinstance(model, PerfModel), model
    return model


def test_bench_one_batch_prices_one_forward_and_the_median_step() -> None:
    rec = _record()
    model = _model(rec)
    by = {f.metric: f for f in replay_speeds(rec)}
    # the whole batch's prompts in one forward, no request overhead
    prefill = model.prefill_step_s([PrefillChunk(1024, 0)] * 16) * 1e3
    assert by["prefill_ms"].predicted == pytest.approx(prefill)
    # the median step: context input + output / 2
    step = model.decode_step_s([DecodeSeq(1024 + 64)] * 16) * 1e3
    assert by["decode_ms"].predicted == pytest.approx(step)
    assert by["decode_ms"].ratio == pytest.approx(step / 8.0)


def test_serving_ttft_only_alone() -> None:
    point = dict(batch=4, input_len=512, output_len=64, decode_ms=9.0, prefill_ms=50.0, output=OUT)
    rec = _record(tool="bench_serving", points=[point])
    by = {f.metric: f for f in replay_speeds(rec)}
    assert by["prefill_ms"].predicted is None and "queueing" in (by["prefill_ms"].skipped or "")
    alone = _record(tool="bench_serving", points=[{**point, "batch": 1}])
    model = _model(alone)
    by = {f.metric: f for f in replay_speeds(alone)}
    assert by["prefill_ms"].predicted == pytest.approx(model.prefill_s(512) * 1e3)


def test_bench_latency_is_prefill_then_output_minus_one_steps() -> None:
    point = dict(batch=8, input_len=4000, output_len=100, e2e_s=1.0, output=OUT)
    rec = _record(engine="vllm", version="0.10.0", tool="bench_latency", points=[point])
    model = _model(rec)
    (fig,) = replay_speeds(rec)
    step = model.decode_step_s([DecodeSeq(4050)] * 8)
    budget = model.plan.chunked_prefill_size
    assert 0 < budget < 32000  # V1's token budget splits the 32,000 prompt tokens
    assert fig.predicted is not None
    prefill = fig.predicted - 99 * step
    # more than one forward, each no longer than the budget's
    one = model.prefill_step_s([PrefillChunk(4000, 0)] * 8)
    assert prefill > 0 and prefill != pytest.approx(one)


def test_speculative_decode_is_not_guessed() -> None:
    rec = _record(args={"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 4})
    by = {f.metric: f for f in replay_speeds(rec)}
    assert by["decode_ms"].predicted is None and "accept length" in (by["decode_ms"].skipped or "")


def test_unknown_gpu_is_reported() -> None:
    (f, *_) = replay_speeds(_record(gpu="Some Accelerator 9000"))
    assert f.predicted is None and "catalog" in (f.skipped or "")


def test_benchmark_prints_the_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/fidelity_speed.py over the committed records: every figure's row and the
    summary lines by phase, with the batch-scaling spread."""
    import sys

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        import fidelity_speed
    finally:
        sys.path.remove(str(bench))
    fidelity_speed.main([])
    out = capsys.readouterr().out
    every = [f for r in RECORDS for f in replay_speeds(r)]
    fitted = [f for f in every if fidelity_speed.fitted(f)]
    assert fitted and all(f.record.name in fidelity_speed.FITTED for f in fitted)
    assert f"{len(RECORDS)} records; {len(fitted)} figures fitted, left out" in out
    assert f"; {len(every) - len(fitted)} figures" in out  # a fitted figure is not evidence
    assert "all decode:" in out and "batch scaling:" in out
    assert out.count("\n| s") == len(every)  # one row per figure, fitted ones marked
    assert out.count("fit: perf.") == len(fitted)


def test_batch_spread_is_zero_for_a_constant_offset() -> None:
    """The scaling metric ignores the level: a model off by the same factor at every batch
    scores 0, one whose error grows with the batch does not."""
    import sys

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    sys.path.insert(0, str(bench))
    try:
        from fidelity_speed import batch_spread
    finally:
        sys.path.remove(str(bench))
    from autotune.calibration.speed_replay import SpeedFigure

    rec = _record()
    pts = [rec.points[0].model_copy(update={"batch": b}) for b in (1, 4, 16)]
    flat = [SpeedFigure(rec, p, "decode_ms", 10.0, predicted=5.0) for p in pts]
    assert batch_spread(flat) == (0.0, 1)
    grows = [SpeedFigure(rec, p, "decode_ms", 10.0, predicted=5.0 * p.batch) for p in pts]
    assert batch_spread(grows)[0] > 0.5
