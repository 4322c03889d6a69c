"""Real speeds from the field: one YAML record per public SGLang or vLLM benchmark run (decode and
prefill figures with the launch that produced them), with its provenance
(tests/data/real_speeds/README.md gives the schema)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from autotune.calibration.records import ArgValue, Engine
from autotune.errors import ConfigError
from autotune.yamlio import load_yaml

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


class SpeedRecord(BaseModel):
    """One public benchmark run: where it was posted, what ran where, and its measured points."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(
        pattern=r"^https://github\.com/[^/]+/[^/]+/((issues|pull|discussions)/\d+|blob/[^/]+/.+)",
        description="the public thread, or a file in a public repository at a commit",
    )
    posted: dt.date
    engine: Engine
    version: str
    version_from: Literal["stated", "log", "date", "build"]
    gpu: str = Field(min_length=1, description="the GPU model as stated")
    gpu_vendor: Literal["nvidia", "amd"]
    tp: int = Field(default=1, ge=1)
    model: str
    card: str | None = None
    quantization: str
    kv_cache_dtype: str = "auto"
    tool: Tool
    command: str | None = None
    bench_command: str | None = None
    args: dict[str, ArgValue] = Field(default_factory=dict)
    points: list[SpeedPoint] = Field(min_length=1)
    notes: str = ""
    path: Path | None = Field(default=None, exclude=True)

    @field_validator("posted", mode="before")
    @classmethod
    def _date(cls, value: object) -> object:
        return dt.date.fromisoformat(value) if isinstance(value, str) else value

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: object) -> object:
        return str(value) if isinstance(value, float | int) else value

    @property
    def name(self) -> str:
        return self.path.stem if self.path else self.model


def load_speed_record(path: Path) -> SpeedRecord:
    data = load_yaml(path.read_text(encoding="utf-8"), source=str(path))
    if not isinstance(data, dict):
        raise ConfigError(
            "a speed record is a mapping (see the folder's README.md)", source=str(path)
        )
    try:
        return SpeedRecord.model_validate({**data, "path": path})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ConfigError(first["msg"], source=str(path), field=field) from exc


def load_speed_records(folder: Path) -> list[SpeedRecord]:
    """Every `*.yaml` record under `folder` (engine subfolders included), sorted by path."""
    return [load_speed_record(p) for p in sorted(folder.rglob("*.yaml"))]
