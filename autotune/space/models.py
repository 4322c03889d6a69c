"""The SearchSpace: parameters named by engine fields, fixed flags and rules, with suggestion
through Optuna, baseline defaults, exhaustive enumeration and config validation.

A configuration is a plain dict of engine field names to values; None means "the engine decides"
and emits no flag (engines/base.py). A parameter whose condition does not hold is inactive: it is
not suggested and is None in the configuration.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from autotune.errors import ConfigError
from autotune.space._checks import (
    check_conditions,
    check_names,
    check_rules,
    field_hint,
    topological,
    valid_hint,
)
from autotune.space._validation import config_error
from autotune.space.engine_fields import ENGINE_FIELDS
from autotune.space.params import (
    PARAM_TYPES,
    BoolParam,
    CategoricalParam,
    FloatParam,
    IntParam,
    Param,
    ParamBase,
    Path,
    Problems,
    dotted,
    show,
)
from autotune.space.rules import (
    ConfigValue,
    Rule,
    RuleContext,
    ScalarOrList,
    Violation,
    check,
    same,
)

if TYPE_CHECKING:
    import optuna

# A configuration: engine field -> value (None: the engine decides; a list for nargs flags).
Config = dict[str, ConfigValue]

__all__ = [
    "PARAM_TYPES",
    "BoolParam",
    "CategoricalParam",
    "Config",
    "FloatParam",
    "IntParam",
    "Param",
    "ParamBase",
    "Problems",
    "SearchSpace",
]


class SearchSpace(BaseModel):
    """Parameters to search, flags always set, and rules; validated on construction.

    Example:
        >>> space = builtin_space("sglang")            # doctest: +SKIP
        >>> space.suggest(study.ask())["page_size"]     # doctest: +SKIP
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str = Field(description="engine whose field names the space uses, e.g. sglang")
    description: str = ""
    parameters: dict[str, Param] = Field(default_factory=dict)
    fixed: dict[str, ScalarOrList] = Field(
        default_factory=dict,
        description="engine fields always set to these values (a list for nargs flags)",
    )
    rules: list[Rule] = Field(default_factory=list)

    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _semantics(self, info: ValidationInfo) -> SearchSpace:
        # Overrides may narrow a parent's choices below the values a child's condition names,
        # so only a file (or direct construction) gets the typo check on condition values.
        narrowed = bool(info.context and info.context.get("narrowed"))
        problems = check_names(self.engine, self.parameters, self.fixed)
        problems += check_conditions(self.parameters, self.fixed, values=not narrowed)
        problems += check_rules(self.engine, self.rules)
        order, cycle = topological(self.parameters)
        if cycle:
            problems.append(
                (
                    ("parameters", cycle[0], "condition"),
                    "conditions form a cycle: " + " -> ".join(cycle),
                )
            )
        if problems:
            raise Problems(problems)
        self._order = order
        return self

    # --- configurations -------------------------------------------------------------------

    def _ordered(self, config: Mapping[str, ConfigValue]) -> Config:
        out = {name: config.get(name) for name in self.parameters}
        out.update(self.fixed)
        return out

    def resolve(self, values: Mapping[str, ConfigValue]) -> Config:
        """A full configuration from parameter values: inactive parameters become None (also
        when `values` sets them, as `study.ask(fixed_distributions)` does), missing ones None,
        fixed fields merged."""
        config: Config = dict(self.fixed)
        for name in self._order:
            p = self.parameters[name]
            config[name] = p.from_optuna(values.get(name)) if p.is_active(config) else None
        return self._ordered(config)

    def suggest(self, trial: optuna.trial.BaseTrial) -> Config:
        """Suggest every active parameter through `trial` (parents before the parameters whose
        condition names them); inactive ones are not suggested and are None."""
        config: Config = dict(self.fixed)
        for name in self._order:
            p = self.parameters[name]
            config[name] = p.suggest(trial, name) if p.is_active(config) else None
        return self._ordered(config)

    def defaults(self) -> Config:
        """The baseline configuration (trial 0): every parameter at its engine default."""
        return self.resolve({n: p.default for n, p in self.parameters.items()})

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        """Optuna distributions of all parameters (for `study.ask(fixed_distributions=...)`;
        pass the sampled params through `resolve` to apply the conditions)."""
        return {n: p.distribution() for n, p in self.parameters.items()}

    def trial_params(self, config: Mapping[str, object]) -> dict[str, object]:
        """The Optuna params of a valid configuration, for `study.enqueue_trial`: every active
        parameter with a value of its domain. None is kept where it is a choice (no
        speculation); elsewhere None ("engine decides") has no Optuna value and is left to the
        sampler."""
        self.validate_config(config)
        values: dict[str, object] = dict(self.fixed)
        out: dict[str, object] = {}
        for name in self._order:
            p = self.parameters[name]
            values[name] = value = config.get(name)
            if p.is_active(values) and (value is not None or p.contains(None)):
                out[name] = p.to_optuna(value)  # type: ignore[arg-type]  # validated above
        return out

    def validate_config(self, config: Mapping[str, object], *, source: str = "config") -> None:
        """Raise ConfigError unless every value lies in its parameter's domain, inactive
        parameters are unset (None), fixed fields are absent or equal, and no key is unknown."""
        problems: list[tuple[Path, str]] = []
        known = [*self.parameters, *self.fixed]
        for key in config:
            if key not in self.parameters and key not in self.fixed:
                hint = valid_hint(key, known)
                problems.append(((key,), f"not a parameter or fixed field of this space{hint}"))
        for key, fixed in self.fixed.items():
            if key in config and not same(config[key], fixed):
                problems.append(((key,), f"is fixed to {show(fixed)}, got {show(config[key])}"))
        values: dict[str, object] = dict(self.fixed)
        for name in self._order:
            p = self.parameters[name]
            value = values[name] = config.get(name)
            if value is None:
                continue
            if not p.is_active(values):
                problems.append(
                    (
                        (name,),
                        f"is set to {show(value)} but inactive: it applies only when "
                        f"{p.condition_text()}",
                    )
                )
            elif not p.contains(value):
                problems.append(((name,), f"{show(value)} is outside the domain {p.domain()}"))
        if problems:
            raise _config_error(problems, source)

    # --- enumeration ----------------------------------------------------------------------

    def _components(self) -> list[list[str]]:
        """Parameters linked by conditions, each group in suggestion order."""
        parent = {n: n for n in self.parameters}

        def root(n: str) -> str:
            while parent[n] != n:
                n = parent[n]
            return n

        for name, p in self.parameters.items():
            for group in p.condition or ():
                for key in group:
                    if key in parent:
                        parent[root(key)] = root(name)
        groups: dict[str, list[str]] = {}
        for name in self._order:
            groups.setdefault(root(name), []).append(name)
        return list(groups.values())

    def _assignments(self, names: list[str]) -> list[Config]:
        out: list[Config] = [{}]
        for name in names:
            p = self.parameters[name]
            grown = []
            for partial in out:
                values = {**self.fixed, **partial}
                if p.is_active(values):
                    grown += [{**partial, name: v} for v in _grid(p, name)]
                else:
                    grown.append({**partial, name: None})
            out = grown
        return out

    def size(self) -> int:
        """How many configurations `grid()` yields (conditional parameters count only where
        they are active). Raises ConfigError for a float without `step` or `grid`."""
        total = 1
        for names in self._components():
            if len(names) == 1 and self.parameters[names[0]].condition is None:
                total *= _grid_count(self.parameters[names[0]], names[0])
            else:
                total *= len(self._assignments(names))
        return total

    def grid(self, max_points: int | None = None) -> Iterator[Config]:
        """Every configuration of the space, lazily. With `max_points`, a space larger than
        that raises ConfigError first (an exhaustive search must not be cut short silently)."""
        if max_points is not None:
            n = self.size()
            if n > max_points:
                raise ConfigError(
                    f"the grid has {n} configurations, more than max_points={max_points}; "
                    "narrow the space (with_overrides) or raise the limit"
                )
        parts = [self._assignments(names) for names in self._components()]
        for combo in itertools.product(*parts):
            config: Config = {}
            for part in combo:
                config.update(part)
            yield self._ordered(config)

    def to_dict(self) -> dict[str, Any]:
        """Plain data that validates back to an equal space (what a YAML file holds)."""
        data = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        data["engine"] = self.engine
        for name, p in self.parameters.items():
            data.setdefault("parameters", {})[name]["type"] = p.type
        return data

    # --- rules and derived spaces ----------------------------------------------------------

    def check(
        self, config: Mapping[str, object], context: RuleContext, *, include_info: bool = False
    ) -> list[Violation]:
        """Rules `config` breaks on `context` (constraints; info rules too if asked)."""
        return check(self.rules, config, context, include_info=include_info)

    def with_overrides(
        self, overrides: Mapping[str, Any], *, source: str = "overrides"
    ) -> SearchSpace:
        """A new space with parameters narrowed, fixed or added, validated like a file.

        `{name: {low: 0.85, choices: [...], ...}}` replaces those keys of a parameter (a new
        `type` replaces it whole, an unknown name with `type` adds one); `{name: value}` fixes a
        parameter (the value must be in its domain; None: the engine decides) or sets a fixed
        field. A fixed parameter moves to `fixed`, unless it has a condition: then it becomes a
        one-choice parameter that is still set only where its condition holds.
        """
        data = self.to_dict()
        params: dict[str, Any] = data.setdefault("parameters", {})
        fixed: dict[str, Any] = data.setdefault("fixed", {})
        fields = ENGINE_FIELDS.get(self.engine, frozenset())
        problems: list[tuple[Path, str]] = []
        for name, ov in overrides.items():
            spec = isinstance(ov, Mapping)
            if name in params:
                if not spec:
                    p = self.parameters[name]
                    if ov is not None and not p.contains(ov):
                        problems.append(((name,), f"{show(ov)} is outside {p.domain()}"))
                    if p.condition:  # keep it conditional: set only where it is active
                        params[name] = {
                            "type": "categorical",
                            "choices": [ov],
                            "condition": params[name]["condition"],
                            "description": p.description,
                        }
                        if same(p.default, ov):
                            params[name]["default"] = ov
                    else:
                        del params[name]
                        fixed[name] = ov
                elif "type" in ov and ov["type"] != params[name]["type"]:
                    params[name] = dict(ov)
                else:
                    params[name] = merged = {**params[name], **ov}
                    _regrid(merged, ov)
                    outside = _range_outside(self.parameters[name], merged)
                    if outside:
                        problems.append(((name,), outside))
            elif name in fixed or name in fields:
                if spec and "type" not in ov:
                    problems.append(((name,), "a new parameter needs `type`"))
                elif spec:
                    fixed.pop(name, None)
                    params[name] = dict(ov)
                else:
                    fixed[name] = ov
            else:
                problems.append(((name,), f"unknown parameter{field_hint(name, fields)}"))
        if problems:
            raise _config_error(problems, source)
        try:
            return SearchSpace.model_validate(data, context={"narrowed": True})
        except ValidationError as exc:
            raise config_error(exc, source, data=data, root=SearchSpace) from None


