"""Search landscapes: does the sweep capture the possible improvement over the engine's defaults
in a space that holds the knobs people turn by hand (attention kernels per phase, Triton KV
splits, scheduling policy, the overlap scheduler, CUDA-graph lists, memory and speculation)?

A benchmark script, not a test. Each landscape is a sweep spec scored by the simulator's analytic
mode (the same scheduler and roofline the simulated server runs, in virtual time). The space is
the built-in one narrowed by the spec's overrides and then to the target, exactly as a sweep
narrows it (autotune/sweep/narrowing.py: release flags, kernels the GPU has). For every landscape:

- the optimum: every configuration of the narrowed space that passes the sweep's gate, scored
  noise-free;
- the defaults: the engine's own choices (the space's baseline), scored noise-free;
- per seed, the default search (constrained TPE, then local refinement) with the trials' noisy
  figures; the winner after n launches is the best feasible trial it measured, and its score is
  its configuration's noise-free value.

Captured share = (winner - defaults) / (optimum - defaults): 1.0 found the best, 0.0 no better
than not tuning. Printed per landscape at 8, 16 and 40 launches: median, 10th percentile and
worst over the seeds.

    .venv/bin/python benchmarks/search_landscapes.py                      # all, 10 seeds
    .venv/bin/python benchmarks/search_landscapes.py --only attention-hopper --seeds 20 \
        --json benchmarks/results/search_landscapes.json
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
from autotune.planner.dispatch import load_target_model, resolve_target_gpu  # noqa: E402
from autotune.sim.analytic import evaluate  # noqa: E402
from autotune.store.db import Store  # noqa: E402
from autotune.sweep.analytic import AnalyticExecutor, _workload  # noqa: E402
from autotune.sweep.orchestrator import run_sweep  # noqa: E402
from autotune.sweep.planning import TrialPlanner, longest_request_tokens  # noqa: E402
from autotune.sweep.setup import target_space  # noqa: E402
from autotune.sweep.spec import SweepSpec, parse_spec  # noqa: E402

BUDGETS = (8, 16, 40)
KERNEL_KNOBS = (
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "triton_attention_num_kv_splits",
)

# Knobs every landscape leaves to the engine unless it opens them.
_ENGINE_DECIDES = """
    enable_hierarchical_cache: false
    mamba_radix_cache_strategy: null
    cuda_graph_max_bs_decode: null
    linear_attn_backend: null
    mamba_ssm_dtype: null
    schedule_conservativeness: null
    max_prefill_tokens: null
    enable_mixed_chunk: false
    sleep_on_idle: false
"""

LANDSCAPES: dict[str, str] = {
    # Hopper, a dense 8B model, eight agents with 32K prompts: the KV cache dominates decode
    # and attention dominates prefill, so the kernels per phase decide the figure (fa3 prefill,
    # TRT-LLM MHA decode from 0.5.19 on sm_90, Triton with its split cap), beside the KV dtype,
    # memory, the overlap scheduler, graph lists and n-gram speculation.
    "attention-dense-hopper": """
name: attention-dense-hopper
target: {engine: sglang, engine_version: "0.5.23", model: Qwen/Qwen3-8B, gpu: h100-80g,
         host_free_gib: 128}
simulate: {time_scale: 1}
space:
  overrides:
    mem_fraction_static: {low: 0.80, high: 0.88, step: 0.08}
    chunked_prefill_size: {choices: [2048, 8192]}
    max_running_requests: {choices: [null, 16]}
    kv_cache_dtype: {choices: [auto, fp8_e4m3]}
    page_size: null
    max_mamba_cache_size: null
    attention_backend: {choices: [null, flashinfer, triton, fa3, trtllm_mha]}
    decode_attention_backend: {choices: [null, flashinfer, triton, trtllm_mha]}
    triton_attention_num_kv_splits: {choices: [null, 16, 32]}
    schedule_policy: {choices: [null, lpm]}
    cuda_graph_bs_decode: {choices: [null, [1, 2, 4]]}
    speculative_algorithm: {choices: [null, NGRAM]}
    speculative_num_steps: 3
    speculative_num_draft_tokens: 4
    prefill_attention_backend: {choices: [null, fa3]}
