"""Checks across a whole space: names are engine fields, conditions name real parameters and
values they can take, rule keys are fields or context facts, conditions have no cycle."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

from autotune.errors import did_you_mean
from autotune.space.engine_fields import ENGINE_FIELDS
from autotune.space.params import BoolParam, CategoricalParam, ParamBase, Path, show
from autotune.space.rules import FACTS, Rule, is_version

Parameters = Mapping[str, ParamBase]


def valid_hint(name: str, valid: list[str] | tuple[str, ...]) -> str:
    """Error-message tail: `; did you mean 'x'? valid: a, b` (or `; valid: a, b`)."""
    text = did_you_mean(name, list(valid))
    return text if text.startswith(";") else ";" + text


def field_hint(name: str, fields: frozenset[str]) -> str:
    close = difflib.get_close_matches(name, sorted(fields), n=2, cutoff=0.8)
    if close:
        return f"; did you mean {' or '.join(repr(c) for c in close)}?"
    return "; not a field of the engine's server arguments"


def check_names(
    engine: str, parameters: Parameters, fixed: Mapping[str, object]
) -> list[tuple[Path, str]]:
    fields = ENGINE_FIELDS.get(engine)
    if fields is None:
        return [
            (
                ("engine",),
                f"unknown engine {engine!r}{valid_hint(engine, sorted(ENGINE_FIELDS))}",
            )
        ]
    problems: list[tuple[Path, str]] = []
    for name in parameters:
        if name not in fields:
            problems.append((("parameters", name), f"unknown parameter{field_hint(name, fields)}"))
    for name in fixed:
        if name not in fields:
            problems.append((("fixed", name), f"unknown field{field_hint(name, fields)}"))
        elif name in parameters:
            problems.append(
                (("fixed", name), "is also a parameter; a field is either searched or fixed")
            )
    return problems


def check_conditions(
    parameters: Parameters, fixed: Mapping[str, object], *, values: bool
) -> list[tuple[Path, str]]:
    problems: list[tuple[Path, str]] = []
    known = [*parameters, *fixed]
    for name, p in parameters.items():
        groups = p.condition or []
        for i, group in enumerate(groups):
            base: Path = (
                ("parameters", name, "condition", i)
                if len(groups) > 1
                else ("parameters", name, "condition")
            )
            for key, match in group.items():
                if key == name:
                    problems.append(((*base, key), "a parameter cannot depend on itself"))
                    continue
                target = parameters.get(key)
                if target is None and key not in fixed:
                    hint = valid_hint(key, [k for k in known if k != name])
                    problems.append(((*base, key), f"unknown parameter{hint}"))
                    continue
                if values and isinstance(target, CategoricalParam | BoolParam):
                    for v in match.values():
                        if v is not None and not target.contains(v):
                            problems.append(
                                (
                                    (*base, key),
                                    f"{show(v)} is never a value of {key}; "
                                    f"valid: {target.domain()}",
                                )
                            )
    return problems


def check_rules(engine: str, rules: Sequence[Rule]) -> list[tuple[Path, str]]:
    problems: list[tuple[Path, str]] = []
    fields = ENGINE_FIELDS.get(engine, frozenset())
    seen: set[str] = set()
    for i, rule in enumerate(rules):
        if rule.id in seen:
            problems.append((("rules", i, "id"), f"rule id {rule.id!r} is used twice"))
        seen.add(rule.id)
        for part in ("when", "require"):
            for key, match in getattr(rule, part).items():
                path: Path = ("rules", i, part, key)
                if "." in key:
                    if key not in FACTS:
                        problems.append(
                            (path, f"unknown context fact{valid_hint(key, list(FACTS))}")
                        )
                    elif key == "engine.version":
                        bad = [
                            b for b in [*match.bounds(), *match.values()] if not is_version(str(b))
                        ]
                        problems += [(path, f"{b!r} is not a version number") for b in bad]
                elif key not in fields:
                    problems.append((path, f"unknown field{field_hint(key, fields)}"))
    return problems


def topological(parameters: Parameters) -> tuple[tuple[str, ...], list[str]]:
    """Parameters ordered parents first (file order otherwise), or a cycle."""
    deps = {
        n: [k for g in (p.condition or ()) for k in g if k in parameters and k != n]
        for n, p in parameters.items()
    }
    order: list[str] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(n: str, stack: list[str]) -> list[str]:
        if state.get(n) == 2:
            return []
        if state.get(n) == 1:
            return [*stack[stack.index(n) :], n]
        state[n] = 1
        for d in deps[n]:
            cycle = visit(d, [*stack, n])
            if cycle:
                return cycle
        state[n] = 2
        order.append(n)
        return []

    for n in parameters:
        cycle = visit(n, [])
        if cycle:
            return (), cycle
    return tuple(order), []
