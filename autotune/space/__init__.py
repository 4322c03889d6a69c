"""Search spaces: typed engine parameters with conditions, fixed flags and rules (FIELD-NOTES
P1..P14), loaded from `autotune/data/search_spaces/*.yaml`. Optuna is imported only when a trial is used."""

from autotune.space.loader import (
    builtin_space,
    builtin_spaces,
    dump_space,
    load_space,
    parse_space,
)
from autotune.space.models import (
    BoolParam,
    CategoricalParam,
    FloatParam,
    IntParam,
    SearchSpace,
)
from autotune.space.rules import Match, Rule, RuleContext, Violation, check

__all__ = [
    "BoolParam",
    "CategoricalParam",
    "FloatParam",
    "IntParam",
    "Match",
    "Rule",
    "RuleContext",
    "SearchSpace",
    "Violation",
    "builtin_space",
    "builtin_spaces",
    "check",
    "dump_space",
    "load_space",
    "parse_space",
]
