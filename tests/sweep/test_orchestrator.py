"""The sweep loop on the simulator's analytic mode (no processes): seeds, gate, budget,
determinism, resume, finalists, multi-objective."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.engines.base import FailureClass
from autotune.store.models import SweepStatus, TrialStatus
from autotune.sweep.analytic import AnalyticExecutor
from autotune.sweep.orchestrator import StopController, run_sweep
from autotune.sweep.spec import parse_spec
from tests.sweep.conftest import make_spec


def _run(store: Any, tmp_path: Path, spec_dict: dict[str, Any], **kw: Any) -> Any:
    spec = parse_spec(spec_dict)
    return run_sweep(
        spec,
        store=store,
        out_dir=tmp_path / "out",
        executor=AnalyticExecutor(1),
        install_signals=False,
        **kw,
    )


def _params(store: Any, name: str) -> list[tuple[int | None, dict[str, Any], str]]:
    sweep = store.get_sweep(name)
    return [(t.number, t.params, t.status) for t in store.get_trials(sweep.id)]


def test_baseline_first_budget_and_optuna_agree(store: Any, tmp_path: Path) -> None:
    out = _run(store, tmp_path, make_spec())
    assert out.status == SweepStatus.FINISHED.value and out.launched == 6
    trials = store.get_trials(out.sweep_id)
    first = trials[0]
    assert first.number == 0 and (first.launch or {}).get("source") == "baseline"
    assert all(
        v is None
        for k, v in first.config.items()
        if k in ("mem_fraction_static", "max_running_requests")
    )
    assert out.baseline is not None and out.baseline["number"] == 0
    complete = [t for t in trials if t.status == TrialStatus.COMPLETE.value]
    study = optuna.load_study(study_name="autotune/t", storage=store.storage_url)
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert sorted(t.number for t in done) == sorted(t.number for t in complete)
    assert out.best is not None and out.best["value"] == max(t.value for t in complete)
    for t in complete:  # measured figures of both scenarios are stored
        scenarios = {m.scenario for m in store.get_measurements(t.id)}
        assert scenarios == {"probe", "tp"}
    assert "quality" not in {m.scenario for m in store.get_measurements(first.id)}  # guard off


def test_same_seed_same_trials(tmp_path: Path) -> None:
    from autotune.store.db import Store

    runs = []
    for i, seed in enumerate((3, 3, 4)):
        s = Store(path=tmp_path / f"db{i}.sqlite")
        _run(s, tmp_path / str(i), make_spec(**{"search.seed": seed, "budget.max_trials": 8}))
        runs.append(_params(s, "t"))
        s.close()
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_infeasible_configs_are_pruned_never_launched(store: Any, tmp_path: Path) -> None:
    spec = make_spec(
        **{
            "space.overrides.mem_fraction_static": {"low": 0.40, "high": 0.94, "step": 0.02},
            "search.baseline": False,
            "budget.max_trials": 8,
        }
    )
    out = _run(store, tmp_path, spec)
    pruned = store.get_trials(out.sweep_id, TrialStatus.PRUNED)
    assert pruned, "the sampler should have proposed some mem_fraction_static below the weights"
    fails = {f.trial_id: f for f in store.get_failures(out.sweep_id)}
    for t in pruned:
        assert t.launch is None and t.prediction and not t.prediction["fits"]
        assert fails[t.id].failure_class == FailureClass.PLANNER_REJECTED.value
        assert "mem_fraction_static" in fails[t.id].reason
    assert out.launched == 8  # pruned trials do not count against the budget


def test_graceful_stop_then_resume_loses_nothing(store: Any, tmp_path: Path) -> None:
    stop = StopController()
    seen: list[int] = []

    def after(trial: dict[str, Any]) -> None:
        seen.append(trial["number"])
        if len(seen) == 3:
            stop.request("test: stop after 3")

    first = _run(store, tmp_path, make_spec(), stop=stop, on_trial=after)
    assert first.status == SweepStatus.STOPPED.value and first.launched == 3
    before = {t.number: (t.status, t.value) for t in store.get_trials(first.sweep_id)}
    second = _run(store, tmp_path, make_spec(), resume=True)
    assert second.status == SweepStatus.FINISHED.value and second.launched == 6
    after_rows = {t.number: (t.status, t.value) for t in store.get_trials(second.sweep_id)}
    assert all(after_rows[n] == v for n, v in before.items())  # nothing completed was lost


def test_finalists_rerun_top_configs(store: Any, tmp_path: Path) -> None:
    out = _run(store, tmp_path, make_spec(finalists={"top_k": 2, "repeats": 2}))
    assert len(out.finalists) == 2
    for f in out.finalists:
        assert f["runs"] == 3 and f["mean"] is not None
        reps = {m.repeat for m in store.get_measurements(f["trial_id"]) if m.scenario == "tp"}
        assert reps == {0, 1, 2}


def test_multi_objective_and_constraints(store: Any, tmp_path: Path) -> None:
    spec = make_spec(
        **{
            "objective.multi": [{"metric": "tp.output_tok_s"}, {"metric": "tp.ttft_p95_s"}],
            "objective.constraints": [{"metric": "tp.ttft_p95_s", "max": 1e-6}],
        }
    )
    out = _run(store, tmp_path, spec)
    study = optuna.load_study(study_name="autotune/t", storage=store.storage_url)
    assert len(study.directions) == 2
    done = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert done and all(len(t.values) == 2 for t in done)
    # every trial breaks the (impossible) TTFT bound: all infeasible, none is "best"
    assert all(t.constraints and max(t.constraints.values()) > 0 for t in done)
    assert out.best is None and out.infeasible  # a trial that breaks a constraint never wins
    assert out.exit_code == 7
    assert out.pareto == []  # no feasible trial, so no Pareto front


def test_unmet_constraint_means_no_winner(store: Any, tmp_path: Path) -> None:
    """Issue 19.5: no feasible trial -> no winner in the outcome, report and winner.json; exit 7."""
    import json

    from autotune.report import write_report

    spec = make_spec(**{"objective.constraints": [{"metric": "tp.ttft_p95_s", "max": 1e-9}]})
    out = _run(store, tmp_path, spec)
    assert out.counts.get("complete", 0) > 0
    assert out.best is None and out.infeasible and out.exit_code == 7
    from autotune.sweep.status import sweep_status

    assert sweep_status(store, "t")["best"] is None  # `autotune status` agrees
    write_report(store, "t", tmp_path / "report")
    doc = json.loads((tmp_path / "report" / "winner.json").read_text())
    assert doc["feasible"] is False and doc["winner"] is None and doc["launch"] is None
    md = (tmp_path / "report" / "report.md").read_text()
    assert "**No winner:**" in md and "(winner)" not in md
    assert "(breaks a constraint)" in md  # the closest trials are still shown
    ok = _run(store, tmp_path / "ok", make_spec(name="ok"))
    assert not ok.infeasible and ok.exit_code == 0


def test_multi_objective_pareto_front(store: Any, tmp_path: Path) -> None:
    spec = make_spec(
        **{
            "objective.multi": [
                {"metric": "tp.output_tok_s"},
                {"metric": "launch.kv_pool_tokens"},
            ],
        }
    )
    out = _run(store, tmp_path, spec)
    assert out.pareto, "feasible trials make a front"
    values = {t.number: t.values for t in store.get_trials(out.sweep_id) if t.values}
    front = [values[n] for n in out.pareto]
    for a in front:  # no member of the front is dominated by any measured trial
        assert not any(b[0] >= a[0] and b[1] >= a[1] and b != a for b in values.values())


@pytest.mark.parametrize("sampler", ["random", "grid"])
def test_other_samplers(store: Any, tmp_path: Path, sampler: str) -> None:
    spec = make_spec(
        **{
            "search.sampler": sampler,
            "search.baseline": False,
            "search.known_good": False,
            "space.overrides.mem_fraction_static": 0.9,
            "space.overrides.max_mamba_cache_size": None,
            "space.overrides.kv_cache_dtype": "fp8_e4m3",
            "budget.max_trials": 20,
        }
    )
    out = _run(store, tmp_path, spec)
    if sampler == "grid":  # 4 x 2 configurations: each once, then the grid is done
        assert out.launched == 8 and out.stop_reason.startswith("grid")
        keys = {tuple(sorted(t.params.items())) for t in store.get_trials(out.sweep_id)}
        assert len(keys) == 8
    else:
        assert out.launched <= 20


def test_wall_clock_budget_stops_and_is_resumable(store: Any, tmp_path: Path) -> None:
    spec = make_spec(**{"budget.max_trials": 10_000, "budget.wall_clock_s": 3})
    out = _run(store, tmp_path, spec)
    assert out.status == SweepStatus.STOPPED.value and out.stop_reason.startswith("budget:")
    assert 1 <= out.launched < 10_000
    assert store.get_trials(out.sweep_id, TrialStatus.RUNNING) == []


def test_resume_refuses_a_sweep_whose_driver_still_runs(store: Any, tmp_path: Path) -> None:
    from autotune.errors import StorageError
    from autotune.sweep.orchestrator import _driver_identity

    out = _run(store, tmp_path, make_spec(**{"budget.max_trials": 1}))
    notes = {**store.get_sweep("t").notes, "driver": _driver_identity()}  # "us": alive
    store.update_sweep(out.sweep_id, status=SweepStatus.RUNNING, notes=notes)
    with pytest.raises(StorageError, match="is running now"):
        _run(store, tmp_path, make_spec(), resume=True)
    with pytest.raises(StorageError, match="already exists.*--resume t"):
        _run(store, tmp_path, make_spec())


def test_target_gpu_is_stored_as_the_gpu_it_resolved_to(store: Any, tmp_path: Path) -> None:
    # `gpu: auto` (detected through NVML) or an alias must reach the report and `autotune status`
    # as the catalog GPU the trials ran on. NVML is absent here, so an alias stands for `auto`:
    # both go through the same resolution in the driver.
    _run(store, tmp_path, make_spec(**{"target.gpu": "H200-141G", "budget.max_trials": 2}))
    assert store.get_sweep("t").gpu == "h200-141g"


def test_the_space_is_narrowed_to_the_target(store: Any, tmp_path: Path) -> None:
    """Kernels the GPU lacks are never proposed: on an RTX 4080 SUPER (sm_89) TRT-LLM MHA and
    aiter are dropped before the search, the sweep notes why, and the report says so."""
    from autotune.report.collect import collect

    spec = make_spec(
        **{
            "space.overrides.attention_backend": {
                "choices": [None, "triton", "trtllm_mha", "aiter"]
            },
            "budget.max_trials": 6,
        }
    )
    out = _run(store, tmp_path, spec)
    tried = {t.config.get("attention_backend") for t in store.get_trials(out.sweep_id)}
    assert tried <= {None, "triton"}
    notes = store.get_sweep("t").notes or {}
    assert any("trtllm_mha" in n and "trtllm-mha-arch" in n for n in notes["narrowed"])
    data = collect(store, "t")
    assert any("aiter" in n for n in data.narrowed)


def test_quality_guard_rejects_a_drifting_winner(store: Any, tmp_path: Path) -> None:
    """The baseline answers the probe set (the reference); every fp8-KV trial answers it too
    and, with a KL limit of zero (any drift), is infeasible: the winner keeps the lossless KV
    cache although fp8 is faster."""
    spec = make_spec(
        **{
            "space.overrides.kv_cache_dtype": {"choices": ["auto", "fp8_e4m3"]},
            "quality.enabled": True,
            "quality.max_kl": 0.0,
            "budget.max_trials": 8,
        }
    )
    out = _run(store, tmp_path, spec)
    trials = store.get_trials(out.sweep_id)
    notes = store.get_sweep("t").notes or {}
    assert notes["quality_reference"] == 0
    fp8 = [t for t in trials if t.config.get("kv_cache_dtype") == "fp8_e4m3" and t.launch]
    assert fp8, "the sweep tried no fp8 KV cache"
    for t in fp8:
        cons = (t.launch or {}).get("constraints") or {}
        if t.status == TrialStatus.COMPLETE.value:
            assert cons["quality_kl"] > 0, cons
            q = next(m for m in store.get_measurements(t.id) if m.scenario == "quality")
            figs = q.metrics["figures"]
            assert figs["mean_kl"] > 0.0 and figs["token_agreement"] <= 1.0
    assert out.best is not None
    best = next(t for t in trials if t.number == out.best["number"])
    assert best.config.get("kv_cache_dtype") in (None, "auto")
    # the report: a quality column, the section, the rejected trials counted
    from autotune.report.collect import collect
    from autotune.report.writer import write_report

    data = collect(store, "t")
    assert data.quality is not None and data.quality.reference_trial == 0
    assert data.quality.rejected_trials >= 1 and data.quality.limits["max_kl"] == 0.0
    paths = write_report(store, "t", tmp_path / "report", plots=False)
    text = Path(paths.report_md).read_text()
    assert "## Output quality" in text and "quality (agreement, KL)" in text


def test_exclude_lossy_keeps_full_precision(store: Any, tmp_path: Path) -> None:
    spec = make_spec(
        **{
            "space.overrides.kv_cache_dtype": {"choices": ["auto", "fp8_e4m3", "bf16"]},
            "quality.exclude_lossy": True,
            "budget.max_trials": 5,
        }
    )
    out = _run(store, tmp_path, spec)
    assert {t.config.get("kv_cache_dtype") for t in store.get_trials(out.sweep_id)} <= {
        None,
        "auto",
        "bf16",
    }
    assert (store.get_sweep("t").notes or {})["lossy_excluded"] == ["kv_cache_dtype"]


def test_resume_keeps_the_quality_reference(store: Any, tmp_path: Path) -> None:
    """The reference answers come back from the database on resume: later fp8 trials are
    compared with trial 0's answers, not with a new reference."""
    stop = StopController()
    seen: list[int] = []

    def after(trial: dict[str, Any]) -> None:
        seen.append(trial["number"])
        if len(seen) == 2:
            stop.request("test: stop after 2")

    spec = make_spec(
        **{
            "quality.enabled": True,
            "space.overrides.kv_cache_dtype": {"choices": ["auto", "fp8_e4m3"]},
        }
    )
    _run(store, tmp_path, spec, stop=stop, on_trial=after)
    assert (store.get_sweep("t").notes or {})["quality_reference"] == 0
    second = _run(store, tmp_path, spec, resume=True)
    assert (store.get_sweep("t").notes or {})["quality_reference"] == 0
    later = [t for t in store.get_trials(second.sweep_id) if (t.number or 0) >= 2]
    for t in later:
        q = [m for m in store.get_measurements(t.id) if m.scenario == "quality"]
        if q and t.config.get("kv_cache_dtype") == "fp8_e4m3":
            assert q[0].metrics["result"]["drift"] is not None  # compared with trial 0's answers


