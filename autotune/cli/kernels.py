"""`autotune kernels ...`: Triton GEMM configs for the FP8 W8A8 block-wise and INT4 W4A16 kernels.

autotune kernels shapes  --model qwen3.8-27b-fp8 --tp 1 --tp 2
autotune kernels tune    --model qwen3.8-27b-fp8 --tp 1 --out tuned/    (needs a GPU)
autotune kernels tune    --model qwen3.8-27b-fp8 --engine sglang --engine-version 0.5.23
autotune kernels install --engine sglang [--from DIR] [--dry-run]
autotune kernels show    PATH [--m 16]
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer

from autotune.cli._common import JSON_OPTION, PROGRESS_OPTION, ProgressChoice, emit_json
from autotune.cli.kernels_plan import (
    EngineWhere,
    engine_note,
    kernel_kind,
    precompile_binaries,
    tune_items,
)
from autotune.cli.kernels_progress import TuneProgress
from autotune.errors import HardwareError

if TYPE_CHECKING:
    from kernels_tuning.install import InstallResult
    from kernels_tuning.work_items import TuneSummary

kernels_app = typer.Typer(
    help="Tune and install Triton GEMM configs (FP8 W8A8 block-wise, INT4 W4A16).",
    no_args_is_help=True,
)

KindChoice = Literal["fp8", "int4"]
EngineChoice = Literal["sglang", "vllm"]  # engines whose own kernel is tuned and installed
KIND_HELP = "fp8 (W8A8 block [128,128]) or int4 (W4A16, group 128); default: from the card."


@kernels_app.command("shapes")
def shapes_cmd(
    model: str = typer.Option(..., "--model", help="Built-in card name or a local HF folder."),
    tp: list[int] = typer.Option([1], "--tp", min=1, help="TP size (repeatable)."),
    kind: KindChoice | None = typer.Option(None, "--kind", help=KIND_HELP),
    json_out: bool = JSON_OPTION,
) -> None:
    """GEMM shapes (N, K per rank) of a model, merged as SGLang merges them, and batch sizes."""
    from autotune.models import load_card
    from kernels_tuning.shapes import batch_sizes, shape_report

    card = load_card(model)
    k = kernel_kind(card, kind)
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


# `kernels tune`'s options, declared here so that the command reads as what it does.
_MODEL_OPT = typer.Option(None, "--model", help="Card name or HF folder.")
_NK_OPT = typer.Option(
    None, "--nk", help="Explicit shape N,K instead of/besides --model (repeatable)."
)
_TP_OPT = typer.Option([1], "--tp", min=1, help="TP size (repeatable).")
_KIND_OPT = typer.Option(None, "--kind", help=KIND_HELP)
_BATCH_SIZES_OPT = typer.Option(
    None, "--batch-sizes", help="Comma-separated M values (default: SGLang's 18 + 3, 8192)."
)
_STRATEGY_OPT = typer.Option("budgeted", "--strategy", help="budgeted or exhaustive.")
_EXECUTOR_OPT = typer.Option("local", "--executor", help="local (one GPU) or ray.")
_WORKERS_OPT = typer.Option(None, "--workers", help="Ray workers (default: GPUs).")
_MAX_EVALS_OPT = typer.Option(40, "--max-evals", min=1, help="Budget cap per (shape, M).")
_BUDGET_FRACTION_OPT = typer.Option(0.1, "--budget-fraction", help="Budget: space share.")
_PACKING_OPT = typer.Option("awq", "--packing", help="INT4 packing: awq or gptq.")
_ENGINE_OPT = typer.Option(
    None,
    "--engine",
    help="Tune the engine's own FP8 kernel of --engine-version (sglang or vllm) and write "
    "the file that release reads (OUT/ENGINE/VERSION/); default: autotune's own kernels.",
)
_ENGINE_VERSION_OPT = typer.Option(
    None,
    "--engine-version",
    help="The engine release whose kernel is tuned (with --engine): a catalogued release, or "
    "the nightly or source build this interpreter has installed (read where it is installed).",
)
_ENGINE_SITE_OPT = typer.Option(
    None,
    "--site-packages",
    help="With --engine: the site-packages folder of the environment the engine is installed "
    "in; its kernel source is read there, never imported (default: this interpreter's "
    "install, else the release's wheel).",
)
_ENGINE_PYTHON_OPT = typer.Option(
    None,
    "--engine-python",
    help="With --engine: the interpreter of the engine's environment, asked where the engine "
    "is (no import); --engine-version defaults to what is installed there.",
)
_OUT_OPT = typer.Option(Path("tuned-kernels"), "--out", help="Output folder for the files.")
_CACHE_OPT = typer.Option(
    None, "--cache", help="Result cache JSONL (default: OUT/cache.jsonl; resumes)."
)
_PRECOMPILE_OPT = typer.Option(
    True, "--precompile/--no-precompile", help="Compile all binaries in parallel first."
)
_DEADLINE_OPT = typer.Option(None, "--deadline-s", help="Stop after N seconds.")
_POLISH_OPT = typer.Option(
    True,
    "--polish/--no-polish",
    help="Cross-check each (shape, M) against its neighbours' winners, timed twice.",
)
_RETUNE_OPT = typer.Option(
    False,
    "--retune",
    help="Search the items again although the cache has them (after a kernel or space "
    "change); the cross-check also times their earlier winners.",
)
_DETERMINISTIC_OPT = typer.Option(
    False,
    "--deterministic",
    help="Leave out configs whose output can differ from run to run (INT4 ATOMIC_REDUCE: "
    "split-K partials summed by atomic adds in arrival order).",
)


@kernels_app.command("tune")
def tune_cmd(
    model: str | None = _MODEL_OPT,
    nk: list[str] | None = _NK_OPT,
    tp: list[int] = _TP_OPT,
    kind: KindChoice | None = _KIND_OPT,
    batch_sizes: str | None = _BATCH_SIZES_OPT,
    strategy: Literal["budgeted", "exhaustive"] = _STRATEGY_OPT,
    executor: Literal["local", "ray"] = _EXECUTOR_OPT,
    workers: int | None = _WORKERS_OPT,
    max_evals: int = _MAX_EVALS_OPT,
    budget_fraction: float = _BUDGET_FRACTION_OPT,
    packing: Literal["awq", "gptq"] = _PACKING_OPT,
    engine: EngineChoice | None = _ENGINE_OPT,
    engine_version: str | None = _ENGINE_VERSION_OPT,
    site_packages: Path | None = _ENGINE_SITE_OPT,
    engine_python: str | None = _ENGINE_PYTHON_OPT,
    out: Path = _OUT_OPT,
    cache: Path | None = _CACHE_OPT,
    precompile: bool = _PRECOMPILE_OPT,
    deadline_s: float | None = _DEADLINE_OPT,
    polish: bool = _POLISH_OPT,
    retune: bool = _RETUNE_OPT,
    deterministic: bool = _DETERMINISTIC_OPT,
    json_out: bool = JSON_OPTION,
    progress: ProgressChoice | None = PROGRESS_OPTION,
) -> None:
    """Tune configs on this machine's GPU and write the engine-named files under --out."""
    from autotune.sweep.progress import resolve_progress
    from kernels_tuning import runner

    k, target, ms, items = tune_items(
        model,
        nk,
        tp,
        kind,
        batch_sizes,
        packing,
        engine,
        engine_version,
        engine_site=EngineWhere(site_packages, engine_python),
    )
    limits = _cuda_limits()
    mode = resolve_progress(progress)
    if target is not None:
        engine_note(target, limits.arch, json_out)
    if precompile:
        precompile_binaries(k, target, ms, items, limits, packing, quiet=json_out)
    bar = TuneProgress(len(items), mode=mode, echo=not json_out)
    params = runner.TuneParams(
        strategy=strategy,
        max_evals=max_evals,
        budget_fraction=budget_fraction,
        deterministic=deterministic,
    )
    with bar:
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
            log=bar.log,
        )
        bar.finish(summary)
    _echo_tuned(summary, out, json_out)