%s
  fixed:
    context_length: 65536
    reasoning_parser: null
    tool_call_parser: null
workload:
  scenarios:
    - {kind: decode, name: probe, prompt_len: 128, output_len: 32, num_requests: 2}
    - {kind: throughput, name: agents, prompt_len: 32768, output_len: 512, concurrency: 8,
       num_requests: 16, text: code}
objective: {metric: agents.output_tok_s}
budget: {max_trials: 40}
search: {n_startup_trials: 8}
finalists: {top_k: 0}
""",
    # Hopper, a hybrid FP8 model, eight agents with long prompts: the prefill kernel (fa3), the
    # decode kernel (TRT-LLM MHA from 0.5.19 on sm_90, Triton with its split cap), the overlap
    # scheduler, graph lists and MTP all move the figure.
    "attention-hopper": """
name: attention-hopper
target: {engine: sglang, engine_version: "0.5.23", model: qwen3.8-27b-fp8, gpu: h100-80g,
         host_free_gib: 128}
simulate: {time_scale: 1}
space:
  overrides:
    mem_fraction_static: {low: 0.82, high: 0.90, step: 0.04}
    chunked_prefill_size: {choices: [2048, 8192]}
    max_running_requests: {choices: [null, 4, 8]}
    kv_cache_dtype: fp8_e4m3
    page_size: {choices: [1, 64]}
    max_mamba_cache_size: null
    attention_backend: {choices: [null, flashinfer, triton, fa3, trtllm_mha]}
    decode_attention_backend: {choices: [null, flashinfer, triton, trtllm_mha]}
    triton_attention_num_kv_splits: {choices: [null, 16, 32]}
    schedule_policy: {choices: [null, lpm]}
    disable_overlap_schedule: {type: bool}
    cuda_graph_bs_decode: {choices: [null, [1, 2, 4]]}
    speculative_algorithm: {choices: [null, NEXTN]}
    speculative_num_steps: {low: 2, high: 3}
    speculative_eagle_topk: 1
    prefill_attention_backend: null
%s
workload:
  scenarios:
    - {kind: decode, name: probe, prompt_len: 128, output_len: 32, num_requests: 2}
    - {kind: throughput, name: agents, prompt_len: 8192, output_len: 256, concurrency: 8,
       num_requests: 16, text: code}
objective: {metric: agents.output_tok_s}
budget: {max_trials: 40}
search: {n_startup_trials: 8}
finalists: {top_k: 0}
""",
    # Ada, the calibration card, two long-context streams: FlashInfer (the default) against
    # Triton and its split cap, fa3 on sm_89, with memory, paging and the overlap scheduler.
    "attention-ada-long": """
name: attention-ada-long
target: {engine: sglang, engine_version: "0.5.17", model: qwen3.8-27b-awq-int4,
         gpu: rtx-4080-super-32g, host_free_gib: 64}
simulate: {time_scale: 1}
space:
  overrides:
    mem_fraction_static: {low: 0.86, high: 0.94, step: 0.04}
    chunked_prefill_size: {choices: [2048, 8192]}
    max_running_requests: {choices: [null, 2, 4]}
    kv_cache_dtype: fp8_e4m3
    page_size: {choices: [1, 64]}
    max_mamba_cache_size: {choices: [null, 6]}
    attention_backend: {choices: [null, flashinfer, triton, fa3]}
    decode_attention_backend: {choices: [null, triton]}
    triton_attention_num_kv_splits: {choices: [null, 16, 32]}
    schedule_policy: {choices: [null, lpm]}
    disable_overlap_schedule: {type: bool}
    cuda_graph_bs_decode: {choices: [null, [1, 2, 4]]}
    speculative_algorithm: {choices: [null, NGRAM]}
    speculative_num_steps: 3
    speculative_num_draft_tokens: 4
    prefill_attention_backend: null
%s
workload:
  scenarios:
    - {kind: decode, name: probe, prompt_len: 128, output_len: 32, num_requests: 2}
    - {kind: throughput, name: long, prompt_len: 32768, output_len: 256, concurrency: 2,
       num_requests: 4, text: code}