def test_a_pinned_lossy_knob_is_the_references_premise(store: Any, tmp_path: Path) -> None:
    """fp8 KV pinned by the spec is the sweep's premise, not the search's choice: the baseline
    (fp8 too) becomes the reference and trials stay feasible; an fp8 trial among bf16 ones
    would not be (the test above)."""
    spec = make_spec(
        **{
            "space.overrides.kv_cache_dtype": "fp8_e4m3",
            "quality.enabled": True,
            "quality.max_kl": 0.0,
            "budget.max_trials": 4,
        }
    )
    out = _run(store, tmp_path, spec)
    assert (store.get_sweep("t").notes or {})["quality_reference"] == 0
    complete = [t for t in store.get_trials(out.sweep_id) if t.status == "complete"]
    assert complete and all(t.config.get("kv_cache_dtype") == "fp8_e4m3" for t in complete)
    for t in complete:
        cons = (t.launch or {}).get("constraints") or {}
        assert "quality_unverified" not in cons, cons
    assert out.best is not None


def _two_workers(
    store: Any, tmp_path: Path, spec: dict[str, Any], slow: Any, pause_s: float
) -> Any:
    """The sweep on two in-process workers whose trials for which `slow(spec)` holds sleep
    `pause_s` before the analytic trial (which finishes first is the point)."""
    import time

    from autotune.sweep.analytic import analytic_trial
    from autotune.sweep.executors import InProcessExecutor

    def trial(s: Any, **kw: Any) -> Any:
        if slow(s):
            time.sleep(pause_s)
        return analytic_trial(s, **kw)

    return run_sweep(
        parse_spec(spec),
        store=store,
        out_dir=tmp_path / "out",
        executor=InProcessExecutor(2, trial_fn=trial),
        install_signals=False,
    )


