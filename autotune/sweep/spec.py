"""The sweep spec (YAML): target, search space, workload, objective, budget, finalists.

Every error names the file and the field (dotted path) and says what would be valid. Example::

    name: demo-4080s
    target: {engine: sglang, engine_version: "0.5.17", model: qwen3.8-27b-awq-int4,
             gpu: rtx-4080-super-32g, tp: 1}
    simulate: {time_scale: 50}
    space: {file: builtin, overrides: {}, fixed: {kv_cache_dtype: fp8_e4m3}}
    workload:
      scenarios:
        - {kind: decode, name: probe, prompt_len: 128, output_len: 64, num_requests: 2}
        - {kind: throughput, prompt_len: 512, output_len: 128, concurrency: 8}
    objective: {metric: throughput.output_tok_s, vram_headroom_gib: 0.3}
    budget: {max_trials: 40, until: "07:00"}

Here: reading and validating a spec (file, YAML text or mapping), every error with its field
and line. The sections' models are in spec_models, the checks across them in spec_checks;
their public names are importable from here too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from autotune.errors import ConfigError, did_you_mean
from autotune.sweep.spec_checks import check_cross_fields, check_metric, port_workers_error
from autotune.sweep.spec_models import (
    LATENCY_FIGURE,
    LAUNCH_FIGURES,
    POINT_FIGURE,
    SCENARIO_FIGURES,
    UNTIL_FORMAT,
    BudgetSpec,
    ConstraintSpec,
    Direction,
    EngineRunSpec,
    ExecutionSpec,
    FinalistsSpec,
    MetricRef,
    ObjectiveSpec,
    SearchSpec,
    SimulateSpec,
    SpaceSpec,
    SweepSpec,
    TargetSpec,
    WorkloadSpec,
    default_direction,
    until_deadline,
)

__all__ = [
    "LATENCY_FIGURE",
    "LAUNCH_FIGURES",
    "POINT_FIGURE",
    "SCENARIO_FIGURES",
    "UNTIL_FORMAT",
    "BudgetSpec",
    "ConstraintSpec",
    "Direction",
    "EngineRunSpec",
    "ExecutionSpec",
    "FinalistsSpec",
    "MetricRef",
    "ObjectiveSpec",
    "SearchSpec",
    "SimulateSpec",
    "SpaceSpec",
    "SweepSpec",
    "TargetSpec",
    "WorkloadSpec",
    "check_metric",
    "default_direction",
    "load_spec",
    "parse_spec",
    "port_workers_error",
    "spec_from_yaml",
    "until_deadline",
]


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_for(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The section model that owns the field at `loc` (for 'did you mean')."""
    model: type[BaseModel] | None = SweepSpec
    for part in loc[:-1]:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        ann = field.annotation
        nxt = None
        for cand in (ann, *getattr(ann, "__args__", ())):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                nxt = cand
            for inner in getattr(cand, "__args__", ()):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    nxt = inner
        model = nxt
    return model


def _validation_error(exc: ValidationError, source: str, text: str | None = None) -> ConfigError:
    from autotune.yamlio import line_of, short

    err = exc.errors()[0]
    loc = tuple(err["loc"])
    field = _loc(loc) or None
    if err["type"] == "extra_forbidden":
        owner = _model_for(loc)
        valid = sorted(owner.model_fields) if owner is not None else []
        msg = f"unknown field {loc[-1]!r}{did_you_mean(str(loc[-1]), valid) if valid else ''}"
    elif err["type"] == "missing":
        msg = "required field is missing"
    else:
        msg = err["msg"].removeprefix("Value error, ")
        if "input" in err and err["type"] not in ("model_type",):
            msg += f" (got {short(err['input'])})"  # bounded: the input can be huge
    more = len(exc.errors()) - 1
    if more:
        msg += f" (and {more} more error{'s' if more > 1 else ''})"
    line = line_of(text, [p for p in loc if isinstance(p, str | int)]) if text else None
    if line is not None:
        msg += f" (line {line})"
    return ConfigError(msg, source=source, field=field)


def parse_spec(data: Any, *, source: str = "spec", text: str | None = None) -> SweepSpec:
    """Validate a mapping (parsed YAML) into a SweepSpec, with cross-field checks; with the YAML
    `text`, errors give the line of the field at fault."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"expected a mapping at the top level, got {got}", source=source)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc, source, text) from None
    try:
        check_cross_fields(spec, source)
    except ConfigError as exc:
        raise _with_line(exc, text) from None
    return spec


def _with_line(exc: ConfigError, text: str | None) -> ConfigError:
    """`exc` with the line of its field in `text` appended (when found)."""
    from autotune.yamlio import line_of

    if not text or not exc.field:
        return exc
    path: list[str | int] = [int(p) if p.isdigit() else p for p in exc.field.split(".")]
    line = line_of(text, path)
    if line is None:
        return exc
    message = str(exc)
    prefix = ": ".join(p for p in (exc.source, exc.field) if p) + ": "
    out = ConfigError(
        f"{message.removeprefix(prefix)} (line {line})", source=exc.source, field=exc.field
    )
    return out


def load_spec(path: str | Path) -> tuple[SweepSpec, str]:
    """Read and validate a spec file; returns the spec and its verbatim text."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the sweep spec: {exc.strerror or exc}", source=str(p)
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (byte {exc.start}): save the spec as UTF-8", source=str(p)
        ) from None
    return spec_from_yaml(text, source=str(p), base_dir=p.parent), text


def spec_from_yaml(text: str, *, source: str = "spec", base_dir: Path | None = None) -> SweepSpec:
    """Parse YAML text into a spec; a relative space file is resolved against `base_dir`."""
    from autotune.yamlio import load_yaml

    spec = parse_spec(load_yaml(text, source=source), source=source, text=text)
    if base_dir is not None and spec.space.file != "builtin":
        f = Path(spec.space.file).expanduser()
        if not f.is_absolute():
            f = (base_dir / f).resolve()
        spec = spec.model_copy(update={"space": spec.space.model_copy(update={"file": str(f)})})
    return spec
