"""`autotune kernels ...`: Triton GEMM configs for the FP8 W8A8 block-wise and INT4 W4A16 kernels.

autotune kernels shapes  --model qwen3.8-27b-fp8 --tp 1 --tp 2
autotune kernels tune    --model qwen3.8-27b-fp8 --tp 1 --out tuned/    (needs a GPU)
autotune kernels install --engine sglang [--from DIR] [--dry-run]
autotune kernels show    PATH [--m 16]
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from autotune.cli._common import JSON_OPTION, emit_json
from autotune.errors import ConfigError, HardwareError

if TYPE_CHECKING:
    from kernels_tuning.space import KernelKind

kernels_app = typer.Typer(
    help="Tune and install Triton GEMM configs (FP8 W8A8 block-wise, INT4 W4A16).",
    no_args_is_help=True,
)

KIND_HELP = "fp8 (W8A8 block [128,128]) or int4 (W4A16, group 128); default: from the card."
# Where each engine reads dense block-FP8 configs, relative to its package folder.
ENGINE_CONFIG_DIRS = {
    "sglang": Path("srt/layers/quantization/configs"),
    "vllm": Path("model_executor/layers/quantization/utils/configs"),
}


def _kind(card: Any, kind: str | None) -> KernelKind:
    from kernels_tuning.shapes import kind_for_card

    if kind is None:
        if card is None:
            return "fp8"
        return kind_for_card(card)
    if kind not in ("fp8", "int4"):
        raise ConfigError(f"expected fp8 or int4, got {kind!r}", field="--kind")
    return "fp8" if kind == "fp8" else "int4"


@kernels_app.command("shapes")
def shapes_cmd(
    model: str = typer.Option(..., "--model", help="Built-in card name or a local HF folder."),
    tp: list[int] = typer.Option([1], "--tp", min=1, help="TP size (repeatable)."),
    kind: str | None = typer.Option(None, "--kind", help=KIND_HELP),
    json_out: bool = JSON_OPTION,
) -> None:
    """GEMM shapes (N, K per rank) of a model, merged as SGLang merges them, and batch sizes."""
    from autotune.models import load_card
    from kernels_tuning.shapes import batch_sizes, shape_report

    card = load_card(model)
    k = _kind(card, kind)
    out: list[dict[str, Any]] = []
    for t in tp:
        rep = shape_report(card, t, k)
        out.append(
            {
                "tp": t,
                "kind": k,
                "shapes": [
                    {"n": s.n, "k": s.k, "projections": list(s.names), "layers": s.layers}
                    for s in rep.shapes
                ],
                "excluded": [{"projection": p, "reason": r} for p, r in rep.excluded],
            }
        )
    if json_out:
        emit_json({"model": card.name, "batch_sizes": batch_sizes(), "tp": out})
        return
    for block in out:
        typer.echo(f"{card.name}  TP{block['tp']}  {block['kind']}")
        for s in block["shapes"]:
            typer.echo(
                f"  N={s['n']:<6d} K={s['k']:<6d} {'+'.join(s['projections'])} "
                f"({s['layers']} layers)"
            )
        for e in block["excluded"]:
            typer.echo(f"  excluded {e['projection']}: {e['reason']}")
    typer.echo(f"batch sizes: {','.join(str(m) for m in batch_sizes())}")


@kernels_app.command("tune")
def tune_cmd(
    model: str | None = typer.Option(None, "--model", help="Card name or HF folder."),
    nk: list[str] | None = typer.Option(
        None, "--nk", help="Explicit shape N,K instead of/besides --model (repeatable)."
    ),
    tp: list[int] = typer.Option([1], "--tp", min=1, help="TP size (repeatable)."),
    kind: str | None = typer.Option(None, "--kind", help=KIND_HELP),
    batch_sizes: str | None = typer.Option(
        None, "--batch-sizes", help="Comma-separated M values (default: SGLang's 18 + 3, 8192)."
    ),
    strategy: str = typer.Option("budgeted", "--strategy", help="budgeted or exhaustive."),
    executor: str = typer.Option("local", "--executor", help="local (one GPU) or ray."),
    workers: int | None = typer.Option(None, "--workers", help="Ray workers (default: GPUs)."),
    max_evals: int = typer.Option(40, "--max-evals", min=1, help="Budget cap per (shape, M)."),
    budget_fraction: float = typer.Option(0.1, "--budget-fraction", help="Budget: space share."),
    packing: str = typer.Option("awq", "--packing", help="INT4 packing: awq or gptq."),
    out: Path = typer.Option(Path("tuned-kernels"), "--out", help="Output folder for the files."),
    cache: Path | None = typer.Option(
        None, "--cache", help="Result cache JSONL (default: OUT/cache.jsonl; resumes)."
    ),
    precompile: bool = typer.Option(
        True, "--precompile/--no-precompile", help="Compile all binaries in parallel first."
    ),
    deadline_s: float | None = typer.Option(None, "--deadline-s", help="Stop after N seconds."),
    polish: bool = typer.Option(
        True,
        "--polish/--no-polish",
        help="Cross-check each (shape, M) against its neighbours' winners, timed twice.",
    ),
    retune: bool = typer.Option(
        False,
        "--retune",
        help="Search the items again although the cache has them (after a kernel or space "
        "change); the cross-check also times their earlier winners.",
    ),
    deterministic: bool = typer.Option(
        False,
        "--deterministic",
        help="Leave out configs whose output can differ from run to run (INT4 ATOMIC_REDUCE: "
        "split-K partials summed by atomic adds in arrival order).",
    ),
    json_out: bool = JSON_OPTION,
) -> None:
    """Tune configs on this machine's GPU and write the engine-named files under --out."""
    from kernels_tuning import runner
    from kernels_tuning.shapes import (
        batch_sizes as default_batch_sizes,
    )
    from kernels_tuning.shapes import (
        explicit_shapes,
        gemm_shapes,
        parse_batch_sizes,
        parse_nk,
    )

    if model is None and not nk:
        raise ConfigError("give --model or at least one --nk N,K", field="--model")
    if packing not in ("awq", "gptq"):
        raise ConfigError(f"expected awq or gptq, got {packing!r}", field="--packing")
    card = None
    if model is not None:
        from autotune.models import load_card

        card = load_card(model)
    k = _kind(card, kind)
    ms = parse_batch_sizes(batch_sizes) if batch_sizes else default_batch_sizes()
    shapes = []
    if card is not None:
        for t in tp:
            shapes += gemm_shapes(card, t, k)
    shapes += explicit_shapes([parse_nk(s) for s in nk or []], k)
    items = runner.make_items(k, shapes, ms, packing)
    # de-duplicate shapes shared by several TP sizes
    items = list({i.key(): i for i in items}.values())

    limits = _cuda_limits()
    if precompile:
        from kernels_tuning.compile import precompile as run_precompile
        from kernels_tuning.space import compile_set

        rep = run_precompile(k, compile_set(k, limits), packing=packing)
        if not json_out:
            typer.echo(
                f"precompiled {rep.compiled} binaries in {rep.wall_s:.0f}s"
                f"{f', {len(rep.failed)} failed' if rep.failed else ''}"
            )
    params = runner.TuneParams(
        strategy=strategy,
        max_evals=max_evals,
        budget_fraction=budget_fraction,
        deterministic=deterministic,
    )
    summary = runner.tune_and_polish(
        items,
        cache_path=cache or out / "cache.jsonl",
        limits=limits,
        out_dir=out,
        retune=retune,
        polish_pass=polish,
        params=params,
        executor=executor,
        num_workers=workers,
        deadline_s=deadline_s,
        log=None if json_out else typer.echo,
    )
    result = {
        "items": len(summary.results),
        "skipped": len(summary.skipped),
        "evaluations": summary.evaluations,
        "wall_s": round(summary.wall_s, 1),
        "files": [str(p) for p in summary.files],
    }
    if json_out:
        emit_json(result)
    else:
        typer.echo(
            f"{result['items']} items, {result['evaluations']} evaluations, "
            f"{result['wall_s']}s; wrote {len(summary.files)} files under {out}"
        )


