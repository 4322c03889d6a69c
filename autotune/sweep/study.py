"""The Optuna side of a sweep: the study in the project database, the sampler, enqueued seeds
(baseline, known-good, reruns of interrupted trials) and what each trial tells back.

Outcomes map to Optuna states so the sampler learns from every one of them:
    complete          COMPLETE with the objective value(s); constraints from measurements
    planner-pruned    PRUNED with positive constraints (rules, planner, headroom, KV fit): TPE
                      puts infeasible trials in its "bad" group, so it stops proposing them
    probe-pruned      PRUNED with the probe figure as intermediate value
    failed at launch  PRUNED with constraint launch_failed = 1 (infeasible, for the same reason)
    interrupted       FAIL (ignored by the sampler); its configuration is enqueued again
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from autotune.space.models import SearchSpace

T = TypeVar("T")

if TYPE_CHECKING:
    import optuna

    from autotune.sweep.spec import SweepSpec

CONFIG_ATTR = "autotune_config"  # exact configuration of an enqueued trial
SOURCE_ATTR = "autotune_source"  # baseline, known_good:K1, rerun:#12, grid


RERUN_PREFIX = "rerun:#"


def rerun_source(number: int | None) -> str:
    """The source of trial `number`'s configuration run once more ("rerun:#12")."""
    return f"{RERUN_PREFIX}{number}"


def last_rerun(
    first: T,
    rows: Sequence[T],
    *,
    number: Callable[[T], int | None],
    source: Callable[[T], Any],
    not_measured: Callable[[T], bool],
) -> T:
    """`first`, or the last re-run the sweep made of it while a run was not measured
    (interrupted, or failed for a reason that was not the configuration's), followed through
    a re-run's own re-run (a second resume). The rows are the store's or the report's."""
    seen: set[int | None] = set()
    found = first
    while number(found) not in seen and not_measured(found):
        seen.add(number(found))
        again = [r for r in rows if source(r) == rerun_source(number(found))]
        if not again:
            break
        found = again[-1]
    return found


def config_key(config: Mapping[str, Any]) -> str:
    """Canonical text of a configuration (dedupe key)."""
    return json.dumps(
        {k: v for k, v in config.items() if v is not None}, sort_keys=True, default=str
    )


def optuna_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's storage in the project database. On SQLite its connections get the pragmas our
    Store uses: WAL with synchronous=NORMAL survives a killed process (only a power cut can
    lose the last commits) and saves an fsync per commit (~7 ms each; Optuna commits dozens of
    times per trial)."""
    import optuna

    sqlite = url.startswith("sqlite")
    kwargs: dict[str, Any] = (
        {"connect_args": {"timeout": 30}} if sqlite else {"pool_pre_ping": True}
    )
    storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    if sqlite:
        from sqlalchemy import event

        event.listen(storage.engine, "connect", _sqlite_pragmas)
        storage.engine.dispose()  # pooled connections were opened before the listener
    return storage


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
    finally:
        cur.close()


def make_sampler(
    spec: SweepSpec, *, workers: int, seed_offset: int = 0
) -> optuna.samplers.BaseSampler:
    """Constrained TPE by default (independent per parameter), random as a baseline; grid =
    random sampler over an enqueued enumeration. `seed_offset` varies the stream on resume (a
    resumed sampler restarting from the same seed would propose the same configurations again).

    Independent rather than multivariate/grouped TPE: on the conditional SGLang spaces
    (speculation parameters exist only with an algorithm) the grouped model reached the
    optimum within 3 % in 4 of 8 seeds where independent TPE did in 7 of 8
    (benchmarks/sweep_quality.py)."""
    import optuna

    seed = spec.search.seed + seed_offset
    if spec.search.sampler != "tpe":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=spec.search.n_startup_trials,
        constant_liar=workers > 1,  # concurrent trials: avoid proposing the running ones
    )


def study_name(spec: SweepSpec) -> str:
    """The sweep's study in the project database (and the sweep row's optuna_study_name)."""
    return f"autotune/{spec.name}"


def open_study(spec: SweepSpec, *, url: str, study_name: str, workers: int) -> optuna.Study:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna_storage(url)
    directions = [r.direction or "maximize" for r in spec.objective_refs()]
    existing = 0
    with contextlib.suppress(KeyError):  # no such study yet: a fresh one
        existing = len(optuna.load_study(study_name=study_name, storage=storage).trials)
    return optuna.create_study(
        study_name=study_name,
        storage=storage,
        sampler=make_sampler(spec, workers=workers, seed_offset=existing),
        directions=directions,
        load_if_exists=True,
    )


def enqueue(
    study: optuna.Study, space: SearchSpace, config: Mapping[str, Any], source: str
) -> None:
    """Queue an exact configuration. Its non-None parameters become the trial's fixed params;
    the whole configuration travels in a user attribute (None values: the engine decides)."""
    params = {
        n: p.to_optuna(config[n]) for n, p in space.parameters.items() if config.get(n) is not None
    }
    study.enqueue_trial(
        params,
        user_attrs={CONFIG_ATTR: dict(config), SOURCE_ATTR: source},
        skip_if_exists=False,
    )


def config_for(trial: optuna.Trial, space: SearchSpace) -> tuple[dict[str, Any], str]:
    """The configuration of an asked trial and where it came from.

    Enqueued trials carry their configuration: only its set parameters are suggested (they
    are fixed, so the sampler returns them and Optuna records them as the trial's params).
    """
    fixed = trial.user_attrs.get(CONFIG_ATTR)
    source = str(trial.user_attrs.get(SOURCE_ATTR, "sampler"))
    if isinstance(fixed, dict):
        for name, p in space.parameters.items():
            if fixed.get(name) is not None:
                p.suggest(trial, name)
        return dict(fixed), source
    return space.suggest(trial), source


CONSTRAINT_KEY = "autotune"


def set_constraints(trial: optuna.Trial, constraints: Mapping[str, float]) -> None:
    """One Optuna constraint standing for all of ours: the sum of the violations when any is
    violated, else the largest (<= 0) value. TPE reads exactly that (feasible iff every value
    is <= 0; infeasible trials ranked by the sum of positive values), at one storage write
    instead of one per constraint. The named values are kept in our database."""
    if not constraints:
        return
    values = [float(v) for v in constraints.values()]
    positive = sum(v for v in values if v > 0)
    trial.set_constraint(CONSTRAINT_KEY, positive if positive > 0 else max(values))


def trial_handle(study: optuna.Study, number: int) -> optuna.Trial:
    """A Trial object for a trial of this study by number (to set constraints on resume)."""
    import optuna

    frozen = study.trials[number]
    return optuna.trial.Trial(study, frozen._trial_id)


def user_constraints(
    figures: Mapping[str, float | None], constraints: Sequence[Any]
) -> dict[str, float]:
    """objective.constraints as Optuna constraint values (> 0: violated), relative to the
    bound so that different units weigh alike. A missing figure counts as violated."""
    out: dict[str, float] = {}
    for c in constraints:
        v = figures.get(c.metric)
        if c.max is not None:
            out[f"{c.metric}<={c.max:g}"] = (
                1.0 if v is None else (v - c.max) / max(abs(c.max), 1e-9)
            )
        if c.min is not None:
            out[f"{c.metric}>={c.min:g}"] = (
                1.0 if v is None else (c.min - v) / max(abs(c.min), 1e-9)
            )
    return out
