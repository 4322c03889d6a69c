"""A small but realistic sweep in a temporary SQLite database, built the way the sweep driver
stores one: the spec YAML, a baseline trial 0 (engine defaults, source "baseline"), complete
trials whose measurements are real bench ScenarioResult dumps ({"figures", "result"}), a
planner-pruned trial, failed trials with log tails, finalist re-runs, and the Optuna study
(same database) that importances are read from."""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from autotune.bench.results import LatencyStats, RunStats, ScenarioResult, Spread
from autotune.hardware.gpus import get_gpu
from autotune.models.registry import load_card
from autotune.planner.sglang import plan_sglang
from autotune.store.db import Store
from autotune.sweep.trial import flat_figures

SWEEP = "night-test"
MODEL = "qwen3.8-27b-awq-int4"
GPU = "rtx-4080-super-32g"
VERSION = "0.5.17"
HF_TOKEN = "hf_SuperSecretValue_9f8e7d"
API_KEY = "sk-live-abcdef1234567890"

SPEC_YAML = f"""\
name: {SWEEP}
description: Test sweep for the report.
target: {{engine: sglang, engine_version: "{VERSION}", model: {MODEL}, gpu: {GPU}}}
simulate: {{time_scale: 50}}
workload:
  scenarios:
    - {{kind: decode, name: decode1, prompt_len: 128, output_len: 64, num_requests: 2}}
    - {{kind: throughput, name: tput4, prompt_len: 512, output_len: 128, concurrency: 4}}
    - {{kind: throughput, name: tput8, prompt_len: 512, output_len: 128, concurrency: 8}}
objective: {{metric: tput8.output_tok_s}}
engine:
  env: {{HF_TOKEN: "{HF_TOKEN}", SGLANG_LOG_LEVEL: info}}
"""

SCENARIOS = {
    "decode1": ("decode", 1, "decode_tok_s", 128, 64),
    "tput4": ("throughput", 4, "output_tok_s", 512, 128),
    "tput8": ("throughput", 8, "output_tok_s", 512, 128),
}

PARAMS: dict[str, tuple[str, Any]] = {
    "mem_fraction_static": ("float", (0.80, 0.94)),
    "page_size": ("cat", (1, 16, 64)),
    "chunked_prefill_size": ("cat", (1024, 2048, 4096, 8192)),
}

FIXED = {"context_length": 131072, "reasoning_parser": "qwen3", "tool_call_parser": "qwen3_coder"}


def _lat(mean: float) -> LatencyStats:
    return LatencyStats(
        count=8,
        mean=mean,
        min=mean * 0.8,
        max=mean * 1.5,
        p50=mean * 0.95,
        p90=mean * 1.2,
        p95=mean * 1.3,
        p99=mean * 1.45,
    )


def scenario_result(
    name: str, speed: float, rng: random.Random, repeats: int = 2, ttft_factor: float = 1.0
) -> ScenarioResult:
    """A ScenarioResult as bench.runner builds one; `speed` scales the throughput (a 27B
    AWQ model on a 4080 SUPER decodes near 40 tok/s, under its ~48 tok/s ceiling)."""
    kind, conc, figure, prompt, out = SCENARIOS[name]
    per_stream = 38.0 * speed
    base = per_stream * (conc**0.8) if kind == "throughput" else per_stream
    ttft = 0.35 * ttft_factor * (1 + conc / 8)
    values = [base * (1 + rng.uniform(-0.03, 0.03)) for _ in range(repeats)]
    runs = []
    for v in values:
        runs.append(
            RunStats(
                requests=4 * conc,
                completed=4 * conc,
                errors=0,
                duration_s=out * 4 * conc / max(v, 1e-9),
                ttft=_lat(ttft),
                itl=_lat(1 / per_stream),
                tpot=_lat(1 / per_stream),
                e2e=_lat(ttft + out / per_stream),
                prompt_tokens=prompt * 4 * conc,
                output_tokens=out * 4 * conc,
                input_tok_s=v * prompt / out,
                output_tok_s=v if kind == "throughput" else per_stream,
                requests_per_s=v / out,
                prefill_tok_s=prompt / ttft,
                decode_tok_s=v if kind == "decode" else per_stream,
            )
        )
    mean = statistics.fmean(values)
    stats = runs[0].model_copy(
        update={"requests": 8 * conc, "completed": 8 * conc, "output_tok_s": mean}
        if kind == "throughput"
        else {"requests": 8 * conc, "completed": 8 * conc, "decode_tok_s": mean}
    )
    main = Spread(
        figure=figure,
        higher_is_better=True,
        values=values,
        mean=mean,
        min=min(values),
        max=max(values),
        stdev=statistics.stdev(values) if len(values) > 1 else None,
    )
    figures = {
        "main": mean,
        "output_tok_s": stats.output_tok_s,
        "input_tok_s": stats.input_tok_s,
        "decode_tok_s": stats.decode_tok_s,
        "prefill_tok_s": stats.prefill_tok_s,
        "ttft_mean_s": stats.ttft.mean if stats.ttft else None,
        "ttft_p50_s": stats.ttft.p50 if stats.ttft else None,
        "ttft_p99_s": stats.ttft.p99 if stats.ttft else None,
        "tpot_p50_s": stats.tpot.p50 if stats.tpot else None,
        "error_rate": 0.0,
        figure: mean,
    }
    return ScenarioResult(
        name=name,
        kind=kind,
        scenario={"kind": kind, "name": name, "concurrency": conc, "output_len": out},
        base_url="http://127.0.0.1:40000",
        model=MODEL,
        endpoint="chat",
        started_at=datetime(2026, 3, 1, 2, 0, tzinfo=UTC),
        wall_s=12.0,
        stats=stats,
        repeats=runs,
        points=[],
        main=main,
        figures=figures,
    )