objective: {metric: long.output_tok_s}
budget: {max_trials: 40}
search: {n_startup_trials: 8}
finalists: {top_k: 0}
""",
}


def _spec(name: str) -> SweepSpec:
    return parse_spec(yaml.safe_load(LANDSCAPES[name] % _ENGINE_DECIDES), source=name)


class Landscape:
    """One landscape's narrowed space, gate and noise-free objective."""

    def __init__(self, spec: SweepSpec):
        self.spec = spec
        t = spec.target
        self.card = load_target_model(t.engine, t.model)
        self.gpu = resolve_target_gpu(t.engine, t.gpu, field="target.gpu")
        assert self.gpu is not None
        self.notes: dict[str, Any] = {}
        self.space = target_space(spec, self.card, self.gpu, self.notes)
        scenarios = [scenario_from_dict(d) for d in spec.workload.scenarios]
        metric, _, self.figure = spec.objective.metric.partition(".")
        self.scenario = next(s for s in scenarios if s.label == metric)
        self.planner = TrialPlanner(
            card=self.card,
            gpu=self.gpu,
            space=self.space,
            version=t.engine_version,
            host_free_gib=t.host_free_gib,
            headroom_gib=spec.objective.vram_headroom_gib,
            need_tokens=longest_request_tokens(scenarios),
        )
        self._cache: dict[str, float] = {}

    def true_value(self, config: dict[str, Any]) -> float:
        """The objective without noise (0.0 where the gate refuses the configuration)."""
        key = json.dumps(config, sort_keys=True, default=str)
        if key not in self._cache:
            value = 0.0
            if self.planner.assess(config).fits:
                t = self.spec.target
                r = evaluate(
                    self.card, self.gpu, config, _workload(self.scenario),
                    version=t.engine_version, host_free_gib=t.host_free_gib, noise=0.0,
                )  # fmt: skip
                value = float(r.get(self.figure) or 0.0) if r.get("fits") else 0.0
            self._cache[key] = value
        return self._cache[key]

    def optimum(self) -> tuple[float, dict[str, Any], int, float]:
        """(optimum, its configuration, configurations, the best with every attention kernel
        left to the engine: how much the kernel choice is worth here)."""
        best, best_cfg, n, engine_kernels = 0.0, {}, 0, 0.0
        for cfg in self.space.grid():
            n += 1
            v = self.true_value(cfg)
            if v > best:
                best, best_cfg = v, cfg
            if not any(cfg.get(k) for k in KERNEL_KNOBS):
                engine_kernels = max(engine_kernels, v)
        return best, best_cfg, n, engine_kernels


