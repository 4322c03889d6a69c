"""Benchmark scenarios: pydantic models, parseable from a dict (YAML) or a compact CLI string.

Kinds (the ``kind`` field picks one):
    prefill       TTFT at each of ``prompt_lens`` with ``max_tokens=1``; prefill tok/s = prompt
                  tokens / TTFT.
    decode        output tok/s of one stream after its first token (``concurrency`` may be raised
                  to measure per-stream speed with N streams, FIELD-NOTES C2 "decode, 2 streams").
    throughput    N concurrent streams; aggregate output and input tok/s, requests/s, over
                  ``num_requests`` requests or ``duration_s`` seconds.
    agent         multi-turn sessions; each turn = previous prompt + previous answer + new text
                  (FIELD-NOTES W, P12: the pattern that reuses the prefix and host cache).
    long_context  TTFT at long prompt lengths (P14: grows about linearly with length).

Compact syntax (``autotune bench --scenario``): ``KIND[:key=value,key=value,...]``; list values
are separated by ``/``: ``prefill:prompt_lens=512/2048/8192,repeats=3``.
A scenarios file is YAML: a list of mappings, or a mapping with a ``scenarios`` list.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from autotune.bench.prompts import TextKind
from autotune.errors import ConfigError, did_you_mean

Endpoint = Literal["chat", "completions"]
# Sizes beyond these are refused when a scenario is read: no benchmark needs them, and a typo
# such as 10**12 requests would otherwise hold a sweep for ever.
MAX_REQUESTS = 100_000  # requests or sessions per repeat, warm-up requests
MAX_TOKENS = 2_097_152  # prompt or output tokens of one request (2M: beyond any context window)
MAX_CONCURRENCY = 4_096  # requests or sessions in flight at once
MAX_REPEATS = 100
MAX_TURNS = 1_000
MainFigure = Literal["prefill_tok_s", "decode_tok_s", "output_tok_s", "ttft_s"]


class ScenarioBase(BaseModel):
    """Knobs every scenario has. Timeouts bound every request so a stalled server never hangs
    the benchmark: ``connect_timeout_s`` to open a connection, ``read_timeout_s`` between two
    reads (so it must exceed the longest TTFT), ``request_timeout_s`` for the whole answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(None, description="label in reports (default: the kind)")
    endpoint: Endpoint = Field("chat", description="/v1/chat/completions or /v1/completions")
    model: str | None = Field(None, description="model name; default: first of /v1/models")
    text: TextKind = Field("prose", description="kind of synthetic text: prose, code, extraction")
    output_len: int = Field(128, ge=1, le=MAX_TOKENS, description="max_tokens per request")
    concurrency: int = Field(
        1, ge=1, le=MAX_CONCURRENCY, description="requests (or sessions) in flight at once"
    )
    warmup_requests: int = Field(
        1, ge=0, le=MAX_REQUESTS, description="unmeasured requests sent first"
    )
    repeats: int = Field(
        1, ge=1, le=MAX_REPEATS, description="measured repetitions (spread is reported)"
    )
    seed: int = Field(0, description="prompt seed; each request and repeat gets its own text")
    temperature: float = Field(0.0, ge=0.0)
    ignore_eos: bool = Field(True, description="sent as the body field ignore_eos (SGLang, vLLM)")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="merged into each body")
    connect_timeout_s: float = Field(10.0, gt=0)
    read_timeout_s: float = Field(300.0, gt=0, description="longest silence between two reads")
    request_timeout_s: float = Field(1800.0, gt=0, description="deadline for one whole request")
    max_error_rate: float = Field(
        0.1, ge=0.0, le=1.0, description="fail the scenario above this share of failed requests"
    )

    @property
    def label(self) -> str:
        return self.name or str(getattr(self, "kind", "scenario"))


def _one_len_to_list(data: Any) -> Any:
    """Accept ``prompt_len: N`` as shorthand for ``prompt_lens: [N]``."""
    if isinstance(data, dict) and "prompt_len" in data:
        if "prompt_lens" in data:
            raise ValueError("give prompt_len or prompt_lens, not both")
        data = dict(data)
        data["prompt_lens"] = [data.pop("prompt_len")]
    return data


class _MultiLength(ScenarioBase):
    @model_validator(mode="before")
    @classmethod
    def _single_length(cls, data: Any) -> Any:
        return _one_len_to_list(data)


class PrefillScenario(_MultiLength):
    kind: Literal["prefill"] = "prefill"
    prompt_lens: list[Annotated[int, Field(ge=1, le=MAX_TOKENS)]] = Field(
        default_factory=lambda: [512, 2048, 8192], min_length=1
    )
    output_len: int = Field(
        1, ge=1, le=MAX_TOKENS, description="1: the answer is the first token only"
    )
    num_requests: int = Field(3, ge=1, le=MAX_REQUESTS, description="requests per prompt length")


class LongContextScenario(_MultiLength):
    kind: Literal["long_context"] = "long_context"
    prompt_lens: list[Annotated[int, Field(ge=1, le=MAX_TOKENS)]] = Field(
        default_factory=lambda: [32768], min_length=1
    )
    output_len: int = Field(16, ge=1, le=MAX_TOKENS)
    num_requests: int = Field(1, ge=1, le=MAX_REQUESTS, description="requests per prompt length")
    warmup_requests: int = Field(
        1, ge=0, le=MAX_REQUESTS, description="sent at 512 tokens, not at full length"
    )
    read_timeout_s: float = Field(900.0, gt=0)