@dataclass
class Built:
    store: Store
    sweep: str
    db_path: Path
    trial_ids: dict[int, int] = field(default_factory=dict)
    winner_number: int = -1
    baseline_number: int = 0


def _dist(name: str) -> Any:
    import optuna

    kind, spec = PARAMS[name]
    if kind == "float":
        return optuna.distributions.FloatDistribution(spec[0], spec[1])
    return optuna.distributions.CategoricalDistribution(list(spec))


def build_sweep(
    tmp_path: Path,
    *,
    name: str = SWEEP,
    n_complete: int = 8,
    with_failures: bool = True,
    with_study: bool = True,
    spec_yaml: str = SPEC_YAML,
    extra_config: dict[str, Any] | None = None,
) -> Built:
    """Write the sweep into tmp_path/at.db; trial 0 is the baseline, the fastest trial wins."""
    import optuna

    db = tmp_path / "at.db"
    store = Store(path=db)
    spec_yaml = spec_yaml.replace(f"name: {SWEEP}", f"name: {name}")
    study_name = f"autotune/{name}"
    sw = store.create_sweep(
        name,
        spec_yaml=spec_yaml,
        engine="sglang",
        engine_version=VERSION,
        model=MODEL,
        gpu=GPU,
        optuna_study_name=study_name,
        notes={"simulated": True},
    )
    sid = sw.id or 0
    rng = random.Random(7)
    card, gpu = load_card(MODEL), get_gpu(GPU)
    study = None
    if with_study:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            study_name=study_name, storage=store.storage_url, direction="maximize"
        )
    built = Built(store=store, sweep=name, db_path=db)
    t0 = datetime(2026, 3, 1, 1, 0, tzinfo=UTC)
    best = (-1.0, -1)

    def add(
        number: int,
        config: dict[str, Any],
        params: dict[str, Any],
        source: str,
        status: str,
        speed: float | None,
        ttft_factor: float = 1.0,
    ) -> int:
        nonlocal best
        plan = plan_sglang(card, gpu, config, version=VERSION, host_free_gib=64.0)
        row = store.add_trial(
            sid,
            number=number,
            status="running",
            config=config,
            params=params,
            prediction={
                "fits": plan.fits,
                "plan": plan.model_dump(mode="json"),
                "kv_pool_tokens": plan.kv_pool_tokens,
            },
            log_path=str(tmp_path / "trials" / f"{number:04d}" / "server.log"),
        )
        tid = row.id or 0
        built.trial_ids[number] = tid
        launch = {
            "report": {
                "kv_pool_tokens": int(plan.kv_pool_tokens * 0.98),
                "mamba_slots": plan.mamba_slots,
                "max_running_requests": plan.max_running_requests,
                "available_gpu_mem_gib": 1.31,
                "weights_gib": plan.weights_gib,
                "ready": True,
                "simulated": True,
            },
            "source": source,
            "vram_peak_mib": 31_050.0,
            "constraints": {"rules": 0.0, "planner": 0.0},
            "timings": {"total_s": 40.0},
            "simulated": True,
        }
        values = None
        if speed is not None:
            for scen in SCENARIOS:
                res = scenario_result(scen, speed, rng, ttft_factor=ttft_factor)
                store.add_measurement(
                    tid,
                    scen,
                    {"figures": flat_figures(res), "result": res.model_dump(mode="json")},
                    repeat=0,
                    value=res.main.mean,
                )
                if scen == "tput8":
                    values = [float(res.main.mean or 0.0)]
        store.update_trial(
            tid,
            status=status,
            launch=launch if status != "pruned" else None,
            values=values,
            started_at=t0 + timedelta(minutes=2 * number),
            finished_at=t0 + timedelta(minutes=2 * number + 1),
        )
        if study is not None:
            dists = {k: _dist(k) for k in params}
            state = {
                "complete": optuna.trial.TrialState.COMPLETE,
                "pruned": optuna.trial.TrialState.PRUNED,
                "failed": optuna.trial.TrialState.PRUNED,
            }[status]
            study.add_trial(
                optuna.trial.create_trial(
                    params=params,
                    distributions=dists,
                    values=values if state == optuna.trial.TrialState.COMPLETE else None,
                    state=state,
                    user_attrs={"autotune_source": source},
                )
            )
        if values and values[0] > best[0]:
            best = (values[0], number)
        return tid

    extra = dict(extra_config or {})
    # Baseline: engine defaults + the space's fixed flags.
    add(0, {**FIXED, **extra}, {}, "baseline", "complete", 1.0)
    for i in range(1, n_complete):
        mfs = round(0.80 + 0.01 * i, 2)
        page = (1, 16, 64)[i % 3]
        cps = (1024, 2048, 4096, 8192)[(i * 3) % 4]
        params = {"mem_fraction_static": mfs, "page_size": page, "chunked_prefill_size": cps}
        config = {**FIXED, **extra, **params}
        # Bigger prefill chunks: lower TTFT, a little less decode throughput (a trade-off).
        steps = {1024: 0, 2048: 1, 4096: 2, 8192: 3}[cps]
        speed = 1.0 + 0.025 * i + (0.05 if page == 64 else 0.0) - 0.02 * steps
        add(i, config, params, "sampler", "complete", speed, ttft_factor=1.2 - 0.12 * steps)
    n = max(n_complete, 1)
    if with_failures:
        pruned_cfg = {
            **FIXED,
            "mem_fraction_static": 0.99,
            "page_size": 1,
            "chunked_prefill_size": 8192,
        }
        tid = add(
            n,
            pruned_cfg,
            {k: pruned_cfg[k] for k in PARAMS if k != "mem_fraction_static"},
            "sampler",
            "pruned",
            None,
        )
        store.add_failure(
            tid,
            "planner_rejected",
            "planner: non-static slack 0.25 GiB cannot hold activations and CUDA graphs",
            evidence="planner",
        )
        for k, (cls, reason, tail) in enumerate(
            [
                (
                    "kv_cache_oom",
                    "Not enough memory for the KV cache",
                    "Loading weights took 21.3 s\nmax_total_num_tokens=185000\n"
                    "RuntimeError: Not enough memory. Please try to increase "
                    "--mem-fraction-static.",
                ),
                ("kv_cache_oom", "Not enough memory for the KV cache", None),
                (
                    "crash",
                    "exited with status 1 before ready",
                    f"env: HF_TOKEN={HF_TOKEN}\nserver_args=ServerArgs(api_key='{API_KEY}', "
                    "max_total_tokens=185000)\nSegmentation fault (core dumped)",
                ),
            ],
            start=1,
        ):
            params = {"mem_fraction_static": 0.93, "page_size": 16, "chunked_prefill_size": 8192}
            tid = add(
                n + k,
                {**FIXED, **params, "max_mamba_cache_size": 40 + k},
                params,
                "sampler",
                "failed",
                None,
            )
            store.add_failure(tid, cls, reason, evidence=reason if tail else None, log_tail=tail)
    built.winner_number = best[1]
    # Finalists: the winner re-launched twice more (repeat 1, 2).
    wid = built.trial_ids[best[1]]
    vals = [best[0]]
    for r in (1, 2):
        res = scenario_result("tput8", best[0] / (38.0 * 8**0.8), rng)
        store.add_measurement(
            wid,
            "tput8",
            {"figures": flat_figures(res), "result": res.model_dump(mode="json")},
            repeat=r,
            value=res.main.mean,
        )
        vals.append(float(res.main.mean or 0.0))
    store.update_sweep(
        sid,
        status="finished",
        best_trial_id=wid,
        notes={
            "simulated": True,
            "finalists": [
                {
                    "number": best[1],
                    "trial_id": wid,
                    "metric": "tput8.output_tok_s",
                    "values": vals,
                    "runs": len(vals),
                    "mean": statistics.fmean(vals),
                    "stdev": statistics.stdev(vals),
                    "min": min(vals),
                    "max": max(vals),
                }
            ],
        },
    )
    return built


@pytest.fixture(scope="session")
def sweep_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """Built once per session: tests that use it only read the database."""
    built = build_sweep(tmp_path_factory.mktemp("sweep"))
    yield built
    built.store.close()