def _echo_tuned(summary: TuneSummary, out: Path, json_out: bool) -> None:
    """`kernels tune`'s summary: a JSON object (--json) or one line."""
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
    """The folder the installed release's own lookup reads (None: not installed here); the
    release's catalogued facts give it, the engine is not imported."""
    from kernels_tuning.install import destination, find_engine, release_facts

    found = find_engine(engine)
    if found.site is None or found.version is None:
        return None
    facts = release_facts(found, have_target=False)
    return destination(facts, found, None)[0]


@kernels_app.command("install")
def install_cmd(
    engine: EngineChoice = typer.Option(..., "--engine", help="sglang or vllm."),
    source: Path | None = typer.Option(
        None,
        "--from",
        help="A `kernels tune --out` folder (DIR/ENGINE/[VERSION/]...; default: the shipped "
        "configs). Only files tuned on the installed release's kernel are installed.",
    ),
    target: Path | None = typer.Option(
        None,
        "--target",
        help="The release's config folder elsewhere (must end in its catalogued path, e.g. "
        "sglang/kernels/ops/gemm/configs); default: in the installed engine.",
    ),
    site_packages: Path | None = typer.Option(
        None, "--site-packages", help="Folder holding the engine package and its .dist-info."
    ),
    engine_python: str | None = typer.Option(
        None, "--engine-python", help="Interpreter of the engine's environment."
    ),
    engine_version: str | None = typer.Option(
        None, "--engine-version", help="Release (overrides the installed metadata)."
    ),
    device_name: str | None = typer.Option(
        None, "--device-name", help="Only files for this device, e.g. NVIDIA_H200."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be copied."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Copy tuned FP8 files where the installed SGLang or vLLM release reads them, then run
    that release's own config lookup to show it finds each one."""
    from kernels_tuning.install import install
    from kernels_tuning.shim import CONFIG_DIR

    res = install(
        engine,
        source=source or CONFIG_DIR,
        target=target,
        site_packages=site_packages,
        engine_python=engine_python,
        engine_version=engine_version,
        device_name=device_name,
        dry_run=dry_run,
    )
    if json_out:
        emit_json(res.to_json())
        return
    _echo_install(res)


def _echo_install(res: InstallResult) -> None:
    """What `kernels install` did (or would do), and the proof, in lines."""
    f, found = res.facts, res.found
    typer.echo(
        f"{f.engine} {f.version} ({found.version_source})"
        + (f", site-packages {found.site}" if found.site else "")
        + (
            ""
            if res.facts_from == "catalog"
            else "; not a catalogued release: its kernel facts were read from its installed source"
        )
    )
    typer.echo(f"reads {res.dest}\n  because {res.reads}")
    verb = "would copy" if res.dry_run else "copied"
    typer.echo(f"{verb} {len(res.files)} files (with their provenance sidecars):")
    for t in res.files:
        typer.echo(f"  {t.name}  (tuned on {f.engine} {t.tuned_on}, {t.arch or 'any arch'})")
    p = res.proof
    found_n = sum(x.found for x in p.files)
    typer.echo(
        f"proof ({p.method}): {found_n}/{len(p.files)} found by {f.lookup_function}; {p.note}"
    )
    for x in p.files:
        typer.echo(
            f"  {'found' if x.found else 'MISSING'}  {x.name}"
            + (f"  {len(x.m_keys)} entries" if x.m_keys else "")
            + (f"  ({x.detail})" if x.detail else "")
        )


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