def test_two_workers_compare_an_early_lossy_trial_with_the_baseline(
    store: Any, tmp_path: Path
) -> None:
    """With two workers an fp8 trial can finish while the baseline (the lossless reference to
    be) still runs: its result waits for the reference instead of being told infeasible as
    unverified, so every complete fp8 trial is compared (recording.waits_for_reference)."""
    spec = make_spec(
        **{
            "space.overrides.kv_cache_dtype": {"choices": ["auto", "fp8_e4m3"]},
            "quality.enabled": True,
            "quality.max_kl": 10.0,
            "budget.max_trials": 6,
        }
    )

    def lossless(s: Any) -> bool:  # the baseline and other lossless trials finish last
        return bool(s.config.get("kv_cache_dtype") != "fp8_e4m3")

    out = _two_workers(store, tmp_path, spec, lossless, 0.6)
    trials = store.get_trials(out.sweep_id)
    assert (store.get_sweep("t").notes or {})["quality_reference"] == 0
    fp8 = [
        t
        for t in trials
        if t.config.get("kv_cache_dtype") == "fp8_e4m3" and t.status == TrialStatus.COMPLETE.value
    ]
    assert fp8 and any(t.number == 1 for t in fp8), [(t.number, t.config) for t in trials]
    for t in fp8:
        cons = (t.launch or {}).get("constraints") or {}
        assert "quality_unverified" not in cons and cons.get("quality_kl", 1) <= 0, cons


