"""`autotune plan`: predict what a launch gets on a GPU and whether it fits, without a GPU."""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import typer

from autotune.cli._common import JSON_OPTION, emit_json, parse_sets


def coerce_value(raw: str) -> Any:
    """`--set` values: true/false, none/null, int, float, else the string itself."""
    low = raw.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null", ""):
        return None
    for cast in (int, float):
        with contextlib.suppress(ValueError):  # not this type: try the next, else keep text
            return cast(raw)
    return raw


def plan(
    model: str = typer.Option(
        ...,
        "--model",
        help="Built-in card name or a local HF model folder (llama.cpp: a GGUF file).",
    ),
    gpu: str = typer.Option(
        ..., "--gpu", help="Catalog GPU name (autotune gpus), auto, or cpu (llama.cpp only)."
    ),
    engine: Literal["sglang", "vllm", "llamacpp"] = typer.Option(
        "sglang", "--engine", help="Engine whose accounting to mirror: sglang, vllm, llamacpp."
    ),
    engine_version: str | None = typer.Option(
        None,
        "--engine-version",
        help="Engine version (default: sglang 0.5.17, the newest vLLM, llama.cpp's pinned one).",
    ),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel size."),
    gpu_free_gib: float | None = typer.Option(
        None,
        "--gpu-free-gib",
        help="Free GPU memory before weights (default: capacity - reserve).",
    ),
    host_free_gib: float | None = typer.Option(
        None,
        "--host-free-gib",
        help="Available host RAM for HiCache or a CPU run (default: this machine's).",
    ),
    sets: list[str] | None = typer.Option(
        None, "--set", help="Engine field=value, e.g. mem_fraction_static=0.92 (repeatable)."
    ),
    perf: bool = typer.Option(False, "--perf", help="Add the roofline performance prediction."),
    calibrated: bool = typer.Option(
        False,
        "--calibrated",
        help="Also give the KV pool corrected by this target's stored launches and the "
        "speed with its stored benchmark factors (autotune calibrate, real sweeps).",
    ),
    db: str | None = typer.Option(None, "--db", help="Database for --calibrated."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Predict weights, KV pool, mamba slots and max running requests; say whether it fits."""
    from autotune.planner.dispatch import followed_note, plan_target

    config = {k: coerce_value(v) for k, v in parse_sets(sets).items()}
    result = plan_target(
        engine,
        model,
        gpu,
        config,
        version=engine_version,
        tp=tp,
        gpu_free_gib=gpu_free_gib,
        host_free_gib=host_free_gib,
        perf=perf,
    )
    if calibrated:
        result = result.model_copy(
            update={"calibrated": _calibrated(result, engine, model, gpu, config, db)}
        )
    if json_out:
        emit_json(result)
        return
    _print_human(result)
    note = followed_note(engine, engine_version) if engine_version else None
    if note is not None:
        typer.echo(f"  note: {note}")


def _calibrated(
    plan: Any, engine: str, model: str, gpu: str, config: dict[str, Any], db: str | None
) -> dict[str, Any]:
    """The sweep gate's correction (sweep/planning.py) seeded with the stored launches of
    (engine, GPU, model), applied to this configuration; and the roofline's speed with the
    stored benchmark factors (calibration/speed.py)."""
    from autotune.cli.sweep import open_store
    from autotune.planner.dispatch import load_target_model, resolve_target_gpu
    from autotune.space import builtin_space
    from autotune.sweep.planning import TrialPlanner

    with open_store(db) as store:
        rows = store.get_calibrations(engine=engine, gpu=plan.gpu, model=model)
        speed_rows = store.get_speed_calibrations(engine=engine, gpu=plan.gpu, model=model)
    rows = [r for r in rows if r.engine_version == plan.engine_version] or rows
    out: dict[str, Any] = {"kv_pool_tokens": None, "launches": 0, "model": None}
    out["speed"] = _calibrated_speed(plan, engine, model, gpu, config, speed_rows)
    if not rows:
        return out
    gate = TrialPlanner(
        card=load_target_model(engine, model),
        gpu=resolve_target_gpu(engine, gpu),
        space=builtin_space(engine),
        version=plan.engine_version,
        tp=plan.tp,
        engine=engine,
    )
    gate.seed(rows)
    a = gate.assess(config)
    return {
        **out,
        "kv_pool_tokens": a.corrected_kv_pool_tokens,
        "launches": len(rows),
        "model": gate.correction()["model"],
    }


def _calibrated_speed(
    plan: Any, engine: str, model: str, gpu: str, config: dict[str, Any], rows: list[Any]
) -> dict[str, Any] | None:
    """Stored decode and prefill factors applied to this launch's roofline; None without
    stored benchmark runs or a model card."""
    from autotune.calibration.speed import calibrated_speed, stored_factors
    from autotune.models.card import ModelCard
    from autotune.planner.dispatch import load_target_model, resolve_target_gpu, scheduler_plan
    from autotune.planner.perf import PerfModel

    if not rows:
        return None
    card = load_target_model(engine, model)
    spec = resolve_target_gpu(engine, gpu)
    if not isinstance(card, ModelCard) or spec is None:
        return None
    cfg = dict(config)
    if plan.tp > 1:
        cfg.setdefault("tp_size", plan.tp)
    perf = PerfModel(card, spec, scheduler_plan(plan), config=cfg)
    return calibrated_speed(perf, stored_factors(rows, tp=plan.tp))


def _print_human(p: Any) -> None:
    from autotune.planner.dispatch import engine_label

    verdict = "fits" if p.fits else "does NOT fit"
    label = engine_label(p.engine)
    typer.echo(f"{p.model} on {p.gpu} (TP{p.tp}), {label} {p.engine_version}: {verdict}")
    rows = [
        ("free before weights", f"{p.pre_weights_free_gib:.2f} GiB"),
        ("weights per GPU", f"{p.weights_gib:.2f} GiB"),
        ("mem_fraction_static", f"{p.mem_fraction_static}"),
        ("KV cell", f"{p.kv_cell_bytes} B/token ({p.kv_dtype})"),
        ("KV pool", f"{p.kv_pool_tokens:,} tokens ({p.kv_pool_gib:.2f} GiB)"),
        ("mamba slots", f"{p.mamba_slots} (+1 padding), {p.mamba_pool_gib:.2f} GiB"),
        ("max running requests", f"{p.max_running_requests} (bound by {p.bound_by})"),
        ("slack / needed", f"{p.slack_gib:.2f} / {p.slack_needed_gib:.2f} GiB"),
    ]
    if p.host_pool_tokens is not None:
        rows.append(("HiCache host pool", f"{p.host_pool_tokens:,} tokens, {p.host_pool_gb} GB"))
    c = p.calibrated
    if c is not None:
        rows.append(
            (
                "KV pool, calibrated",
                f"{c['kv_pool_tokens']:,} tokens ({c['model']} model, {c['launches']} launches)"
                if c["kv_pool_tokens"] is not None
                else "no stored launches of this engine, GPU and model",
            )
        )
    if c is not None:
        rows.append(("speed, calibrated", _speed_line(c.get("speed"))))
    for k, v in rows:
        typer.echo(f"  {k:22s} {v}")
    for r in p.reasons:
        typer.echo(f"  ! {r}")
    if p.perf:
        pf = p.perf
        typer.echo(
            f"  decode {pf['decode_tok_s']} tok/s (2 streams {pf['decode_tok_s_2streams']}); "
            f"prefill {pf['prefill_tok_s']} tok/s  [simulated roofline]"
        )


def _speed_line(sp: dict[str, Any] | None) -> str:
    if not sp:
        return "no stored benchmark runs of this engine, GPU and model"
    parts = [f"decode {sp['decode_tok_s']} tok/s (2 streams {sp['decode_tok_s_2streams']})"]
    if sp.get("decode_efficiency"):
        parts[-1] += f" x{sp['decode_efficiency']:.3f} over {sp['decode_runs']} run(s)"
    parts.append(f"prefill {sp['prefill_tok_s']} tok/s")
    if sp.get("prefill_efficiency"):
        parts[-1] += f" x{sp['prefill_efficiency']:.3f} over {sp['prefill_runs']} run(s)"
    return "; ".join(parts)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
