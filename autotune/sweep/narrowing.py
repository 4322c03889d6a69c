"""A search space narrowed to one target, so that the search never proposes what the target
cannot run: a flag its engine version lacks, a value that version's parser refuses (an attention
backend added in a later release), or a value a rule forbids on this GPU, model or version
alone (fa3 on an sm_120 card).

Two sources, both of them the project's facts, none restated here:
- the engine adapter, which knows every flag and value of each release (generated from the
  releases' own parsers): a value is dropped when this release's adapter refuses it and another
  release's takes it (a value that needs a companion field is the gate's business, not the
  release's); a flag no value of which this release takes is not searched;
- the space's constraint rules whose conditions name one parameter and target facts only
  (`when: {attention_backend: fa3}, require: {gpu.arch: {in: [...]}}`): a value that breaks
  one on this target is dropped.

What was dropped, and why, is returned so the sweep can say it (report, `autotune space show`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import ConfigError, UnknownNameError, UnsupportedFlagError, UserError
from autotune.space.models import SearchSpace
from autotune.space.params import CategoricalParam, ParamBase
from autotune.space.rules import FACTS, ConfigValue, Rule, RuleContext, same


@dataclass(frozen=True)
class Narrowed:
    """One parameter narrowed for the target: values dropped (all of them: `removed`)."""

    name: str
    dropped: tuple[ConfigValue, ...]
    reason: str
    removed: bool = False

    def text(self) -> str:
        if self.removed:
            return f"{self.name}: not searched ({self.reason})"
        vals = ", ".join("null" if v is None else str(v) for v in self.dropped)
        return f"{self.name}: {vals} dropped ({self.reason})"


def _releases(engine: str) -> tuple[str, ...]:
    """The releases the engine's adapter knows (its flag catalog's)."""
    if engine == "sglang":
        from autotune.engines.sglang.flags import SUPPORTED_VERSIONS

        return SUPPORTED_VERSIONS
    if engine == "vllm":
        from autotune.engines.vllm.flags import supported_versions
    elif engine == "llamacpp":
        from autotune.engines.llamacpp.flags import supported_versions
    else:
        return ()
    return tuple(supported_versions())


@functools.lru_cache(maxsize=8)
def flag_adapter(engine: str) -> Any:
    """The engine's adapter for checking flags and values only: llama.cpp's without looking
    for a llama-server binary (a broken $AUTOTUNE_LLAMA_SERVER is the launch's business)."""
    if engine == "llamacpp":
        from autotune.engines.llamacpp.adapter import LlamaCppAdapter

        return LlamaCppAdapter(binary="llama-server")
    from autotune.engines import get_adapter

    return get_adapter(engine)


@functools.lru_cache(maxsize=4096)
def _refusal(engine: str, version: str, name: str, value_json: str) -> UserError | None:
    """None when the engine's adapter builds `name: value` at `version`; else its error."""
    value = json.loads(value_json)
    try:
        flag_adapter(engine).build_command({name: value}, model="model", version=version)
    except (UnsupportedFlagError, UnknownNameError, ConfigError) as exc:
        return exc
    return None


def _problem(engine: str, version: str, name: str, value_json: str) -> str | None:
    why = _refusal(engine, version, name, value_json)
    return None if why is None else str(why)


def refusal(engine: str, version: str, name: str, value: Any) -> UserError | None:
    """Why `version` of `engine` cannot run `name: value` set alone (a flag it lacks, a value
    of the wrong type or outside the flag's choices, a field the launcher sets); None when it
    can. An unknown field is an UnknownNameError."""
    return _refusal(engine, version, name, json.dumps(value, default=str))


def needs_companion(why: UserError, name: str) -> bool:
    """Whether a refusal of `name: value` set alone is about another field it needs (SGLang's
    file backend directory, vLLM's speculative method without num_speculative_tokens): the
    search may set that field, so the value itself is not refused."""
    from autotune.errors import CompanionFieldError

    if isinstance(why, CompanionFieldError):
        return True
    return isinstance(why, ConfigError) and why.field is not None and why.field != name


def refused_by_every_release(engine: str, name: str, value: Any) -> UserError | None:
    """The newest release's refusal when no release of `engine` takes `name: value` alone
    (a value of the wrong type, a choice no parser has); None when one does, or when one's
    only objection is a companion field (needs_companion)."""
    newest: UserError | None = None
    for v in reversed(_releases(engine)):
        why = refusal(engine, v, name, value)
        if why is None or needs_companion(why, name):
            return None
        if isinstance(why, UnknownNameError):
            return why
        newest = newest or why
    return newest


def _release_refuses(engine: str, version: str, name: str, value: ConfigValue) -> str | None:
    """Why `version` refuses `name: value` where another release takes it (a flag or value
    that came or went); None when this release takes it, or when no release takes it alone
    (it needs a companion field, which is the gate's business, not the release's)."""
    key = json.dumps(value)
    why = _problem(engine, version, name, key)
    if why is None:
        return None
    if any(_problem(engine, v, name, key) is None for v in _releases(engine) if v != version):
        return why
    return None


def _version_problem(
    engine: str, version: str, name: str, p: ParamBase
) -> tuple[list[ConfigValue], str, bool]:
    """(values the release refuses, why, whether it refuses every value: the flag is absent)."""
    probe: list[ConfigValue]
    if isinstance(p, CategoricalParam):
        probe = [v for v in p.grid_values() if v is not None]
    else:
        try:
            probe = [p.grid_values()[0]]
        except ConfigError:
            probe = [getattr(p, "low", None)]
    problems = {i: _release_refuses(engine, version, name, v) for i, v in enumerate(probe)}
    if probe and all(m is not None for m in problems.values()):
        return [], str(problems[0]), True
    bad = [probe[i] for i, m in problems.items() if m is not None]
    why = next((m for m in problems.values() if m is not None), "")
    return bad, why, False


def _unary(rule: Rule, name: str, unknown: frozenset[str]) -> bool:
    """Whether `rule` is a constraint that names `name` and known target facts only."""
    keys = rule.keys()
    return (
        rule.kind == "constraint"
        and name in keys
        and all(k == name or (k in FACTS and k not in unknown) for k in keys)
    )


def narrow_to_target(
    space: SearchSpace,
    *,
    version: str | None,
    context: RuleContext | None = None,
    unknown: frozenset[str] | set[str] = frozenset(),
) -> tuple[SearchSpace, list[Narrowed]]:
    """`space` without the flags and values that `version` of its engine lacks and without
    the values a one-parameter rule forbids on `context` (None: no GPU/model facts, only the
    release is checked; rules that test an `unknown` fact are not used). A parameter left with no value, or with only null, is fixed to null
    ("the engine decides"); one left with a single value is fixed to it.
    """
    out: list[Narrowed] = []
    overrides: dict[str, Any] = {}
    for name, p in space.parameters.items():
        if version is not None:
            bad, why, absent = _version_problem(space.engine, version, name, p)
            if absent:
                out.append(Narrowed(name, (), why, removed=True))
                overrides[name] = None
                continue
        else:
            bad, why = [], ""
        if not isinstance(p, CategoricalParam):
            continue  # a range is narrowed by the planner's gate, not by value lists
        keep = [c for c in p.grid_values() if not any(same(c, b) for b in bad)]
        if bad:
            out.append(Narrowed(name, tuple(bad), why))
        if context is not None:
            for rule in (r for r in space.rules if _unary(r, name, frozenset(unknown))):
                refused = tuple(c for c in keep if rule.evaluate({name: c}, context) is not None)
                if refused:
                    out.append(
                        Narrowed(name, refused, f"{rule.id}: {rule.reason} [{rule.source}]")
                    )
                    keep = [c for c in keep if not any(same(c, r) for r in refused)]
        if len(keep) == len(p.choices):
            continue
        overrides[name] = _narrowed_param(p, keep)
    if not overrides:
        return space, out
    return space.with_overrides(overrides, source="target"), out


def _narrowed_param(p: CategoricalParam, keep: Sequence[ConfigValue]) -> Any:
    values = [v for v in keep if v is not None]
    if not values:
        return None
    if len(keep) == 1:
        return keep[0]
    default = p.default if any(same(p.default, k) for k in keep) else None
    return {"choices": list(keep), "default": default}