def kernel_spread(land: Landscape, best: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
    """The optimum's other knobs held, every attention-kernel choice of the narrowed space:
    (best, worst feasible value, the worst choice): what a wrong kernel costs here."""
    import itertools

    names = [n for n in KERNEL_KNOBS if n in land.space.parameters]
    grids = [land.space.parameters[n].grid_values() for n in names]
    hi, lo, worst = 0.0, float("inf"), {}
    for combo in itertools.product(*grids):
        cfg = land.space.resolve({**best, **dict(zip(names, combo, strict=True))})
        v = land.true_value(dict(cfg))
        if v <= 0:
            continue
        hi = max(hi, v)
        if v < lo:
            lo, worst = v, {n: cfg.get(n) for n in names if cfg.get(n) is not None}
    return hi, lo, worst


def _winners(store: Store, name: str) -> list[dict[str, Any] | None]:
    """The best feasible configuration measured after each launch (by its noisy figure)."""
    out: list[dict[str, Any] | None] = []
    best, best_cfg = -1.0, None
    for t in store.get_trials(store.get_sweep(name).id or 0):
        if t.launch is None:
            continue  # pruned by the gate: no launch spent
        cons = (t.launch or {}).get("constraints") or {}
        if t.value is not None and not any(v > 0 for v in cons.values()) and t.value > best:
            best, best_cfg = t.value, dict(t.config)
        out.append(best_cfg)
    return out


def run(name: str, seeds: int, budget: int) -> dict[str, Any]:
    spec = _spec(name)
    land = Landscape(spec)
    t0 = time.monotonic()
    opt, opt_cfg, size, engine_kernels = land.optimum()
    base = land.true_value(land.space.defaults())
    print(
        f"\n== {name}: {size} configurations after narrowing (exhaustive {time.monotonic() - t0:.0f} s)"
    )
    for line in land.notes.get("narrowed", []):
        print(f"   narrowed: {line[:150]}")
    print(f"   defaults {base:.1f}, optimum {opt:.1f} {land.figure} (x{opt / base:.3f})")
    print(
        f"   best with the engine's attention kernels {engine_kernels:.1f}: the kernel choice is "
        f"worth x{opt / engine_kernels:.3f} here"
    )
    print("   optimum:", {k: v for k, v in opt_cfg.items() if v not in (None, False)})
    hi, lo, worst = kernel_spread(land, opt_cfg)
    print(
        f"   kernels at the optimum's other settings: best {hi:.1f}, worst {lo:.1f} "
        f"(x{hi / lo:.3f}; worst {worst})"
    )
    shares: dict[int, list[float]] = {n: [] for n in BUDGETS if n <= budget}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            data = yaml.safe_load(LANDSCAPES[name] % _ENGINE_DECIDES)
            data["name"] = f"{name}-{seed}"
            data["search"]["seed"] = seed
            data["simulate"]["seed"] = seed
            data["budget"]["max_trials"] = budget
            store = Store(path=Path(tmp) / f"{seed}.db")
            t1 = time.monotonic()
            run_sweep(
                parse_spec(data),
                store=store,
                out_dir=Path(tmp) / str(seed),
                executor=AnalyticExecutor(1),
                install_signals=False,
            )
            winners = _winners(store, data["name"])
            store.close()
            row = []
            for n in shares:
                cfg = winners[min(n, len(winners)) - 1] if winners else None
                v = land.true_value(cfg) if cfg else 0.0
                share = (v - base) / (opt - base) if opt > base else 1.0
                shares[n].append(share)
                row.append(f"{n}: {share:.3f}")
            print(f"   seed {seed}: {', '.join(row)} ({time.monotonic() - t1:.0f} s)")
    summary = {
        n: {
            "median": statistics.median(v),
            "p10": sorted(v)[max(int(len(v) * 0.1) - 1, 0)] if len(v) >= 10 else min(v),
            "worst": min(v),
        }
        for n, v in shares.items()
    }
    for n, s in summary.items():
        print(
            f"   {n:3d} launches: captured share median {s['median']:.3f}, "
            f"p10 {s['p10']:.3f}, worst {s['worst']:.3f}"
        )
    return {
        "landscape": name,
        "configurations": size,
        "defaults": base,
        "optimum": opt,
        "best_with_engine_kernels": engine_kernels,
        "kernel_spread": {"best": hi, "worst": lo, "worst_choice": worst},
        "optimum_config": {k: v for k, v in opt_cfg.items() if v is not None},
        "seeds": seeds,
        "shares": {str(n): v for n, v in shares.items()},
        "summary": {str(n): s for n, s in summary.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budget", type=int, default=40, help="launches per sweep")
    ap.add_argument("--only", action="append", choices=sorted(LANDSCAPES))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--spread-only",
        action="store_true",
        help="only add the kernel spread at each stored optimum to --json (no sweeps)",
    )
    a = ap.parse_args()
    if a.spread_only:
        assert a.json is not None, "--spread-only needs --json"
        stored = json.loads(a.json.read_text())
        for entry in stored:
            if a.only and entry["landscape"] not in a.only:
                continue
            land = Landscape(_spec(entry["landscape"]))
            hi, lo, worst = kernel_spread(land, entry["optimum_config"])
            entry["kernel_spread"] = {"best": hi, "worst": lo, "worst_choice": worst}
            print(f"{entry['landscape']}: kernels x{hi / lo:.3f} (worst {worst})")
        a.json.write_text(json.dumps(stored, indent=1, default=str) + "\n")
        return
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = [run(name, a.seeds, a.budget) for name in (a.only or LANDSCAPES)]
    if a.json:
        # landscapes run before (and not now) keep their entries
        kept = json.loads(a.json.read_text()) if a.json.exists() else []
        ran = {o["landscape"] for o in out}
        merged = [k for k in kept if k.get("landscape") not in ran] + out
        merged.sort(key=lambda o: list(LANDSCAPES).index(o["landscape"]))
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(merged, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