class DecodeScenario(ScenarioBase):
    kind: Literal["decode"] = "decode"
    prompt_len: int = Field(128, ge=1, le=MAX_TOKENS)
    output_len: int = Field(256, ge=2, le=MAX_TOKENS)
    num_requests: int = Field(3, ge=1, le=MAX_REQUESTS)


class ThroughputScenario(ScenarioBase):
    kind: Literal["throughput"] = "throughput"
    prompt_len: int = Field(512, ge=1, le=MAX_TOKENS)
    output_len: int = Field(256, ge=1, le=MAX_TOKENS)
    concurrency: int = Field(8, ge=1, le=MAX_CONCURRENCY)
    num_requests: int | None = Field(
        None,
        ge=1,
        le=MAX_REQUESTS,
        description="requests per repeat (default 4 x concurrency without duration_s)",
    )
    duration_s: float | None = Field(
        None, gt=0, description="keep starting requests for this long (in-flight ones finish)"
    )

    @property
    def request_cap(self) -> int | None:
        if self.num_requests is not None:
            return self.num_requests
        return None if self.duration_s is not None else 4 * self.concurrency


class AgentScenario(ScenarioBase):
    kind: Literal["agent"] = "agent"
    prompt_len: int = Field(2048, ge=1, le=MAX_TOKENS, description="first turn's prompt")
    turn_len: int = Field(
        256, ge=1, le=MAX_TOKENS, description="new text appended at every later turn"
    )
    output_len: int = Field(128, ge=1, le=MAX_TOKENS)
    turns: int = Field(4, ge=1, le=MAX_TURNS)
    concurrency: int = Field(4, ge=1, le=MAX_CONCURRENCY, description="sessions in flight at once")
    sessions: int | None = Field(
        None, ge=1, le=MAX_REQUESTS, description="sessions per repeat (default concurrency)"
    )
    think_time_s: float = Field(0.0, ge=0.0, description="pause between a session's turns")

    @property
    def num_sessions(self) -> int:
        return self.sessions or self.concurrency


AnyScenario = (
    PrefillScenario | DecodeScenario | ThroughputScenario | AgentScenario | LongContextScenario
)
# Validates a mapping into the class its ``kind`` names.
Scenario = Annotated[AnyScenario, Field(discriminator="kind")]

SCENARIO_CLASSES: dict[str, type[ScenarioBase]] = {
    "prefill": PrefillScenario,
    "decode": DecodeScenario,
    "throughput": ThroughputScenario,
    "agent": AgentScenario,
    "long_context": LongContextScenario,
}
MAIN_FIGURE: dict[str, tuple[MainFigure, bool]] = {
    # kind -> (figure, higher is better)
    "prefill": ("prefill_tok_s", True),
    "decode": ("decode_tok_s", True),
    "throughput": ("output_tok_s", True),
    "agent": ("ttft_s", False),
    "long_context": ("ttft_s", False),
}

_ADAPTER: TypeAdapter[AnyScenario] = TypeAdapter(Scenario)


def _format_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"][1:] or err["loc"])
        parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    return "; ".join(parts)


def scenario_from_dict(data: Any, *, source: str = "scenario") -> AnyScenario:
    """Validate one scenario mapping; `source` names where it came from in error messages."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"expected a mapping with a 'kind', got {type(data).__name__}", source=source
        )
    kind = data.get("kind")
    if kind not in SCENARIO_CLASSES:
        raise ConfigError(
            f"unknown scenario kind {kind!r}{did_you_mean(str(kind), sorted(SCENARIO_CLASSES))}",
            source=source,
            field="kind",
        )
    cls = SCENARIO_CLASSES[kind]
    fields = set(cls.model_fields)
    for key in data:
        if key not in fields and key != "prompt_len":
            raise ConfigError(
                f"unknown field {key!r} for a {kind} scenario{did_you_mean(key, sorted(fields))}",
                source=source,
                field=str(key),
            )
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc), source=source) from exc


def _is_list_field(cls: type[BaseModel], name: str) -> bool:
    info = cls.model_fields.get(name)
    if info is None:
        return False
    ann = info.annotation
    origins = {typing.get_origin(ann)}
    if typing.get_origin(ann) in (typing.Union, types.UnionType):
        origins |= {typing.get_origin(a) for a in typing.get_args(ann)}
    return list in origins


def parse_scenario(spec: str) -> AnyScenario:
    """Parse the compact form ``KIND[:key=value,...]`` (lists separated by ``/``).

    >>> parse_scenario("throughput:concurrency=8,output_len=256").concurrency
    8
    """
    source = f"--scenario {spec!r}"
    kind, _, rest = spec.strip().partition(":")
    data: dict[str, Any] = {"kind": kind.strip()}
    cls = SCENARIO_CLASSES.get(kind.strip())
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"expected key=value, got {item!r}", source=source)
        if key in data:
            raise ConfigError(f"{key!r} given twice", source=source, field=key)
        if key == "extra_body":
            raise ConfigError("extra_body needs a mapping: use --scenarios-file", source=source)
        value = value.strip()
        if cls is not None and _is_list_field(cls, key):
            data[key] = [v.strip() for v in value.split("/") if v.strip()]
        else:
            data[key] = value
    return scenario_from_dict(data, source=source)


def load_scenarios_file(path: str | Path) -> list[AnyScenario]:
    """Read a YAML file holding a list of scenario mappings (or ``{scenarios: [...]}``)."""
    import yaml

    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=str(p)) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=str(p)) from exc
    if isinstance(raw, dict) and "scenarios" in raw:
        raw = raw["scenarios"]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(
            "expected a non-empty list of scenarios (or a mapping with a 'scenarios' list)",
            source=str(p),
        )
    return [scenario_from_dict(item, source=f"{p}: scenarios[{i}]") for i, item in enumerate(raw)]
