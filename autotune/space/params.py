"""Parameter types of a search space: int, float, categorical, bool, each with an optional
condition (active only when other parameters have given values) and the engine default."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    model_validator,
)

from autotune.errors import ConfigError
from autotune.space.rules import (
    AllOf,
    ConfigValue,
    ScalarOrList,
    ScalarValue,
    all_hold,
    describe_all,
    same,
)

if TYPE_CHECKING:
    import optuna

Path = tuple[str | int, ...]


class Problems(ValueError):
    """Several problems, each at a path relative to the object that raised it; pydantic keeps
    the exception in the error's ctx so the loader can report every path (see _validation)."""

    def __init__(self, problems: list[tuple[Path, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{dotted(p)}: {m}" for p, m in problems))


def dotted(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _as_any_of(value: object) -> object:
    """`condition:` takes one mapping (all-of) or a list of them (any-of)."""
    return [value] if isinstance(value, Mapping) else value


Condition = Annotated[
    list[AllOf],
    BeforeValidator(_as_any_of, json_schema_input_type=AllOf | list[AllOf]),
]

_ROUND = 9  # decimals kept for stepped floats (optuna returns 0.8300000000000001)


class ParamBase(BaseModel, ABC):
    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str = ""
    condition: Condition | None = Field(
        default=None,
        description="active only when this holds: a mapping of other parameters (or fixed "
        "fields) to conditions, all of which must hold; a list of such mappings: any of them",
    )

    def is_active(self, values: Mapping[str, object]) -> bool:
        return self.condition is None or any(all_hold(g, values) for g in self.condition)

    def condition_text(self) -> str:
        if not self.condition:
            return ""
        if len(self.condition) == 1:
            return describe_all(self.condition[0])
        return " or ".join(f"({describe_all(g)})" for g in self.condition)

    @abstractmethod
    def domain(self) -> str: ...

    @abstractmethod
    def contains(self, value: object) -> bool: ...

    @abstractmethod
    def grid_values(self) -> Sequence[ConfigValue]: ...

    def grid_count(self) -> int:
        return len(self.grid_values())

    @abstractmethod
    def suggest(self, trial: optuna.trial.BaseTrial, name: str) -> ConfigValue: ...

    def to_optuna(self, value: ConfigValue) -> ScalarValue:
        """The Optuna param of a configuration value (a list choice is stored as its label)."""
        assert not isinstance(value, list)
        return value

    def from_optuna(self, value: object) -> ConfigValue:
        """The configuration value of an Optuna param (inverse of `to_optuna`)."""
        return value  # type: ignore[return-value]

    @abstractmethod
    def distribution(self) -> optuna.distributions.BaseDistribution: ...

    def _default_problems(self, default: ConfigValue) -> list[tuple[Path, str]]:
        if default is not None and not self.contains(default):
            return [(("default",), f"{default!r} is outside the domain {self.domain()}")]
        return []


class IntParam(ParamBase):
    """Integers low..high (inclusive) by `step`; `grid` lists the points to enumerate."""

    type: Literal["int"] = "int"
    low: StrictInt
    high: StrictInt
    step: StrictInt = 1
    log: bool = False
    grid: tuple[StrictInt, ...] | None = None
    default: StrictInt | None = Field(default=None, description="engine default; None: engine")

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        problems: list[tuple[Path, str]] = []
        if self.low > self.high:
            problems.append(
                (("low",), f"low <= high must hold, got low={self.low} high={self.high}")
            )
        if self.step < 1:
            problems.append((("step",), f"step must be >= 1, got {self.step}"))
        elif (self.high - self.low) % self.step:
            problems.append(
                (
                    ("high",),
                    f"high - low must be a multiple of step {self.step}, got "
                    f"low={self.low} high={self.high}",
                )
            )
        if self.log and (self.step != 1 or self.low < 1):
            problems.append((("log",), "log: true needs step 1 and low >= 1"))
        if not problems:
            problems += _grid_problems(self) + self._default_problems(self.default)
        if problems:
            raise Problems(problems)
        return self

    def domain(self) -> str:
        step = f" step {self.step}" if self.step != 1 else ""
        return f"integers {self.low}..{self.high}{step}{' (log)' if self.log else ''}"

    def contains(self, value: object) -> bool:
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and self.low <= value <= self.high
            and (value - self.low) % self.step == 0
        )

    def grid_values(self) -> list[int]:
        if self.grid is not None:
            return list(self.grid)
        return list(range(self.low, self.high + 1, self.step))

    def grid_count(self) -> int:
        if self.grid is not None:
            return len(self.grid)
        return (self.high - self.low) // self.step + 1

    def suggest(self, trial: optuna.trial.BaseTrial, name: str) -> int:
        return trial.suggest_int(name, self.low, self.high, step=self.step, log=self.log)

    def distribution(self) -> optuna.distributions.BaseDistribution:
        from optuna.distributions import IntDistribution

        return IntDistribution(self.low, self.high, log=self.log, step=self.step)


class FloatParam(ParamBase):
    """Reals low..high; `step` makes them discrete; `grid` lists the points to enumerate."""

    type: Literal["float"] = "float"
    low: float
    high: float
    step: float | None = None
    log: bool = False
    grid: tuple[float, ...] | None = None
    default: float | None = Field(default=None, description="engine default; None: engine")

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        problems: list[tuple[Path, str]] = []
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            problems.append((("low",), "low and high must be finite numbers"))
        elif self.low > self.high:
            problems.append(
                (("low",), f"low <= high must hold, got low={self.low} high={self.high}")
            )
        elif self.step is not None:
            n = (self.high - self.low) / self.step if self.step > 0 else -1.0
            if self.step <= 0:
                problems.append((("step",), f"step must be > 0, got {self.step}"))
            elif abs(n - round(n)) > 1e-6:
                problems.append(
                    (
                        ("high",),
                        f"high - low must be a multiple of step {self.step}, got "
                        f"low={self.low} high={self.high}",
                    )
                )
        if self.log and (self.step is not None or self.low <= 0):
            problems.append((("log",), "log: true needs low > 0 and no step"))
        if not problems:
            problems += _grid_problems(self) + self._default_problems(self.default)
        if problems:
            raise Problems(problems)
        return self

    def domain(self) -> str:
        step = f" step {self.step:g}" if self.step else ""
        return f"reals {self.low:g}..{self.high:g}{step}{' (log)' if self.log else ''}"

    def contains(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        eps = 1e-9 * max(1.0, abs(self.high - self.low))
        if not self.low - eps <= value <= self.high + eps:
            return False
        if self.step:
            k = (value - self.low) / self.step
            return abs(k - round(k)) < 1e-6
        return True

    def _steps(self) -> int | None:
        return round((self.high - self.low) / self.step) if self.step else None

    def grid_values(self) -> list[float]:
        if self.grid is not None:
            return list(self.grid)
        n = self._steps()
        if n is None:
            raise ConfigError(
                f"continuous float {self.domain()} cannot be enumerated; give it `step` or `grid`"
            )
        assert self.step is not None
        return [round(self.low + i * self.step, _ROUND) for i in range(n + 1)]

    def grid_count(self) -> int:
        if self.grid is not None:
            return len(self.grid)
        n = self._steps()
        return len(self.grid_values()) if n is None else n + 1

    def suggest(self, trial: optuna.trial.BaseTrial, name: str) -> float:
        v = trial.suggest_float(name, self.low, self.high, step=self.step, log=self.log)
        return round(v, _ROUND) if self.step else v

    def distribution(self) -> optuna.distributions.BaseDistribution:
        from optuna.distributions import FloatDistribution

        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)


class CategoricalParam(ParamBase):
    """One of `choices` (str, int, float, bool or null; null: the engine decides). A choice may
    be a list, for a flag that takes several values (`--cuda-graph-bs-decode 1 2 4`): Optuna
    sees it as its label, the JSON text `[1, 2, 4]`, and the configuration gets the list."""

    type: Literal["categorical"] = "categorical"
    choices: tuple[ScalarOrList, ...] = Field(min_length=1)
    default: ScalarOrList = Field(default=None, description="engine default; None: engine")

    @model_validator(mode="after")
    def _check(self) -> CategoricalParam:
        problems: list[tuple[Path, str]] = []
        for i, c in enumerate(self.choices):
            if any(same(c, d) for d in self.choices[:i]):
                problems.append((("choices", i), f"{c!r} is listed twice"))
            elif isinstance(c, list) and (not c or any(v is None for v in c)):
                problems.append((("choices", i), "a list choice needs values, none of them null"))
        labels = [self.to_optuna(c) for c in self.choices if isinstance(c, list)]
        for c in self.choices:
            if isinstance(c, str) and c in labels:
                problems.append((("choices",), f"{c!r} is both a string and a list's label"))
        problems += self._default_problems(self.default)
        if problems:
            raise Problems(problems)
        return self

    def domain(self) -> str:
        return "one of " + ", ".join(show(c) for c in self.choices)

    def contains(self, value: object) -> bool:
        return any(same(value, c) for c in self.choices)

    def grid_values(self) -> list[ConfigValue]:
        return [list(c) if isinstance(c, list) else c for c in self.choices]

    def to_optuna(self, value: ConfigValue) -> ScalarValue:
        return _label(value) if isinstance(value, list) else value

    def from_optuna(self, value: object) -> ConfigValue:
        if isinstance(value, str):
            for c in self.choices:
                if isinstance(c, list) and _label(c) == value:
                    return list(c)
        return value  # type: ignore[return-value]

    def _labels(self) -> list[ScalarValue]:
        return [self.to_optuna(c) for c in self.choices]

    def suggest(self, trial: optuna.trial.BaseTrial, name: str) -> ConfigValue:
        return self.from_optuna(trial.suggest_categorical(name, self._labels()))

    def distribution(self) -> optuna.distributions.BaseDistribution:
        from optuna.distributions import CategoricalDistribution

        return CategoricalDistribution(self._labels())


def _label(values: Sequence[object]) -> str:
    import json

    return json.dumps(list(values))


class BoolParam(ParamBase):
    """A switch (a store_true flag such as enable_hierarchical_cache)."""

    type: Literal["bool"] = "bool"
    default: StrictBool | None = Field(default=None, description="engine default; None: engine")

    def domain(self) -> str:
        return "true or false"

    def contains(self, value: object) -> bool:
        return isinstance(value, bool)

    def grid_values(self) -> list[bool]:
        return [False, True]

    def suggest(self, trial: optuna.trial.BaseTrial, name: str) -> bool:
        return trial.suggest_categorical(name, [False, True])

    def distribution(self) -> optuna.distributions.BaseDistribution:
        from optuna.distributions import CategoricalDistribution

        return CategoricalDistribution([False, True])


Param = Annotated[
    IntParam | FloatParam | CategoricalParam | BoolParam, Field(discriminator="type")
]
PARAM_TYPES = ("int", "float", "categorical", "bool")


def show(v: object) -> str:
    """A value as YAML/JSON writes it: null, true, "text", 0.9."""
    import json

    return json.dumps(v)


def _grid_problems(p: IntParam | FloatParam) -> list[tuple[Path, str]]:
    if p.grid is None:
        return []
    if not p.grid:
        return [(("grid",), "grid must list at least one value")]
    return [
        (("grid", i), f"{v!r} is outside the domain {p.domain()}")
        for i, v in enumerate(p.grid)
        if not p.contains(v)
    ]
