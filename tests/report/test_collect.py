"""collect(): what the report is built from, read back from a stored sweep."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import StorageError
from autotune.report.collect import collect, config_changes, pareto_front
from autotune.report.launch import REDACTED, Redactor

from .conftest import API_KEY, HF_TOKEN, Built, build_sweep


def test_baseline_winner_and_comparison(sweep_db: Built) -> None:
    data = collect(sweep_db.store, sweep_db.sweep)
    assert data.simulated is True
    assert data.objective_metric == "tput8.output_tok_s"
    assert data.baseline is not None and data.baseline.number == 0
    assert data.winner is not None and data.winner.number == sweep_db.winner_number
    assert data.scenarios == ["decode1", "tput4", "tput8"]
    by = {c.scenario: c for c in data.comparison}
    assert set(by) == {"decode1", "tput4", "tput8"}
    tput8 = by["tput8"]
    assert tput8.figure == "output_tok_s" and tput8.higher_is_better
    assert tput8.baseline is not None and tput8.winner is not None
    # Spread over every repeat of every run: 2 repeats x (search run + 2 finalist runs).
    assert len(tput8.winner.values) == 6 and tput8.winner.runs == 3
    assert len(tput8.baseline.values) == 2
    assert tput8.winner.stdev is not None and tput8.winner.min <= tput8.winner.max
    assert tput8.change_pct is not None and tput8.change_pct > 0 and tput8.better
    assert "ttft_p95_s" in tput8.side  # from the ScenarioResult's latency stats


def test_top_shows_only_changes_from_baseline(sweep_db: Built) -> None:
    data = collect(sweep_db.store, sweep_db.sweep)
    assert 1 <= len(data.top) <= 10
    values = [r.value for r in data.top]
    assert values == sorted(values, reverse=True)
    assert data.top[0].winner and data.top[0].number == sweep_db.winner_number
    base = next(r for r in data.top if r.baseline)
    assert base.changes == {}
    for r in data.top:
        assert "context_length" not in r.changes  # fixed in every trial, so never a change
        for field, (old, new) in r.changes.items():
            assert old != new, field


def test_failures_grouped_with_examples_and_redacted(sweep_db: Built) -> None:
    data = collect(sweep_db.store, sweep_db.sweep, redactor=Redactor())
    groups = {g.failure_class: g for g in data.failures}
    assert groups["kv_cache_oom"].count == 2
    assert groups["crash"].count == 1
    assert groups["planner_rejected"].count == 1
    assert [g.count for g in data.failures] == sorted(
        (g.count for g in data.failures), reverse=True
    )
    # The example is the one that has a log tail.
    assert "Not enough memory" in (groups["kv_cache_oom"].example_log_tail or "")
    crash_tail = groups["crash"].example_log_tail or ""
    assert "Segmentation fault" in crash_tail
    assert HF_TOKEN not in crash_tail and API_KEY not in crash_tail
    assert "max_total_tokens=185000" in crash_tail  # a counter, not a secret
    assert data.env["HF_TOKEN"] == REDACTED
    assert data.spec is not None and data.spec["engine"]["env"]["HF_TOKEN"] == REDACTED


def test_capacity_ceiling_importances_provenance(sweep_db: Built) -> None:
    data = collect(sweep_db.store, sweep_db.sweep)
    cap = data.capacity
    assert cap is not None
    assert cap.bound_by in ("kv_tokens", "mamba_slots", "user", "default")
    assert cap.kv_pool_tokens and cap.launch_kv_pool_tokens
    assert cap.gpu_memory_gib == pytest.approx(32760 / 1024, abs=0.01)
    assert cap.vram_headroom_gib is not None
    assert cap.vram_peak_gib == pytest.approx(31050 / 1024, abs=0.01)
    dec = data.decode
    assert dec is not None and dec.ceiling_tok_s and dec.ceiling_tok_s > 0
    assert dec.measured_scenario == "decode1"
    assert dec.share == pytest.approx(dec.measured_tok_s / dec.ceiling_tok_s)
    assert set(data.importances.values) == {
        "mem_fraction_static",
        "page_size",
        "chunked_prefill_size",
    }
    assert sum(data.importances.values.values()) == pytest.approx(1.0, abs=1e-6)
    p = data.provenance
    assert p.driver == "n/a (simulated)"
    assert p.engine == "sglang" and p.engine_version == "0.5.17"
    assert p.spec_hash and "built-in card" in p.model_hash
    assert p.first_trial_started is not None and p.last_trial_finished is not None


def test_too_few_trials_for_importances(tmp_path: Path) -> None:
    built = build_sweep(tmp_path, n_complete=2, with_failures=False)
    data = collect(built.store, built.sweep)
    assert data.importances.values == {}
    assert "too few" in data.importances.note
    built.store.close()


def test_no_study_no_spec(tmp_path: Path) -> None:
    built = build_sweep(tmp_path, with_study=False, spec_yaml="")
    data = collect(built.store, built.sweep)
    assert "no Optuna study" in data.importances.note
    assert any("no spec" in n for n in data.notes)
    assert data.baseline is not None  # found by its launch record's source
    built.store.close()


def test_unknown_sweep_names_the_existing_ones(sweep_db: Built) -> None:
    with pytest.raises(StorageError, match="night-test"):
        collect(sweep_db.store, "nigth-test")


def test_pareto_front_and_changes() -> None:
    pts = [[10.0, 1.0], [12.0, 2.0], [9.0, 3.0], [12.0, 1.5]]
    assert pareto_front(pts, ["maximize", "minimize"]) == [0, 3]
    assert config_changes({"a": 1, "b": None}, {"a": 1, "b": 2, "c": 3}) == {
        "b": (None, 2),
        "c": (None, 3),
    }


def test_host_ram_headroom_with_hicache(tmp_path: Path) -> None:
    hicache = {
        "enable_hierarchical_cache": True,
        "hicache_size": 12,
        "hicache_io_backend": "direct",
    }
    built = build_sweep(tmp_path, n_complete=3, with_failures=False, extra_config=hicache)
    cap = collect(built.store, built.sweep).capacity
    built.store.close()
    assert cap is not None and cap.hicache
    assert cap.host_pool_gb is not None and cap.host_available_gib == 64.0
    used_gib = (cap.host_pool_gb + (cap.host_mamba_gb or 0)) * 1e9 / 2**30
    assert cap.host_headroom_gib == pytest.approx(64.0 - used_gib, abs=0.01)


def test_a_running_sweep_says_so(tmp_path: Path) -> None:
    """The notes added after the model was built used to be lost (it copies the list)."""
    built = build_sweep(tmp_path, n_complete=2, with_failures=False)
    sweep = built.store.get_sweep(built.sweep)
    built.store.update_sweep_status(sweep.id or 0, "running")
    data = collect(built.store, built.sweep)
    assert data.notes and data.notes[0].startswith("the sweep is still running")
    built.store.close()
