"""Search quality: does the sweep find (within 3 %) the best configuration of a space of a few
thousand, in 40 trials? The default search (constrained TPE, then local refinement for the
last quarter of the budget) against plain TPE and random search, same seeds, same budget.

A benchmark script, not a test. Trials are scored by the simulator's analytic mode (the same
scheduler and roofline model the simulated server runs, in virtual time, no processes), so the
exhaustive optimum over the whole space can be computed with exactly the gate and objective the
sweep uses: rules + planner + headroom, then agents.output_tok_s at 8 concurrent streams.

    .venv/bin/python benchmarks/sweep_quality.py                    # 5 seeds x 3 variants
    .venv/bin/python benchmarks/sweep_quality.py --seeds 10 --plot quality.png --json out.json
    .venv/bin/python benchmarks/sweep_quality.py --gate 150     # wasted launches, false rejects

Prints: the space, the exhaustive optimum and how rare near-optimal configurations are, then
best-so-far / optimum at 5..40 trials (mean over seeds) and how many runs end within 3 %.

`--gate N` instead measures the gate before launch: N random configurations of the demo space
are judged by the gate (rules + planner) AND launched on the simulated engine (a real process,
startup only). Wasted launches = configurations that failed to start although the gate let them
through, as a share of all that failed to start; false rejects = configurations the gate
rejected that started. Read them knowing what the simulator is: it refuses to start exactly
when the planner says a configuration does not fit (same code), so memory verdicts agree by
construction; it does not emulate the crashes the rules encode (P1 segfault, P2 io kernel, P6
missing MTP weights), so rule rejects that "start" on it are real-engine facts, not errors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.bench.scenarios import scenario_from_dict  # noqa: E402
from autotune.hardware import get_gpu  # noqa: E402
from autotune.models import load_card  # noqa: E402
from autotune.store.db import Store  # noqa: E402
from autotune.sweep.analytic import AnalyticExecutor, evaluate_scenario  # noqa: E402
from autotune.sweep.orchestrator import run_sweep  # noqa: E402
from autotune.sweep.planning import TrialPlanner, longest_request_tokens  # noqa: E402
from autotune.sweep.setup import build_space  # noqa: E402
from autotune.sweep.spec import SweepSpec, parse_spec  # noqa: E402
from autotune.sweep.trial import TrialSpec  # noqa: E402

SPEC = """
name: quality
target: {engine: sglang, engine_version: "0.5.17", model: qwen3.8-27b-awq-int4,
         gpu: rtx-4080-super-32g, host_free_gib: 64}
simulate: {time_scale: 1}
space:
  overrides:
    mem_fraction_static: {low: 0.86, high: 0.94, step: 0.02}
    max_mamba_cache_size: {choices: [null, 6, 12, 24]}
    max_running_requests: {choices: [null, 2, 4, 8]}
    chunked_prefill_size: {choices: [2048, 8192]}
    speculative_algorithm: {choices: [null, NGRAM]}
    speculative_num_steps: {low: 2, high: 5}
    speculative_num_draft_tokens: {low: 2, high: 8, step: 3}
    kv_cache_dtype: fp8_e4m3
    page_size: 1
    enable_hierarchical_cache: false
    cuda_graph_max_bs_decode: null
    mamba_radix_cache_strategy: null
    attention_backend: null
    schedule_policy: null
    prefill_attention_backend: null
    decode_attention_backend: null
    linear_attn_backend: null
    schedule_conservativeness: null
    max_prefill_tokens: null
    mamba_ssm_dtype: null
    cuda_graph_bs_decode: null
    hicache_ratio: null
    triton_attention_num_kv_splits: null
    disable_overlap_schedule: false
    enable_mixed_chunk: false
    sleep_on_idle: false
workload:
  scenarios:
    - {kind: decode, name: probe, prompt_len: 128, output_len: 64, num_requests: 2}
    - {kind: throughput, name: agents, prompt_len: 2048, output_len: 256, concurrency: 8,
       num_requests: 16, text: code}
