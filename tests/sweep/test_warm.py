"""Warm starts (sweep/warm.py): a fresh sweep queues the winners of earlier sweeps on the same
target in the same database right after the baseline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.sweep.analytic import AnalyticExecutor
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.spec import parse_spec
from autotune.sweep.warm import sources
from tests.sweep.conftest import make_spec

SEARCHED = (
    "mem_fraction_static",
    "max_running_requests",
    "max_mamba_cache_size",
    "chunked_prefill_size",
    "kv_cache_dtype",
)


def _sweep(store: Any, tmp_path: Path, name: str, **changes: Any) -> Any:
    data = make_spec(**{"name": name, "budget.max_trials": 8, **changes})
    return run_sweep(
        parse_spec(data),
        store=store,
        out_dir=tmp_path / name,
        executor=AnalyticExecutor(1),
        install_signals=False,
    )


def _trials(store: Any, name: str) -> list[Any]:
    return store.get_trials(store.get_sweep(name).id)


def _seeds(store: Any, name: str) -> list[dict[str, Any]]:
    return list((store.get_sweep(name).notes or {}).get("seeds", []))


def _winner(store: Any, name: str) -> Any:
    number = store.get_sweep(name).notes["selection"]["winner"]
    return next(t for t in _trials(store, name) if t.number == number)


def _searched(config: dict[str, Any]) -> dict[str, Any]:
    return {k: config.get(k) for k in SEARCHED}


def test_a_second_sweep_starts_from_the_first_ones_winner(store: Any, tmp_path: Path) -> None:
    _sweep(store, tmp_path, "first")
    best = _winner(store, "first")
    assert best.number != 0, "the test wants a winner that is not the baseline"
    _sweep(store, tmp_path, "second")
    rows = _trials(store, "second")
    assert rows[0].launch["source"] == "baseline"
    # the first launch after the baseline is the first sweep's winner, as it was measured
    assert rows[1].launch["source"] == f"warm:first#{best.number}"
    assert _searched(rows[1].config) == _searched(best.config)
    # then its runner-up (warm_start 2, one earlier sweep): a feasible configuration of the
    # first sweep, none better than the winner
    runner = rows[2].launch["source"]
    assert runner.startswith("warm:first#") and runner != rows[1].launch["source"]
    number = int(runner.rpartition("#")[2])
    second = next(t for t in _trials(store, "first") if t.number == number)
    assert _searched(rows[2].config) == _searched(second.config)
    assert second.value <= best.value
    seeds = {s["id"]: s for s in _seeds(store, "second")}
    assert seeds[f"warm:first#{best.number}"]["enqueued"]
    assert "'first'" in seeds[f"warm:first#{best.number}"]["source"]
    notes = store.get_sweep("second").notes
    assert notes["launches_by_source"]["warm"] == 2
    # the first sweep had no earlier sweep; it is never its own source
    assert not any(s["id"].startswith("warm:") for s in _seeds(store, "first"))

    # a resumed sweep does not queue them again
    run_sweep(
        parse_spec(make_spec(**{"name": "second", "budget.max_trials": 8})),
        store=store,
        resume=True,
        max_trials=11,
        out_dir=tmp_path / "second",
        executor=AnalyticExecutor(1),
        install_signals=False,
    )
    sources_after = [(t.launch or {}).get("source", "") for t in _trials(store, "second")]
    assert len(sources_after) >= 11
    assert sum(1 for s in sources_after if s.startswith("warm:")) == 2


def test_no_warm_start_from_another_gpu_or_model(store: Any, tmp_path: Path) -> None:
    _sweep(store, tmp_path, "first")
    _sweep(store, tmp_path, "other-gpu", **{"target.gpu": "rtx-pro-4500-32g"})
    assert not any(s["id"].startswith("warm:") for s in _seeds(store, "other-gpu"))
    assert not any(
        (t.launch or {}).get("source", "").startswith("warm:") for t in _trials(store, "other-gpu")
    )
    # the sources of a target: the same engine, model, GPU and TP size are required
    same = parse_spec(make_spec(name="next"))
    metric = same.objective_refs()[0].metric
    assert [s.row.name for s in sources(store, same, "rtx-4080-super-32g", metric)] == ["first"]
    for change in (
        {"target.model": "qwen3.8-27b-nvfp4"},
        {"target.tp": 2},
        {"target.engine_version": "0.5.18"},
    ):
        spec = parse_spec(make_spec(name="next", **change))
        found = [s.row.name for s in sources(store, spec, "rtx-4080-super-32g", metric)]
        if "target.engine_version" in change:
            assert found == ["first"]  # another release still transfers, ranked behind
            assert not sources(store, spec, "rtx-4080-super-32g", metric)[0].same_version
        else:
            assert found == [], change


def test_a_value_outside_the_new_space_is_dropped_with_the_reason(
    store: Any, tmp_path: Path
) -> None:
    _sweep(store, tmp_path, "first")
    best = _winner(store, "first")
    old = best.config["mem_fraction_static"]
    assert old is not None and old < 0.92
    _sweep(
        store,
        tmp_path,
        "narrow",
        **{
            "search.warm_start": 1,
            "space.overrides.mem_fraction_static": {"low": 0.92, "high": 0.94, "step": 0.02},
        },
    )
    seed = next(s for s in _seeds(store, "narrow") if s["id"].startswith("warm:"))
    assert seed["id"] == f"warm:first#{best.number}" and seed["enqueued"]
    assert f"mem_fraction_static={old!r}" in seed["source"] and "outside" in seed["source"]
    row = next(t for t in _trials(store, "narrow") if t.launch["source"] == seed["id"])
    # the engine decides the fraction; every other searched value is the winner's
    assert row.config["mem_fraction_static"] is None
    kept = [k for k in SEARCHED if k != "mem_fraction_static"]
    assert {k: row.config[k] for k in kept} == {k: best.config[k] for k in kept}
    # warm_start 1: the runner-up is not queued
    assert sum(1 for s in _seeds(store, "narrow") if s["id"].startswith("warm:")) == 1


def test_warm_start_0_turns_it_off(store: Any, tmp_path: Path) -> None:
    _sweep(store, tmp_path, "first")
    _sweep(store, tmp_path, "cold", **{"search.warm_start": 0})
    assert not any(s["id"].startswith("warm:") for s in _seeds(store, "cold"))
    assert "warm" not in store.get_sweep("cold").notes["launches_by_source"]


def test_the_report_names_the_earlier_sweep(store: Any, tmp_path: Path) -> None:
    from autotune.report.writer import write_report

    _sweep(store, tmp_path, "first")
    best = _winner(store, "first")
    _sweep(store, tmp_path, "second", **{"search.warm_start": 1})
    launched = next(
        t.number
        for t in _trials(store, "second")
        if t.launch["source"] == f"warm:first#{best.number}"
    )
    paths = write_report(store, "second", tmp_path / "report", plots=False)
    text = Path(paths.report_md).read_text()
    assert "Started from earlier sweeps" in text
    assert f"`warm:first#{best.number}` (trial #{launched}): the winner" in text
    assert "'first'" in text
    cold = write_report(store, "first", tmp_path / "report-first", plots=False)
    assert "Started from earlier sweeps" not in Path(cold.report_md).read_text()