def _regrid(merged: dict[str, Any], override: Mapping[str, Any]) -> None:
    """A narrowed range keeps the points of its parameter's grid that it still holds (none
    left: no grid, the range's own steps)."""
    grid = merged.get("grid")
    if not grid or "grid" in override or not {"low", "high", "step"} & set(override):
        return
    low, high, step = merged.get("low"), merged.get("high"), merged.get("step")
    if not (isinstance(low, int | float) and isinstance(high, int | float)):
        return
    kept = [
        g
        for g in grid
        if low <= g <= high
        and (not step or abs((g - low) / step - round((g - low) / step)) < 1e-9)
    ]
    if kept:
        merged["grid"] = kept
    else:
        merged.pop("grid", None)


def _range_outside(p: ParamBase, merged: Mapping[str, object]) -> str:
    """A narrowed numeric range that shares no value with the parameter's domain is refused,
    like a single value outside it (it would only produce configurations the gate rejects)."""
    low, high = merged.get("low"), merged.get("high")
    if not isinstance(p, IntParam | FloatParam) or merged.get("type", p.type) != p.type:
        return ""
    if not (isinstance(low, int | float) and isinstance(high, int | float)) or low > high:
        return ""  # the model validation reports the malformed range
    if high < p.low or low > p.high:
        return (
            f"the range {show(low)}..{show(high)} lies entirely outside {p.domain()}; "
            "give a range that overlaps it"
        )
    return ""


def _grid(p: ParamBase, name: str) -> Sequence[ConfigValue]:
    try:
        return p.grid_values()
    except ConfigError as exc:
        raise ConfigError(str(exc), field=f"parameters.{name}") from None


def _grid_count(p: ParamBase, name: str) -> int:
    try:
        return p.grid_count()
    except ConfigError as exc:
        raise ConfigError(str(exc), field=f"parameters.{name}") from None


def _config_error(problems: list[tuple[Path, str]], source: str) -> ConfigError:
    if len(problems) == 1:
        path, msg = problems[0]
        return ConfigError(msg, source=source, field=dotted(path))
    lines = "\n".join(f"  {source}: {dotted(p)}: {m}" for p, m in problems)
    return ConfigError(f"{len(problems)} problems:\n{lines}", source=source)
