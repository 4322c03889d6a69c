"""Real launches from the field: one YAML record per public SGLang or vLLM startup log, with its
provenance (tests/data/real_launches/README.md gives the schema)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autotune.errors import ConfigError
from autotune.yamlio import load_yaml

Engine = Literal["sglang", "vllm"]
Family = Literal["dense", "moe", "hybrid", "mla-moe"]
ArgValue = str | int | float | bool | None
R = TypeVar("R", bound="PublicRecord")


class PublicRecord(BaseModel):
    """What every public record states of its provenance and launch (launch and speed records)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(
        pattern=r"^https://github\.com/[^/]+/[^/]+/((issues|pull|discussions)/\d+|blob/[^/]+/.+)",
        description="the public thread, or a file in a public repository at a commit",
    )
    posted: dt.date
    engine: Engine
    version: str
    version_from: Literal["stated", "log", "date", "build"]
    gpu: str | None = Field(description="as stated; null when the source names no GPU")
    gpu_vendor: Literal["nvidia", "amd"]
    model: str
    card: str | None = Field(
        default=None,
        description="the card (built-in or committed config card) describing the checkpoint, "
        "when `model` is a local folder or a pack whose card has another name; notes say why",
    )
    quantization: str
    command: str | None = None
    args: dict[str, ArgValue] = Field(default_factory=dict)
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


class LaunchRecord(PublicRecord):
    """One public launch: where it was posted, what ran where, and its verbatim startup lines."""

    gpu_count: int = Field(ge=1)
    tp: int = Field(ge=1)
    dp: int = Field(default=1, ge=1)
    family: Family
    kv_cache_dtype: str | None = Field(
        default="auto", description="as launched; None: the source does not show it"
    )
    log: str
    unmodelled: list[str] = Field(
        default_factory=list,
        description="what this launch ran beside the engine's own accounting that the planner "
        "does not model, as the source states it (a KV connector, TunableOp tuning during the "
        "profiling run, a vGPU profile, an external draft model)",
    )
    planner_gap: list[str] = Field(
        default_factory=list,
        description="why the planner misses this launch where the cause is the engine release's "
        "own accounting (a rule the planner does not model, with its evidence from the release "
        "source or a replay), or, where no cause is found, what was checked; unlike `unmodelled` "
        "the miss is the planner's, so the record still counts as having nothing unmodelled",
    )
    unstated: list[str] = Field(
        default_factory=list,
        description="inputs that size this launch's pool and that the source does not show "
        "(a flag set through an unseen variable, a value cut from the excerpt): the planner "
        "still predicts from the engine's defaults, and the record counts as unstated",
    )

    @property
    def lines(self) -> list[str]:
        return [line for line in self.log.splitlines() if line.strip()]


def load_record_file(path: Path, kind: type[R], what: str) -> R:
    """One YAML record of `kind`; bad input names the file and the field."""
    data = load_yaml(path.read_text(encoding="utf-8"), source=str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{what} is a mapping (see the folder's README.md)", source=str(path))
    try:
        return kind.model_validate({**data, "path": path})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ConfigError(first["msg"], source=str(path), field=field) from exc


def load_record(path: Path) -> LaunchRecord:
    return load_record_file(path, LaunchRecord, "a launch record")


def load_records(folder: Path) -> list[LaunchRecord]:
    """Every `*.yaml` record under `folder` (engine subfolders included), sorted by path."""
    return [load_record(p) for p in sorted(folder.rglob("*.yaml"))]
