"""What the Optuna study beside the sweep says: the baseline trial it marked, and the
parameters' importances for the main objective."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from autotune.report.collect.data import Direction, Importances

if TYPE_CHECKING:
    from autotune.store.db import Store
    from autotune.store.models import SweepRow

MIN_TRIALS_FOR_IMPORTANCE = 4
FEW_TRIALS = 12


def load_study(store: Store, row: SweepRow) -> Any:
    if not row.optuna_study_name:
        return None
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return optuna.load_study(study_name=row.optuna_study_name, storage=store.storage_url)
    except Exception:  # no study (a sweep stored by hand), or an unreadable one
        return None


def baseline_from_study(store: Store, row: SweepRow) -> int | None:
    study = load_study(store, row)
    if study is None:
        return None
    try:
        from autotune.sweep.study import SOURCE_ATTR
    except ImportError:  # pragma: no cover - the sweep package is part of autotune
        SOURCE_ATTR = "autotune_source"
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(SOURCE_ATTR) == "baseline":
            return int(t.number)
    return None


def importances(store: Store, row: SweepRow, refs: Sequence[tuple[str, Direction]]) -> Importances:
    """Importances of the parameters for the main objective, from the Optuna study in the same
    database. Too few complete trials, or no study, gives a note instead."""
    study = load_study(store, row)
    if study is None:
        return Importances(note="no Optuna study found in the database for this sweep")
    import optuna

    complete = [
        t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE
    ]
    varied = {k for t in complete for k in t.params}
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCE or not varied:
        return Importances(
            note=f"too few completed trials with sampled parameters ({len(complete)}; at least "
            f"{MIN_TRIALS_FOR_IMPORTANCE} are needed) to estimate importances"
        )
    target = None
    if len(study.directions) > 1:

        def target(t: optuna.trial.FrozenTrial) -> float:
            return float(t.values[0])

    # PED-ANOVA (Optuna 5's default evaluator) also ranks conditional parameters,
    # which a sweep has many of (HiCache size only with HiCache on, draft tokens only with
    # speculation); fANOVA would drop every parameter absent from one completed trial.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), target=target
            )
    except (RuntimeError, ValueError, ZeroDivisionError) as exc:
        return Importances(note=f"importances could not be computed: {exc}")
    if not values:
        return Importances(note="no sampled parameter to rank")
    notes = []
    left_out = sorted(varied - set(values))
    if left_out:
        notes.append(f"not ranked (absent from too many trials): {', '.join(left_out)}")
    if len(complete) < FEW_TRIALS:
        notes.append(f"only {len(complete)} completed trials: treat this as a rough ranking")
    return Importances(
        values={k: float(v) for k, v in values.items()},
        method=f"PED-ANOVA over {len(complete)} completed trials, objective {refs[0][0]}",
        note="; ".join(notes),
    )
