"""`autotune calibrate FILE...`: read real SGLang, vLLM or llama-server startup logs, plan each launch again
with the configuration it logged, and keep what the machine did differently (free memory before
the weights, the weights, the KV pool) for the sweeps on that (engine, GPU, model); read serving
benchmark results and keep the decode and prefill speed measured over the roofline's for
`autotune plan --calibrated`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import typer

from autotune.cli._common import JSON_OPTION, emit_json, parse_sets
from autotune.cli.plan import coerce_value
from autotune.cli.sweep import DB_HELP, open_store
from autotune.errors import ConfigError


def calibrate(
    files: list[Path] = typer.Argument(
        ...,
        help="Startup logs of real launches (one per file) and serving-benchmark results "
        "(SGLang bench_serving --output-file JSONL, vllm bench serve --save-result JSON).",
    ),
    model: str = typer.Option(
        ...,
        "--model",
        help="The model the launches ran: built-in card, HF id or folder; for llama-server the "
        "GGUF file it loaded.",
    ),
    gpu: str = typer.Option(
        ..., "--gpu", help="Catalog GPU name (autotune gpus), auto, or cpu (llama-server)."
    ),
    engine: Literal["sglang", "vllm", "llamacpp"] | None = typer.Option(
        None, "--engine", help="sglang, vllm or llamacpp (default: told by the log's lines)."
    ),
    engine_version: str | None = typer.Option(
        None,
        "--engine-version",
        help="Engine version (vLLM logs name it; SGLang's do not; for llama-server the "
        "llama-cpp-python release, e.g. 0.3.36: it logs a build number).",
    ),
    tp: int | None = typer.Option(None, "--tp", min=1, help="TP size (default: from the log)."),
    sets: list[str] | None = typer.Option(
        None, "--set", help="Engine field=value the log does not record (repeatable)."
    ),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="Compare only; store nothing."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Compare each log and benchmark result with the planner and store the machine's
    calibration: memory from startup logs, decode and prefill efficiency from benchmarks (each
    benchmark planned with the configuration of the startup log given with it)."""
    from autotune.calibration.bench import looks_like_bench
    from autotune.calibration.calibrate import calibrate_log, read_launch
    from autotune.calibration.speed import calibrate_bench

    overrides = {k: coerce_value(v) for k, v in parse_sets(sets).items()}
    benches = [p for p in files if _is_bench(p, looks_like_bench)]
    logs = [p for p in files if p not in benches]
    if benches and len(logs) > 1:
        raise ConfigError(
            f"{len(logs)} startup logs given with benchmark results: give the one launch the "
            "benchmarks ran against (one calibrate call per launch)",
            field="FILES",
        )
    opts: dict[str, Any] = dict(engine=engine, version=engine_version, tp=tp, overrides=overrides)
    found = [calibrate_log(p, model=model, gpu=gpu, **opts) for p in logs]
    launch = read_launch(logs[0], **opts) if benches and logs else None
    speeds = [calibrate_bench(p, model=model, gpu=gpu, launch=launch, **opts) for p in benches]
    stored: list[dict[str, Any]] = []
    if not dry_run:
        with open_store(db) as store:
            for c in found:
                store.add_calibration(**asdict(c))
            for sc in speeds:
                store.add_speed_calibrations(sc.rows())
            stored = [_target_factors(store, sc) for sc in speeds]
    if json_out:
        emit_json(
            {
                "memory": [{**asdict(c), "kv_ratio": round(c.kv_ratio, 4)} for c in found],
                "speed": [_speed_json(sc) for sc in speeds],
                "stored_speed": stored,
            }
            if benches
            else [{**asdict(c), "kv_ratio": round(c.kv_ratio, 4)} for c in found]
        )
        return
    for c in found:
        _print_memory(c)
    for i, sc in enumerate(speeds):
        _print_speed(sc, stored[i] if stored else None)
    if not dry_run and found:
        typer.echo(f"stored {len(found)} calibration(s); sweeps on this target start from them")


def _is_bench(path: Path, looks_like_bench: Any) -> bool:
    try:
        return bool(looks_like_bench(path.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False  # calibrate_log says why


def _target_factors(store: Any, sc: Any) -> dict[str, Any]:
    from autotune.calibration.speed import stored_factors

    rows = store.get_speed_calibrations(engine=sc.engine, gpu=sc.gpu, model=sc.model)
    return {"engine": sc.engine, "gpu": sc.gpu, "model": sc.model, "tp": sc.tp,
            **stored_factors(rows, tp=sc.tp)}  # fmt: skip


def _speed_json(sc: Any) -> dict[str, Any]:
    d = asdict(sc)
    for phase in ("decode", "prefill"):
        d[f"{phase}_efficiency"], d[f"{phase}_runs"] = sc.factor(phase)
    return d


def _print_memory(c: Any) -> None:
    typer.echo(
        f"{c.source}: {c.engine} {c.engine_version}, {c.model} on {c.gpu} TP{c.tp}: KV pool "
        f"{c.logged_kv:,} logged, {c.predicted_kv:,} planned (x{c.kv_ratio:.4f})"
    )
    for label, v in (
        ("free memory before weights", c.free_shift_gib),
        ("weights", c.weights_shift_gib),
        ("available KV memory", c.kv_memory_shift_gib),
    ):
        if v is not None:
            typer.echo(f"  {label:28s} {v:+.3f} GiB against the plan")


def _print_speed(sc: Any, stored: dict[str, Any] | None) -> None:
    typer.echo(
        f"{sc.source}: {sc.engine} {sc.engine_version}, {sc.model} on {sc.gpu} TP{sc.tp} "
        f"(configuration from {sc.config_from})"
    )
    for s in sc.samples:
        where = (
            f"{s.streams} stream(s) at depth {s.context_len:,}"
            if s.phase == "decode"
            else f"{s.input_len:,}-token prompt"
        )
        typer.echo(
            f"  run {s.run_index} {s.phase:7s} {where}: {s.measured_tok_s:,.1f} tok/s measured, "
            f"{s.predicted_tok_s:,.1f} predicted (x{s.ratio:.3f})"
        )
    for why in sc.skipped:
        typer.echo(f"  - {why}")
    for phase in ("decode", "prefill"):
        f, n = sc.factor(phase)
        line = f"  {phase} efficiency x{f:.3f} from {n} run(s) of this file" if f else ""
        if f and stored and stored.get(f"{phase}_efficiency"):
            line += (
                f"; stored for this target: x{stored[f'{phase}_efficiency']:.3f} from "
                f"{stored[f'{phase}_runs']} run(s)"
            )
        if line:
            typer.echo(line)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