objective: {metric: agents.output_tok_s}
budget: {max_trials: 40}
search: {n_startup_trials: 8}
finalists: {top_k: 0}
"""
CHECKPOINTS = (5, 10, 15, 20, 30, 40)
# name -> (sampler, refine share)
VARIANTS = {"tpe+refine": ("tpe", 0.25), "tpe": ("tpe", 0.0), "random": ("random", 0.0)}


def exhaustive(spec: SweepSpec) -> tuple[float, dict[str, Any], list[float], int]:
    """(optimum, its config, every feasible value, space size) with the sweep's own gate."""
    space = build_space(spec)
    card, gpu = load_card(spec.target.model), get_gpu(spec.target.gpu)
    scenarios = [scenario_from_dict(d) for d in spec.workload.scenarios]
    planner = TrialPlanner(
        card=card,
        gpu=gpu,
        space=space,
        version=spec.target.engine_version,
        host_free_gib=spec.target.host_free_gib,
        headroom_gib=spec.objective.vram_headroom_gib,
        need_tokens=longest_request_tokens(scenarios),
    )
    target = next(s for s in scenarios if s.label == spec.objective.metric.split(".")[0])
    best, best_cfg, values, size = 0.0, {}, [], 0
    for cfg in space.grid():
        size += 1
        if not planner.assess(cfg).fits:
            continue
        ts = TrialSpec(
            sweep="exhaustive",
            number=0,
            config=cfg,
            engine_version=spec.target.engine_version,
            model=spec.target.model,
            gpu=gpu.name,
            scenarios=[],
            log_dir="/tmp",
            host_free_gib=spec.target.host_free_gib,
        )
        _, figs = evaluate_scenario(ts, target)
        v = figs.get("output_tok_s") or 0.0
        values.append(v)
        if v > best:
            best, best_cfg = v, cfg
    return best, best_cfg, values, size


def curve(store: Store, name: str) -> list[float]:
    """Best feasible objective after each launched trial (planner-pruned ones are free)."""
    out: list[float] = []
    best = 0.0
    for t in store.get_trials(store.get_sweep(name).id or 0):
        if t.launch is None:
            continue
        cons = (t.launch or {}).get("constraints") or {}
        if t.value is not None and not any(v > 0 for v in cons.values()):
            best = max(best, t.value)
        out.append(best)
    return out


def _launch_only(spec: SweepSpec, cfg: dict[str, Any], tmp: Path, i: int) -> tuple[bool, str]:
    """Start the simulated engine with `cfg`; (became ready, failure class or "")."""
    from autotune.engines import get_adapter
    from autotune.errors import EngineLaunchError, EngineStartupTimeout
    from autotune.process import EngineProcess, free_port
    from autotune.sweep.trial import TrialSpec, engine_command

    adapter = get_adapter("sglang")
    ts = TrialSpec(
        sweep="gate",
        number=i,
        config=cfg,
        engine_version=spec.target.engine_version,
        model=spec.target.model,
        gpu=spec.target.gpu,
        simulate=True,
        sim_time_scale=10,
        sim_extra_args=["--sim-max-startup-s", "0.2"],
        scenarios=[],
        log_dir=str(tmp),
        host_free_gib=spec.target.host_free_gib,
    )
    port = free_port()
    argv, env = engine_command(ts, adapter, port)
    log = tmp / f"gate-{i}.log"
    with EngineProcess(port=port, label=f"gate-{i}") as eng:
        eng.start(argv, env, log)
        try:
            eng.wait_ready(
                f"http://127.0.0.1:{port}/health",
                deadline_s=60,
                is_ready_line=adapter.is_ready_line,
            )
            return True, ""
        except (EngineLaunchError, EngineStartupTimeout) as exc:
            rc = getattr(exc, "returncode", None)
            f = adapter.classify_failure(
                log.read_text(errors="replace"),
                rc,
                was_ready=False,
                timed_out=isinstance(exc, EngineStartupTimeout),
            )
            return False, f.cls.value