def test_two_workers_take_the_baseline_as_the_reference_whatever_finishes_first(
    store: Any, tmp_path: Path
) -> None:
    """The reference is the baseline (the engine's defaults): a lossless trial that finishes
    first waits for it and is compared with it, rather than becoming the reference itself."""
    spec = make_spec(**{"quality.enabled": True, "budget.max_trials": 5})
    out = _two_workers(store, tmp_path, spec, lambda s: s.number == 0, 0.8)
    assert (store.get_sweep("t").notes or {})["quality_reference"] == 0
    trials = {t.number: t for t in store.get_trials(out.sweep_id)}
    assert trials[1].status == TrialStatus.COMPLETE.value
    q = [m for m in store.get_measurements(trials[1].id) if m.scenario == "quality"]
    assert q and q[0].metrics["result"]["drift"] is not None  # compared with trial 0's answers


def test_a_held_result_waits_only_on_the_lossless_trials_running_when_it_finished() -> None:
    """recording.held_for_reference: an fp8 result waits for the lossless trials that were
    running when it finished, not for ones launched later, never for a confirmation re-run;
    and a finished, held trial does not hold its worker (driver.busy)."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from autotune.sweep.driver import busy
    from autotune.sweep.recording import held_for_reference
    from autotune.sweep.spec import parse_spec

    spec = parse_spec(
        make_spec(
            **{
                "space.overrides.kv_cache_dtype": {"choices": ["auto", "fp8_e4m3"]},
                "quality.enabled": True,
            }
        )
    )
    setup = SimpleNamespace(spec=spec, quality_reference=None, guarded=lambda c: dict(c))
    state = SimpleNamespace(setup=setup)

    def item(kv: str, source: str = "tpe") -> Any:
        spec_ = SimpleNamespace(config={"kv_cache_dtype": kv})
        return SimpleNamespace(spec=spec_, source=source, t_done=None, waits_on=None)

    def fut(done: bool) -> Future[Any]:
        f: Future[Any] = Future()
        if done:
            f.set_result(None)
        return f

    base, fp8 = fut(False), fut(True)
    running: dict[Future[Any], Any] = {base: item("auto", "baseline"), fp8: item("fp8_e4m3")}
    assert held_for_reference(state, fp8, running) and busy(running) == 1
    later = fut(False)
    running[later] = item("auto")  # launched into the freed worker
    running.pop(base)  # the baseline recorded, without an answer to compare with
    assert not held_for_reference(state, fp8, running)  # `later` is not waited on
    confirm = fut(True)
    running[confirm] = item("fp8_e4m3", "confirm")
    assert not held_for_reference(state, confirm, running)
    setup.quality_reference = {"p": "answers"}
    assert not held_for_reference(state, fp8, running)

    # a lossless result waits on the baseline only; the baseline waits on nothing
    setup.quality_reference = None
    base, other, lossless, fp8 = fut(False), fut(False), fut(True), fut(False)
    running = {
        base: item("auto", "baseline"),
        other: item("auto"),
        lossless: item("auto"),
        fp8: item("fp8_e4m3"),
    }
    assert held_for_reference(state, lossless, running)
    assert running[lossless].waits_on == {base}
    running.pop(base)
    assert not held_for_reference(state, lossless, running)
    first = fut(True)
    running = {first: item("auto", "baseline"), fut(False): item("auto")}
    assert not held_for_reference(state, first, running)
