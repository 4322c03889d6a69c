"""Gather everything a report shows from the results database into one typed ReportData.

Nothing here renders; it reads the sweep, its trials, measurements and failures, the Optuna
study beside them (importances), and derives what a person needs to act: winner vs baseline per
scenario with the spread over repeats, the top configurations as changes from the baseline, the
Pareto front, failures by class, what bounded concurrency, the headroom left, the decode ceiling,
and provenance. Missing pieces (a sweep still running, a failed baseline, too few trials) become
notes, never exceptions.

    data.py          ReportData and its parts, constants, conversions
    assemble.py      collect(): the sweep read and assembled
    spec.py          the stored spec, objectives, scenario order
    trials.py        one stored trial -> TrialInfo
    measurements.py  a trial's measurements summarized per scenario
    selection.py     baseline, finalists, winner
    study.py         the Optuna study: the baseline it marked, importances
    tables.py        winner vs baseline, top configurations, failure groups
    pareto.py        the Pareto front
    capacity.py      what bounded the winner's concurrency, the headroom left
    ceiling.py       the decode ceiling
    provenance.py    engine, GPU, driver, model hash, versions, times
"""

from autotune.report.collect.assemble import collect
from autotune.report.collect.ceiling import SPECULATIVE_FIELDS
from autotune.report.collect.data import (
    GIB,
    HOST_RAM_MARGIN_GIB,
    LOG_TAIL_LINES,
    SIDE_FIGURES,
    TOP_N,
    Capacity,
    Comparison,
    DecodeCeiling,
    Direction,
    FailureGroup,
    FailureInfo,
    Finalist,
    Importances,
    ParetoPoint,
    Provenance,
    RankedTrial,
    ReportData,
    ScenarioSummary,
    Selection,
    Spread,
    TrialInfo,
    jsonable,
)
from autotune.report.collect.measurements import summarize_measurements
from autotune.report.collect.pareto import pareto_front
from autotune.report.collect.provenance import MODEL_FILE_HEAD_BYTES, model_hash
from autotune.report.collect.study import FEW_TRIALS, MIN_TRIALS_FOR_IMPORTANCE, importances
from autotune.report.collect.tables import change_pct, config_changes

__all__ = [
    "FEW_TRIALS",
    "GIB",
    "HOST_RAM_MARGIN_GIB",
    "LOG_TAIL_LINES",
    "MIN_TRIALS_FOR_IMPORTANCE",
    "MODEL_FILE_HEAD_BYTES",
    "SIDE_FIGURES",
    "SPECULATIVE_FIELDS",
    "TOP_N",
    "Capacity",
    "Comparison",
    "DecodeCeiling",
    "Direction",
    "FailureGroup",
    "FailureInfo",
    "Finalist",
    "Importances",
    "ParetoPoint",
    "Provenance",
    "RankedTrial",
    "ReportData",
    "ScenarioSummary",
    "Selection",
    "Spread",
    "TrialInfo",
    "change_pct",
    "collect",
    "config_changes",
    "importances",
    "jsonable",
    "model_hash",
    "pareto_front",
    "summarize_measurements",
]