def _cuda_limits() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise HardwareError(
            "tuning needs torch with CUDA: pip install 'autotune[kernels]'"
        ) from exc
    if not torch.cuda.is_available():
        raise HardwareError(
            "tuning needs an NVIDIA GPU with CUDA; none is visible here "
            "(shapes, install and show work without one)"
        )
    from kernels_tuning.space import DeviceLimits

    return DeviceLimits.from_torch()


def engine_config_dir(engine: str) -> Path | None:
    """The engine's config folder in the installed package, found without importing it."""
    import importlib.util

    if engine not in ENGINE_CONFIG_DIRS:
        raise ConfigError(
            f"expected one of {sorted(ENGINE_CONFIG_DIRS)}, got {engine!r}", field="--engine"
        )
    try:
        spec = importlib.util.find_spec(engine)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = Path(next(iter(spec.submodule_search_locations)))
    return pkg / ENGINE_CONFIG_DIRS[engine]


@kernels_app.command("install")
def install_cmd(
    engine: str = typer.Option(..., "--engine", help="sglang or vllm."),
    source: Path | None = typer.Option(
        None, "--from", help="Folder with sglang/ and vllm/ (default: the shipped configs)."
    ),
    target: Path | None = typer.Option(
        None, "--target", help="Engine config folder (default: found in the installed engine)."
    ),
    device_name: str | None = typer.Option(
        None, "--device-name", help="Only files for this device, e.g. NVIDIA_H200."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would be copied."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Copy the FP8 config files (and sidecars) into an SGLang or vLLM installation."""
    from kernels_tuning.shim import CONFIG_DIR

    src_root = source or CONFIG_DIR
    src = src_root / engine
    dest = target or engine_config_dir(engine)
    if not src.is_dir():
        raise ConfigError(f"no {engine}/ folder with config files", source=str(src_root))
    files = sorted(
        p
        for p in src.glob("*.json")
        if device_name is None or f"device_name={device_name}," in p.name
    )
    if not files:
        raise ConfigError(
            f"no files{f' for {device_name}' if device_name else ''}", source=str(src)
        )
    where = (
        str(dest)
        if dest is not None
        else (f"<{engine} package>/{ENGINE_CONFIG_DIRS[engine]} ({engine} is not installed here)")
    )
    copied = []
    if dest is not None and not dry_run:
        dest.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copy2(f, dest / f.name)
            copied.append(f.name)
    if json_out:
        emit_json(
            {"engine": engine, "target": where, "files": [f.name for f in files], "copied": copied}
        )
        return
    verb = "copied" if copied else "would copy"
    typer.echo(f"{verb} {len(files)} files to {where}")
    for f in files:
        typer.echo(f"  {f.name}")


@kernels_app.command("show")
def show_cmd(
    path: Path = typer.Argument(..., help="A config file, or a folder of them."),
    m: int | None = typer.Option(None, "--m", help="Show the config picked for this M."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Print a tuned file's table (or a folder's files) with provenance."""
    from kernels_tuning import output
    from kernels_tuning.space import FLAGS

    if path.is_dir():
        files = sorted(
            p for p in path.rglob("*.json") if not p.name.endswith(output.PROVENANCE_SUFFIX)
        )
        if json_out:
            emit_json([str(p) for p in files])
        else:
            for p in files:
                typer.echo(str(p))
        return
    table = output.read_config_file(path)
    prov = output.read_provenance(path)
    diffs: list[str] = []
    if prov is not None:
        diffs = _local_differences(prov)
    picked = output.nearest(table, m) if m is not None else None
    if json_out:
        emit_json(
            {
                "file": str(path),
                "configs": {str(k): v for k, v in table.items()},
                "provenance": prov.to_json() if prov else None,
                "differences": diffs,
                "picked": picked,
            }
        )
        return
    if prov is not None:
        typer.echo(
            f"{prov.gpu_name}, CUDA {prov.cuda}, torch {prov.torch}, Triton {prov.triton},"
            f" {prov.date}"
        )
    for d in diffs:
        typer.echo(f"warning: differs from this machine: {d}")
    for key in sorted(table):
        entry = prov.entries.get(str(key), {}) if prov else {}
        us = entry.get("us")
        c = table[key]
        sk = f" SPLIT_K={c['SPLIT_K']}" if c.get("SPLIT_K", 1) != 1 else ""
        # Our own files' 0/1 options (kernels_tuning.space), named where set.
        sk += "".join(f" {flag}" for flag in FLAGS if c.get(flag))
        typer.echo(
            f"M={key:<5d} BM={c['BLOCK_SIZE_M']:<3} BN={c['BLOCK_SIZE_N']:<3} "
            f"BK={c['BLOCK_SIZE_K']:<3} G={c['GROUP_SIZE_M']:<2} w={c['num_warps']} "
            f"s={c['num_stages']}{sk}" + (f"  {us:.1f} us" if us else "")
        )
    if picked is not None:
        typer.echo(f"M={m} -> {picked}")


def _local_differences(prov: Any) -> list[str]:
    """Compare with this machine when it has CUDA; otherwise nothing to compare."""
    try:
        import torch

        if not torch.cuda.is_available():
            return []
    except ImportError:
        return []
    from kernels_tuning import output

    return output.provenance_differences(prov, output.current_provenance(prov.kernel or "fp8"))


def register(app: typer.Typer) -> None:
    app.add_typer(kernels_app, name="kernels")
