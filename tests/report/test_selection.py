"""Which trial is the baseline: after a resume, the re-run of an interrupted baseline (the
interrupted row has no value to compare with)."""

from __future__ import annotations

from pathlib import Path

from autotune.report.collect.data import TrialInfo
from autotune.report.collect.selection import find_baseline
from autotune.store.db import Store
from autotune.store.models import TrialRow
from autotune.sweep.outcome import _baseline as outcome_baseline


def _trials() -> list[TrialInfo]:
    return [
        TrialInfo(id=1, number=0, status="interrupted", source="baseline"),
        TrialInfo(id=2, number=1, status="complete", value=10.0, source="sampler"),
        TrialInfo(id=3, number=2, status="complete", value=8.0, source="rerun:#0"),
    ]


def test_an_interrupted_baseline_is_replaced_by_its_rerun(tmp_path: Path) -> None:
    store = Store(path=tmp_path / "db.sqlite")
    try:
        row = store.create_sweep("s", spec_yaml="name: s\n")
        notes: list[str] = []
        found = find_baseline(row, _trials(), store, notes)
        assert found is not None and found.number == 2 and found.baseline and found.value == 8.0
        # found by number (no source recorded): the same rule
        by_number = [t.model_copy(update={"source": None}) for t in _trials()[:2]]
        by_number.append(_trials()[2])
        found = find_baseline(row, by_number, store, notes)
        assert found is not None and found.number == 2
        # a baseline that ran is itself, whatever re-runs exist
        ran = [_trials()[0].model_copy(update={"status": "complete", "value": 7.0})]
        found = find_baseline(row, [*ran, *_trials()[1:]], store, notes)
        assert found is not None and found.number == 0
    finally:
        store.close()


def test_the_outcome_names_the_same_baseline() -> None:
    rows = [
        TrialRow(id=1, sweep_id=1, number=0, status="interrupted", prediction={"fits": True}),
        TrialRow(id=3, sweep_id=1, number=2, status="complete", launch={"source": "rerun:#0"}),
    ]
    found = outcome_baseline(rows)
    assert found is not None and found.number == 2


def test_the_reference_run_is_never_cut(tmp_path: Path) -> None:
    # after a resume the best probe is known; the baseline's re-run must still run whole, or
    # the report has nothing to compare with (a helper found it cut and left interrupted)
    from autotune.sweep.setup import prepare
    from autotune.sweep.spec import parse_spec
    from tests.sweep.conftest import make_spec

    spec = parse_spec(make_spec())
    store = Store(path=tmp_path / "db.sqlite")
    try:
        row = store.create_sweep("t", spec_yaml="name: t\n", gpu=spec.target.gpu)
        setup = prepare(spec, store=store, row=row, out_dir=tmp_path, notes={})
        searched = setup.trial_spec(5, {}, repeat=0, best_probe=100.0, best_wall_s=10.0)
        ref = setup.trial_spec(5, {}, repeat=0, best_probe=100.0, best_wall_s=10.0, reference=True)
        assert searched.probe_threshold is not None
        assert ref.probe_threshold is None and ref.cut_after_s is None
    finally:
        store.close()


def test_a_baseline_interrupted_twice_is_followed_to_its_last_rerun(tmp_path: Path) -> None:
    trials = [
        TrialInfo(id=1, number=0, status="interrupted", source="baseline"),
        TrialInfo(id=2, number=5, status="interrupted", source="rerun:#0"),
        TrialInfo(id=3, number=9, status="complete", value=8.0, source="rerun:#5"),
    ]
    store = Store(path=tmp_path / "db.sqlite")
    try:
        row = store.create_sweep("s", spec_yaml="name: s\n")
        found = find_baseline(row, trials, store, [])
        assert found is not None and found.number == 9
    finally:
        store.close()
    rows = [
        TrialRow(id=1, sweep_id=1, number=0, status="interrupted", launch={"source": "baseline"}),
        TrialRow(id=2, sweep_id=1, number=5, status="interrupted", launch={"source": "rerun:#0"}),
        TrialRow(id=3, sweep_id=1, number=9, status="complete", launch={"source": "rerun:#5"}),
    ]
    found_row = outcome_baseline(rows)
    assert found_row is not None and found_row.number == 9


def test_a_rerun_of_a_rerun_of_the_baseline_is_a_reference() -> None:
    import optuna

    from autotune.sweep.asking import is_reference
    from autotune.sweep.study import SOURCE_ATTR

    study = optuna.create_study()
    for source in ("baseline", "sampler", "rerun:#0", "rerun:#1", "rerun:#2"):
        study.enqueue_trial({}, user_attrs={SOURCE_ATTR: source})
        study.ask()

    class State:  # what is_reference reads of the sweep's state
        pass

    state = State()
    state.study = study  # type: ignore[attr-defined]
    assert is_reference(state, "baseline")  # type: ignore[arg-type]
    assert is_reference(state, "rerun:#0") and is_reference(state, "rerun:#2")  # type: ignore[arg-type]
    assert not is_reference(state, "rerun:#1") and not is_reference(state, "sampler")  # type: ignore[arg-type]
