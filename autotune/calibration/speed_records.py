"""Real speeds from the field: one YAML record per public SGLang or vLLM benchmark run (decode and
prefill figures with the launch that produced them), with its provenance
(tests/data/real_speeds/README.md gives the schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotune.calibration.records import PublicRecord, load_record_file

Tool = Literal["bench_one_batch", "bench_serving", "bench_latency"]


class SpeedPoint(BaseModel):
    """One measured workload point: a batch (or a concurrency) of prompts and what it ran at."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch: int = Field(ge=1, description="static batch size, or max concurrency when serving")
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    decode_ms: float | None = Field(default=None, gt=0, description="one decode step")
    prefill_ms: float | None = Field(
        default=None, gt=0, description="the batch's prefill (bench_one_batch) or median TTFT"
    )
    e2e_s: float | None = Field(default=None, gt=0, description="bench_latency's avg latency")
    accept_length: float | None = Field(
        default=None,
        ge=1,
        description="speculative decoding: the mean accept length the server reported for this "
        "run (tokens per verify step, the bonus token included)",
    )
    output: str = Field(min_length=1, description="the verbatim lines the figures come from")

    @model_validator(mode="after")
    def _measured(self) -> SpeedPoint:
        if self.decode_ms is None and self.prefill_ms is None and self.e2e_s is None:
            raise ValueError("a point needs decode_ms, prefill_ms or e2e_s")
        return self


class SpeedRecord(PublicRecord):
    """One public benchmark run: where it was posted, what ran where, and its measured points."""

    gpu: str = Field(min_length=1, description="the GPU model as stated")
    tp: int = Field(default=1, ge=1)
    kv_cache_dtype: str = "auto"
    tool: Tool
    bench_command: str | None = None
    points: list[SpeedPoint] = Field(min_length=1)


def load_speed_record(path: Path) -> SpeedRecord:
    return load_record_file(path, SpeedRecord, "a speed record")


def load_speed_records(folder: Path) -> list[SpeedRecord]:
    """Every `*.yaml` record under `folder` (engine subfolders included), sorted by path."""
    return [load_speed_record(p) for p in sorted(folder.rglob("*.yaml"))]
