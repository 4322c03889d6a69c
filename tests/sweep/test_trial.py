"""One trial against the simulated engine (a real server process driven exactly like SGLang),
and a short two-worker sweep on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.bench.scenarios import scenario_from_dict
from autotune.store.models import SweepStatus, TrialStatus
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.spec import parse_spec
from autotune.sweep.trial import TrialResult, TrialSpec, order_scenarios, rescale, run_trial
from tests.sweep.conftest import live_children, make_spec


def test_rescale_to_simulated_gpu_units() -> None:
    assert rescale("output_tok_s", 200.0, 20) == 10.0
    assert rescale("prefill_tok_s@512", 200.0, 20) == 10.0
    assert rescale("requests_per_s", 2.0, 2) == 1.0
    assert rescale("ttft_p95_s", 0.1, 20) == pytest.approx(2.0)
    assert rescale("ttft_s@8192", 0.1, 20) == pytest.approx(2.0)
    assert rescale("cache_hit_rate", 0.5, 20) == 0.5
    assert rescale("tokens_per_chunk", 2.5, 20) == 2.5
    assert rescale("output_tok_s", None, 20) is None


def test_cheap_scenarios_run_first() -> None:
    heavy = scenario_from_dict(
        {
            "kind": "throughput",
            "name": "big",
            "prompt_len": 4096,
            "output_len": 512,
            "concurrency": 8,
        }
    )
    probe = scenario_from_dict(
        {"kind": "decode", "name": "probe", "prompt_len": 128, "output_len": 32, "num_requests": 2}
    )
    assert [s.label for s in order_scenarios([heavy, probe], "cheap_first")] == ["probe", "big"]
    assert [s.label for s in order_scenarios([heavy, probe], "as_written")] == ["big", "probe"]


def _sim_spec(tmp_path: Path, **fields: Any) -> TrialSpec:
    """A trial of the simulated Qwen3.8-27B AWQ on an RTX 4080 SUPER 32G (SGLang 0.5.17)."""
    return TrialSpec(
        sweep="t",
        engine_version="0.5.17",
        model="qwen3.8-27b-awq-int4",
        gpu="rtx-4080-super-32g",
        simulate=True,
        sim_time_scale=20,
        sim_extra_args=["--sim-max-startup-s", "0.2"],
        registry_path=str(tmp_path / "pids.jsonl"),
        stop_grace_s=3,
        **fields,
    )


def test_sim_trial_measures_and_reports_the_launch(tmp_path: Path) -> None:
    from autotune.hardware import get_gpu
    from autotune.models import load_card
    from autotune.planner import plan_sglang

    config = {
        "mem_fraction_static": 0.9,
        "kv_cache_dtype": "fp8_e4m3",
        "enable_metrics": True,
        "max_mamba_cache_size": 12,
    }
    spec = _sim_spec(
        tmp_path,
        number=3,
        config=config,
        scenarios=[
            {
                "kind": "decode",
                "name": "probe",
                "prompt_len": 64,
                "output_len": 8,
                "num_requests": 1,
                "warmup_requests": 0,
            }
        ],
        log_dir=str(tmp_path / "logs"),
    )
    res = run_trial(spec)
    assert res.status == TrialStatus.COMPLETE, (res.failure, res.log_tail)
    plan = plan_sglang(load_card("qwen3.8-27b-awq-int4"), get_gpu("rtx-4080-super-32g"), config)
    assert res.launch is not None and res.launch.simulated
    # what the log said it allocated: the simulated machine's pool, a few percent below the plan
    assert 0.95 * plan.kv_pool_tokens < res.launch.kv_pool_tokens < plan.kv_pool_tokens
    assert res.launch.mamba_slots == 12
    (m,) = res.measurements
    # simulated-GPU units: single-stream decode near the C2 figure (41.4 tok/s), not 20x it
    # (loose: a loaded machine makes the simulator deliver late tokens in bursts)
    assert 10 < (m.figures["decode_tok_s"] or 0) < 120
    assert res.stop is not None and res.stop["leftovers"] == [] and res.stop["port_freed"]
    assert {"start_s", "bench_s", "stop_s", "total_s"} <= set(res.timings)
    assert (tmp_path / "logs" / "server.log").read_text().strip()


def test_two_worker_sweep_on_the_simulator(store: Any, tmp_path: Path) -> None:
    spec = parse_spec(
        make_spec(
            **{
                "execution.workers": 2,
                "budget.max_trials": 4,
                "space.fixed": {"enable_metrics": True},
                "workload.prune_below": 0,  # timing noise of 8-token probes on a busy CI box
            }
        )
    )
    out = run_sweep(spec, store=store, out_dir=tmp_path / "out", install_signals=False)
    assert out.status == SweepStatus.FINISHED.value and out.launched == 4
    rows = [r for r in store.get_trials(out.sweep_id) if r.launch is not None]
    workers = {r.worker for r in rows}
    assert len(workers) == 2, workers  # both slots ran trials
    for r in rows:
        assert r.status == TrialStatus.COMPLETE.value, store.get_failures(out.sweep_id)
        report = r.launch["report"]
        assert report["simulated"] is True
        assert report["kv_pool_tokens"] < r.prediction["kv_pool_tokens"]
    # the simulated machine allocates below the plan; the sweep learns it from the startup lines
    corr = out.planner_correction
    assert corr["launches"] == 4 and corr["kv_ratio"] < 1.0
    assert len(corr["curve"]) == 4 and corr["curve"][0] > 0.005
    assert live_children() == []


@pytest.mark.parametrize(("engine", "version"), [("sglang", "0.5.17"), ("vllm", "0.19.0")])
def test_sim_trial_answers_the_quality_probe(tmp_path: Path, engine: str, version: str) -> None:
    """The guard's probe over HTTP against a simulated engine process, in the engine's own API
    (SGLang /generate with return_logprob, vLLM /v1/completions with logprobs): the reference
    answers, then an fp8 KV cache drifts from it."""
    from autotune.quality.guard import QualityProbe
    from autotune.quality.probes import probe_set

    def trial(config: dict[str, object], reference: dict[str, object] | None) -> TrialResult:
        probe = QualityProbe(
            probes=[vars(p) for p in probe_set(4)], max_tokens=16, top_k=5, reference=reference
        )
        spec = TrialSpec(
            sweep="t",
            number=1,
            config={"max_model_len": 4096} if engine == "vllm" else {},
            engine=engine,
            engine_version=version,
            model="qwen3.8-27b-awq-int4" if engine == "sglang" else "Qwen/Qwen3-8B",
            gpu="rtx-4090-24g",
            simulate=True,
            sim_time_scale=20,
            sim_extra_args=["--sim-max-startup-s", "0.2"],
            scenarios=[
                {
                    "kind": "decode",
                    "name": "probe",
                    "prompt_len": 64,
                    "output_len": 8,
                    "num_requests": 1,
                    "warmup_requests": 0,
                }  # fmt: skip
            ],
            log_dir=str(tmp_path / f"logs-{len(config)}"),
            registry_path=str(tmp_path / "pids.jsonl"),
            stop_grace_s=3,
            quality=probe.model_dump(),
        )
        spec = spec.model_copy(update={"config": {**spec.config, **config}})
        res = run_trial(spec)
        assert res.status == TrialStatus.COMPLETE, (res.failure, res.log_tail)
        return res

    ref = trial({}, None)
    q = next(m for m in ref.measurements if m.scenario == "quality")
    assert q.result["error"] is None and len(q.result["answers"]) == 4
    fp8 = trial({"kv_cache_dtype": "fp8_e4m3"}, q.result["answers"])
    d = next(m for m in fp8.measurements if m.scenario == "quality")
    assert d.result["drift"] is not None and 0 < d.figures["mean_kl"] < 0.02


def test_a_slow_run_is_cut_once_it_cannot_reach_the_share_of_the_best(tmp_path: Path) -> None:
    """search.cut_below on a real server process: the throughput scenario stops when its
    benchmark outlasts cut_after_s; the trial is pruned with the reason, the engine stopped, and
    a run within the time keeps its wall seconds for the next cut."""

    def spec(log: str, cut_after_s: float) -> TrialSpec:
        return _sim_spec(
            tmp_path,
            number=1,
            config={"mem_fraction_static": 0.9, "kv_cache_dtype": "fp8_e4m3"},
            scenarios=[
                {
                    "kind": "throughput",
                    "name": "tp",
                    "prompt_len": 128,
                    "output_len": 64,
                    "concurrency": 2,
                    "num_requests": 4,
                    "warmup_requests": 0,
                }
            ],
            log_dir=str(tmp_path / log),
            cut_scenario="tp",
            cut_after_s=cut_after_s,
        )

    cut = run_trial(spec("a", 0.05))
    assert cut.status == TrialStatus.PRUNED, (cut.failure, cut.log_tail)
    assert cut.reason is not None and cut.reason.startswith("cut: 'tp'")
    assert cut.measurements == []
    assert cut.stop is not None and cut.stop["leftovers"] == [] and cut.stop["port_freed"]
    kept = run_trial(spec("b", 600.0))
    assert kept.status == TrialStatus.COMPLETE, (kept.failure, kept.log_tail)
    (m,) = kept.measurements
    assert 0.05 < m.result["wall_s"] < 600
