"""`autotune demo`: the README's first command. A sweep on the simulated engine (Qwen3.8-27B
AWQ-INT4 on a simulated RTX 4080 SUPER 32G, SGLang 0.5.17 rules, two workers), then the report
(or, until the report module is present, a summary table)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import typer

from autotune.cli._common import JSON_OPTION, emit_json

# The spec shipped with the package; examples/demo.yaml holds the same text (a test checks).
DEMO_SPEC = """\
# `autotune demo` runs this sweep (the copy embedded in autotune/cli/demo.py; a test keeps the
# two equal). Run it yourself with `autotune sweep examples/demo.yaml`.
#
# Qwen3.8-27B AWQ-INT4 on a SIMULATED RTX 4080 SUPER 32G with SGLang 0.5.17 rules (calibrated
# on that card): the simulator is a real server process that takes SGLang's flags, prints SGLang's log
# lines and answers SGLang's HTTP API with timings from a roofline model, 10x faster than the
# GPU would. Figures are reported in simulated-GPU units.
name: demo
description: >-
  Throughput at 4 concurrent agent-style streams for Qwen3.8-27B AWQ-INT4 on an RTX 4080 SUPER
  32G (simulated), SGLang 0.5.17.
target:
  engine: sglang
  engine_version: "0.5.17"
  model: qwen3.8-27b-awq-int4
  gpu: rtx-4080-super-32g
  tp: 1
  host_free_gib: 64          # a workstation with 64 GiB of RAM: sizes the HiCache host pool (sglang#8102)
simulate:
  time_scale: 10
  seed: 0
  max_startup_s: 0.5
space:
  file: builtin              # autotune/data/search_spaces/sglang.yaml, narrowed for a short demo
  overrides:
    mem_fraction_static: {low: 0.84, high: 0.94, step: 0.02}
    chunked_prefill_size: {choices: [2048, 4096, 8192]}
    max_mamba_cache_size: {choices: [null, 6, 12, 24]}
    max_running_requests: {choices: [null, 2, 4, 8]}
    kv_cache_dtype: {choices: [auto, fp8_e4m3]}
    page_size: {choices: [1, 64]}
    hicache_size: {low: 4, high: 16, step: 4}
    speculative_algorithm: {choices: [null, NGRAM, NEXTN]}
    speculative_num_steps: {low: 2, high: 5}
    speculative_num_draft_tokens: {low: 2, high: 6}
    cuda_graph_max_bs_decode: null
    mamba_radix_cache_strategy: null
    attention_backend: {choices: [null, triton]}   # a kernel choice the GPU has
    schedule_policy: {choices: [null, lpm]}
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
  fixed:
    enable_metrics: true     # /metrics: cache hits and speculative accept length per trial
workload:
  scenarios:
    # cheap probe first: a config below half the best single-stream decode is pruned here
    - {kind: decode, name: probe, prompt_len: 128, output_len: 32, num_requests: 2}
    - {kind: throughput, name: agents, prompt_len: 1024, output_len: 128, concurrency: 4,
       num_requests: 8, text: code}
  prune_below: 0.5
objective:
  metric: agents.output_tok_s
  vram_headroom_gib: 0.25
  constraints:
    - {metric: agents.ttft_p95_s, max: 30}
budget:
  max_trials: 40
  wall_clock_s: 540
search:
  sampler: tpe
  seed: 0
  n_startup_trials: 8
finalists:
  top_k: 2
  repeats: 2
engine:
  startup_timeout_s: 60
  bench_timeout_s: 120
  stop_grace_s: 5
execution:
  executor: inprocess
  workers: 2
"""


def demo(
    out: Path | None = typer.Option(
        None, "--out", help="Output folder (default reports/demo-YYYYmmdd-HHMMSS)."
    ),
    db: str | None = typer.Option(
        None, "--db", help="Database URL or SQLite file (default: OUT/autotune.db)."
    ),
    max_trials: int | None = typer.Option(None, "--max-trials", min=1, help="Launched trials."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Trials at once (2)."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Run a short sweep on the simulated engine and print (or write) its report."""
    from autotune.cli.sweep import open_store, print_summary, write_report_if_available
    from autotune.sweep.orchestrator import run_sweep
    from autotune.sweep.spec import spec_from_yaml

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"demo-{stamp}"
    spec = spec_from_yaml(DEMO_SPEC, source="autotune demo (built-in spec)")
    spec = spec.model_copy(update={"name": name})
    out_dir = out or Path("reports") / name
    out_dir.mkdir(parents=True, exist_ok=True)
    store = open_store(db or str(out_dir / "autotune.db"))
    outcome = run_sweep(
        spec,
        store=store,
        spec_yaml=DEMO_SPEC,
        out_dir=out_dir,
        workers=workers,
        max_trials=max_trials,
        progress=not json_out,
    )
    report = write_report_if_available(store, name, out_dir)
    if json_out:
        emit_json({**outcome.model_dump(mode="json"), "report": str(report) if report else None})
    else:
        print_summary(outcome)
        typer.echo(
            f"report: {report}" if report else f"results: {out_dir} (db {store.display_url})"
        )
    raise typer.Exit(outcome.exit_code)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
