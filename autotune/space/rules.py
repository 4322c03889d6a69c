"""Declarative rules over a configuration and the target it runs on (FIELD-NOTES P1..P14).

A rule says: when every `when` condition holds, every `require` condition must hold too.
`kind: constraint` rules reject a configuration before launch; `kind: info` rules are documented
facts that never constrain (the report lists them when their `when` matches).

Conditions are keyed by an engine field name (`page_size`, read from the configuration; an absent
field is None, "the engine decides") or by a context fact (`model.hybrid`, `engine.version`,
`gpu.arch`, ...). Each condition is a matcher:

    page_size: 1                    equal (a bare list means `in`)
    page_size: {in: [null, 1]}      one of
    speculative_algorithm: {ne: null}
    engine.version: {lte: "0.5.17"} ordering; strings compare as versions (0.5.9 < 0.5.17)
    page_size: {divides: 256}       256 % value == 0
    max_running_requests: {gte: 4, or_null: true}   None (engine decides) also passes

Ordering matchers are false for None unless `or_null` is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)

from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.hardware.gpus import GPUSpec
    from autotune.models.card import ModelCard


def _one_error(kind: str) -> WrapValidator:
    """Report a value that fits no member of a union once, not once per member."""

    def check(value: object, handler: ValidatorFunctionWrapHandler) -> object:
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(f"must be {kind}, got {_json(value)}") from None

    return WrapValidator(check)


def _json(value: object) -> str:
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


Scalar = Annotated[
    StrictBool | StrictInt | StrictFloat | StrictStr | None,
    _one_error("a string, number, true/false or null"),
]
ScalarOrList = Annotated[
    Scalar | list[Scalar],
    _one_error("a string, number, true/false, null or a list of those"),
]
Bound = StrictInt | StrictFloat | StrictStr
# What those validate to: a configuration's values are ConfigValues (None: the engine decides;
# a list for an nargs flag), a rule's bounds are Bounds.
ScalarValue = bool | int | float | str | None
ConfigValue = ScalarValue | list[ScalarValue]
BoundValue = int | float | str

OPERATORS = ("eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte", "divides", "or_null")


def same(a: object, b: object) -> bool:
    """Equality that keeps bools apart from ints (True is not page_size 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def is_version(text: str) -> bool:
    """Whether `text` is a version number (autotune.versions, PEP 440)."""
    from autotune.versions import is_version as _is_version

    return _is_version(text)


def _compare(a: object, b: object) -> int | None:
    """-1/0/1, or None when the two cannot be ordered. Strings compare as versions."""
    if a is None or isinstance(a, bool) or isinstance(b, bool):
        return None
    if isinstance(a, int | float) and isinstance(b, int | float):
        return (a > b) - (a < b)
    if isinstance(a, str | int | float) and isinstance(b, str | int | float):
        from autotune.versions import try_version

        va, vb = try_version(a), try_version(b)
        if va is None or vb is None:
            return None
        return (va > vb) - (va < vb)
    return None


class Match(BaseModel):
    """One condition on one value; every operator given must hold (all-of)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    eq: Scalar = None
    ne: Scalar = None
    in_: tuple[Scalar, ...] | None = Field(default=None, alias="in")
    not_in: tuple[Scalar, ...] | None = None
    gt: Bound | None = None
    gte: Bound | None = None
    lt: Bound | None = None
    lte: Bound | None = None
    divides: StrictInt | None = Field(default=None, description="value divides this number")
    or_null: bool = Field(default=False, description="None (engine decides) also matches")

    @model_validator(mode="after")
    def _needs_operator(self) -> Match:
        if not self.operators():
            raise ValueError(f"a condition needs one of: {', '.join(OPERATORS[:-1])}")
        return self

    def operators(self) -> list[str]:
        """Operators given (in OPERATORS order), `in` spelled as in YAML."""
        given = {("in" if f == "in_" else f) for f in self.model_fields_set}
        return [op for op in OPERATORS[:-1] if op in given]

    def values(self) -> list[ScalarValue]:
        """Literal values named by eq/ne/in/not_in (to check them against a domain)."""
        out: list[ScalarValue] = []
        for op in self.operators():
            if op in ("eq", "ne"):
                out.append(self.eq if op == "eq" else self.ne)
            elif op == "in":
                out.extend(self.in_ or ())
            elif op == "not_in":
                out.extend(self.not_in or ())
        return out

    def bounds(self) -> list[BoundValue | None]:
        return [self._bound(op) for op in ("gt", "gte", "lt", "lte") if op in self.operators()]

    def _bound(self, op: str) -> BoundValue | None:
        bound: BoundValue | None = getattr(self, op)
        return bound

    def test(self, value: object) -> bool:
        if value is None and self.or_null:
            return True
        for op in self.operators():
            if not self._test_one(op, value):
                return False
        return True

    def _test_one(self, op: str, value: object) -> bool:
        if op == "eq":
            return same(value, self.eq)
        if op == "ne":
            return not same(value, self.ne)
        if op == "in":
            return any(same(value, c) for c in self.in_ or ())
        if op == "not_in":
            return not any(same(value, c) for c in self.not_in or ())
        if op == "divides":
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                return False
            return (self.divides or 0) % value == 0
        order = _compare(value, self._bound(op))
        if order is None:
            return False
        return {"gt": order > 0, "gte": order >= 0, "lt": order < 0, "lte": order <= 0}[op]

    def describe(self) -> str:
        import json

        sym = {"eq": "==", "ne": "!=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
        parts: list[str] = []
        for op in self.operators():
            if op in sym:
                parts.append(f"{sym[op]} {json.dumps(getattr(self, op))}")
            elif op == "in":
                parts.append(f"in {json.dumps(list(self.in_ or ()))}")
            elif op == "not_in":
                parts.append(f"not in {json.dumps(list(self.not_in or ()))}")
            else:
                parts.append(f"divides {self.divides}")
        text = " and ".join(parts)
        return f"{text} (or None)" if self.or_null else text


def _shorthand(value: object) -> object:
    """`key: 1` means `{eq: 1}`, `key: [1, 64]` means `{in: [1, 64]}`."""
    if isinstance(value, Match | Mapping):
        return value
    if isinstance(value, list | tuple):
        return {"in": list(value)}
    return {"eq": value}


MatchSpec = Annotated[
    Match,
    BeforeValidator(_shorthand, json_schema_input_type=Scalar | list[Scalar] | Match),
]
AllOf = dict[str, MatchSpec]


def all_hold(conditions: Mapping[str, Match], lookup: Mapping[str, object]) -> bool:
    return all(m.test(lookup.get(k)) for k, m in conditions.items())


def describe_all(conditions: Mapping[str, Match]) -> str:
    return ", ".join(f"{k} {m.describe()}" for k, m in conditions.items())


# Context facts a rule may test, and the RuleContext attribute each one reads.
FACTS: dict[str, str] = {
    "model.hybrid": "model_hybrid",
    "model.mtp": "model_mtp",
    "model.quantization": "quantization",
    "engine.version": "engine_version",
    "gpu.name": "gpu_name",
    "gpu.memory_gib": "gpu_memory_gib",
    "gpu.arch": "gpu_arch",
    "gpu.vendor": "gpu_vendor",
    "parallel.tp_size": "tp_size",
}


class RuleContext(BaseModel):
    """The target a configuration is checked against: model, engine version, GPU, TP size."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_hybrid: bool
    model_mtp: bool
    quantization: str = Field(description="ModelCard quantization scheme: none, awq, nvfp4, ...")
    engine_version: str
    gpu_name: str
    gpu_memory_gib: float
    gpu_arch: str = Field(description="sm_XY, or gfxNNNN for AMD")
    gpu_vendor: str
    tp_size: int = Field(default=1, ge=1)

    @field_validator("engine_version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not is_version(v):
            raise ValueError(f"{v!r} is not a version number (expected e.g. 0.5.17)")
        return v

    @classmethod
    def build(cls, card: ModelCard, gpu: GPUSpec, version: str, tp: int = 1) -> RuleContext:
        """Context for `card` served by engine `version` on `tp` GPUs of kind `gpu`."""
        try:
            return cls(
                model_hybrid=card.is_hybrid,
                model_mtp=card.has_mtp,
                quantization=card.quantization.scheme,
                engine_version=version,
                gpu_name=gpu.name,
                gpu_memory_gib=gpu.memory_gib,
                gpu_arch=gpu.arch,
                gpu_vendor=gpu.vendor,
                tp_size=tp,
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            field = "engine version" if err["loc"] == ("engine_version",) else "tp"
            raise ConfigError(err["msg"].removeprefix("Value error, "), field=field) from None

    def facts(self) -> dict[str, bool | int | float | str]:
        return {key: getattr(self, attr) for key, attr in FACTS.items()}


class Violation(BaseModel):
    """A rule that a configuration breaks (constraint) or that applies to it (info)."""

    model_config = ConfigDict(frozen=True)

    rule_id: str
    kind: Literal["constraint", "info"]
    reason: str
    source: str
    failed: list[str] = Field(
        default_factory=list, description="the required conditions that do not hold"
    )

    def __str__(self) -> str:
        detail = f" ({'; '.join(self.failed)})" if self.failed else ""
        return f"{self.rule_id}: {self.reason}{detail} [{self.source}]"


class Rule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, description="e.g. P1")
    source: str = Field(
        min_length=1, description='the public source a user can check, e.g. "sglang#24121"'
    )
    reason: str = Field(min_length=1, description="one line: what goes wrong and why")
    kind: Literal["constraint", "info"] = "constraint"
    when: AllOf = Field(default_factory=dict, description="all must hold for the rule to apply")
    require: AllOf = Field(default_factory=dict, description="all must hold when the rule applies")

    @model_validator(mode="after")
    def _constraint_requires(self) -> Rule:
        if self.kind == "constraint" and not self.require:
            raise ValueError("a constraint rule needs `require` (use kind: info for notes)")
        return self

    def keys(self) -> list[str]:
        return [*self.when, *self.require]

    def evaluate(self, config: Mapping[str, object], context: RuleContext) -> Violation | None:
        """The violation, or None when the rule does not apply or holds. An info rule without
        `require` is reported whenever `when` holds."""
        import json

        lookup = {**config, **context.facts()}
        if not all_hold(self.when, lookup):
            return None
        failed = [
            f"{k}={json.dumps(lookup.get(k))}, required {m.describe()}"
            for k, m in self.require.items()
            if not m.test(lookup.get(k))
        ]
        if self.require and not failed:
            return None
        return Violation(
            rule_id=self.id, kind=self.kind, reason=self.reason, source=self.source, failed=failed
        )


def check(
    rules: list[Rule] | tuple[Rule, ...],
    config: Mapping[str, object],
    context: RuleContext,
    *,
    include_info: bool = False,
) -> list[Violation]:
    """Constraint violations of `config` on `context` (plus matching info rules if asked)."""
    out = []
    for rule in rules:
        if rule.kind == "info" and not include_info:
            continue
        v = rule.evaluate(config, context)
        if v is not None:
            out.append(v)
    return out