def gate(n: int, seed: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import optuna

    from autotune.cli.demo import DEMO_SPEC

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = parse_spec(yaml.safe_load(DEMO_SPEC), source="demo")
    space = build_space(spec)
    card, gpu = load_card(spec.target.model), get_gpu(spec.target.gpu)
    scenarios = [scenario_from_dict(d) for d in spec.workload.scenarios]
    planner = TrialPlanner(
        card=card,
        gpu=gpu,
        space=space,
        version=spec.target.engine_version,
        host_free_gib=spec.target.host_free_gib,
        headroom_gib=spec.objective.vram_headroom_gib,
        need_tokens=longest_request_tokens(scenarios),
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    configs = []
    for _ in range(n):
        trial = study.ask()
        configs.append(space.suggest(trial))
        study.tell(trial, 0.0)
    verdicts = [planner.assess(c) for c in configs]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        launched = list(
            pool.map(lambda ic: _launch_only(spec, ic[1], Path(tmp), ic[0]), enumerate(configs))
        )
    rows = list(zip(verdicts, launched, strict=True))
    failed = [(v, cls) for v, (ok, cls) in rows if not ok]
    through = [(v, cls) for v, cls in failed if v.fits]
    rejected = [(v, ok) for v, (ok, _) in rows if not v.fits]
    mem_rejected = [(v, ok) for v, ok in rejected if not v.rule_ids]
    rule_rejected = [(v, ok) for v, ok in rejected if v.rule_ids]
    print(
        f"gate: {n} random configurations of the demo space, each launched on the simulated "
        f"engine ({time.monotonic() - t0:.0f} s)"
    )
    print(
        f"  failed to start: {len(failed)}; the gate let through {len(through)} of them "
        f"({len(through) / max(len(failed), 1):.1%}; goal <= 5 %)"
    )
    mem_false = sum(ok for _, ok in mem_rejected)
    print(
        f"  rejected for memory (planner): {len(mem_rejected)}, of which started: {mem_false} "
        f"(false rejects {mem_false / n:.1%} of all; goal <= 2 %)"
    )
    rule_started = sum(ok for _, ok in rule_rejected)
    print(
        f"  rejected by a rule (P1/P2/P6/...): {len(rule_rejected)}, of which started on the "
        f"simulator: {rule_started} (it does not emulate those crashes; real-engine facts)"
    )
    classes: dict[str, int] = {}
    for _, cls in failed:
        classes[cls] = classes.get(cls, 0) + 1
    print(f"  failure classes of the configurations that did not start: {classes}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--plot", type=Path, default=None, help="write best-vs-trials PNG here")
    ap.add_argument("--json", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="keep the exhaustive result in this JSON file (recomputed if absent)",
    )
    ap.add_argument(
        "--gate",
        type=int,
        default=0,
        metavar="N",
        help="measure wasted launches and false rejects on N random configurations",
    )
    a = ap.parse_args()
    if a.gate:
        gate(a.gate, seed=0)
        return

    spec = parse_spec(yaml.safe_load(SPEC), source="sweep_quality")
    t0 = time.monotonic()
    if a.cache and a.cache.exists():
        c = json.loads(a.cache.read_text())
        opt, opt_cfg, values, size = c["optimum"], c["config"], c["values"], c["size"]
    else:
        opt, opt_cfg, values, size = exhaustive(spec)
        if a.cache:
            a.cache.write_text(
                json.dumps({"optimum": opt, "config": opt_cfg, "values": values, "size": size})
            )
    near = sum(v >= 0.97 * opt for v in values)
    print(
        f"space: {size} configurations, {len(values)} pass the gate "
        f"(exhaustive in {time.monotonic() - t0:.0f} s)"
    )
    print(
        f"optimum: {opt:.1f} tok/s (simulated); median feasible {statistics.median(values):.1f}; "
        f"{near} configurations ({near / len(values):.1%}) within 3 %"
    )
    print("optimum config:", {k: v for k, v in opt_cfg.items() if v is not None})

    results: dict[str, list[list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant, (sampler, refine) in VARIANTS.items():
            results[variant] = []
            for seed in range(a.seeds):
                data = yaml.safe_load(SPEC)
                data["name"] = f"q-{sampler}-{refine}-{seed}"
                data["search"].update(sampler=sampler, seed=seed, refine=refine)
                data["budget"]["max_trials"] = a.trials
                s = parse_spec(data)
                store = Store(path=Path(tmp) / f"{data['name']}.db")
                t1 = time.monotonic()
                run_sweep(
                    s,
                    store=store,
                    out_dir=Path(tmp) / data["name"],
                    executor=AnalyticExecutor(1),
                    install_signals=False,
                )
                c = curve(store, data["name"])
                store.close()
                results[variant].append(c)
                print(
                    f"  {variant:10s} seed {seed}: best {c[-1]:.1f} = {c[-1] / opt:.1%} of "
                    f"optimum ({len(c)} trials, {time.monotonic() - t1:.0f} s)"
                )

    print("\nbest-so-far / optimum, mean over seeds (min..max):")
    print("trials  " + "  ".join(f"{s:>22s}" for s in results))
    for n in (*[c for c in CHECKPOINTS if c <= a.trials], a.trials):
        row = []
        for runs in results.values():
            r = [c[min(n, len(c)) - 1] / opt for c in runs]
            row.append(f"{statistics.mean(r):6.1%} ({min(r):.1%}..{max(r):.1%})")
        print(f"{n:6d}  " + "  ".join(f"{x:>22s}" for x in row))
        if n == a.trials:
            break
    for sampler, runs in results.items():
        ok = sum(c[-1] >= 0.97 * opt for c in runs)
        print(
            f"{sampler}: {ok}/{len(runs)} runs within 3 % of the optimum after {a.trials} trials"
        )

    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "optimum": opt,
                    "space": size,
                    "feasible": len(values),
                    "near_optimal": near,
                    "curves": results,
                },
                indent=1,
            )
        )
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for sampler, runs in results.items():
            n = min(len(c) for c in runs)
            mean = [statistics.mean(c[i] / opt for c in runs) for i in range(n)]
            ax.plot(range(1, n + 1), mean, label=f"{sampler} (mean of {len(runs)} seeds)")
        ax.axhline(0.97, ls="--", c="grey", label="97 % of optimum")
        ax.set_xlabel("trials launched")
        ax.set_ylabel("best so far / exhaustive optimum")
        ax.set_title("Sweep quality (analytic simulator, Qwen3.8-27B AWQ on 4080S)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
