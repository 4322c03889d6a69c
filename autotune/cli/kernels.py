"""`autotune kernels ...`: Triton GEMM configs for the FP8 W8A8 block-wise and INT4 W4A16 kernels.

autotune kernels shapes  --model qwen3.8-27b-fp8 --tp 1 --tp 2
autotune kernels tune    --model qwen3.8-27b-fp8 --tp 1 --out tuned/    (needs a GPU)
autotune kernels tune    --model qwen3.8-27b-fp8 --engine sglang --engine-version 0.5.23
autotune kernels install --engine sglang [--from DIR] [--dry-run]
autotune kernels show    PATH [--m 16]
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer

from autotune.cli._common import JSON_OPTION, PROGRESS_OPTION, ProgressChoice, emit_json
from autotune.errors import ConfigError, HardwareError

if TYPE_CHECKING:
    from kernels_tuning.space import KernelKind

kernels_app = typer.Typer(
    help="Tune and install Triton GEMM configs (FP8 W8A8 block-wise, INT4 W4A16).",
    no_args_is_help=True,
)

KindChoice = Literal["fp8", "int4"]
EngineChoice = Literal["sglang", "vllm"]  # engines whose own kernel is tuned and installed
KIND_HELP = "fp8 (W8A8 block [128,128]) or int4 (W4A16, group 128); default: from the card."


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
    kind: KindChoice | None = typer.Option(None, "--kind", help=KIND_HELP),
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
    kind: KindChoice | None = typer.Option(None, "--kind", help=KIND_HELP),
    batch_sizes: str | None = typer.Option(
        None, "--batch-sizes", help="Comma-separated M values (default: SGLang's 18 + 3, 8192)."
    ),
    strategy: Literal["budgeted", "exhaustive"] = typer.Option(
        "budgeted", "--strategy", help="budgeted or exhaustive."
    ),
    executor: Literal["local", "ray"] = typer.Option(
        "local", "--executor", help="local (one GPU) or ray."
    ),
    workers: int | None = typer.Option(None, "--workers", help="Ray workers (default: GPUs)."),
    max_evals: int = typer.Option(40, "--max-evals", min=1, help="Budget cap per (shape, M)."),
    budget_fraction: float = typer.Option(0.1, "--budget-fraction", help="Budget: space share."),
    packing: Literal["awq", "gptq"] = typer.Option(
        "awq", "--packing", help="INT4 packing: awq or gptq."
    ),
    engine: EngineChoice | None = typer.Option(
        None,
        "--engine",
        help="Tune the engine's own FP8 kernel of --engine-version (sglang or vllm) and write "
        "the file that release reads (OUT/ENGINE/VERSION/); default: autotune's own kernels.",
    ),
    engine_version: str | None = typer.Option(
        None, "--engine-version", help="The engine release whose kernel is tuned (with --engine)."
    ),
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
    progress: ProgressChoice | None = PROGRESS_OPTION,
) -> None:
    """Tune configs on this machine's GPU and write the engine-named files under --out."""
    from autotune.sweep.progress import resolve_progress
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
    target = _engine_target(engine, engine_version, k)
    ms = parse_batch_sizes(batch_sizes) if batch_sizes else default_batch_sizes()
    shapes = []
    if card is not None:
        for t in tp:
            shapes += gemm_shapes(card, t, k)
    shapes += explicit_shapes([parse_nk(s) for s in nk or []], k)
    items = runner.make_items(k, shapes, ms, packing, target.tag if target else "")
    # de-duplicate shapes shared by several TP sizes
    items = list({i.key(): i for i in items}.values())

    limits = _cuda_limits()
    mode = resolve_progress(progress)
    if target is not None:
        _engine_note(target, limits.arch, json_out)
    if precompile and target is not None:
        from kernels_tuning.compile import precompile_engine
        from kernels_tuning.engine_space import engine_compile_set

        splits, swap = target.options(limits.arch)
        by_shape = engine_compile_set(
            ms, sorted({(i.n, i.k) for i in items}), limits, split_k_values=splits, swap_ab=swap
        )
        rep = precompile_engine(target.tag, by_shape, arch=limits.arch)
        if not json_out:
            typer.echo(
                f"precompiled {rep.compiled} binaries of {target.tag}'s kernel in "
                f"{rep.wall_s:.0f}s{f', {len(rep.failed)} failed' if rep.failed else ''}"
            )
    elif precompile:
        from kernels_tuning.compile import precompile as run_precompile
        from kernels_tuning.space import compile_set

        rep = run_precompile(k, compile_set(k, limits), packing=packing)
        if not json_out:
            typer.echo(
                f"precompiled {rep.compiled} binaries in {rep.wall_s:.0f}s"
                f"{f', {len(rep.failed)} failed' if rep.failed else ''}"
            )
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


_ITEM_LINE = re.compile(
    r"^(?P<item>\S+)\s+best\s+(?P<us>\S+) us .*\sevals (?P<evals>\d+)/(?P<space>\d+)\s+"
    r"(?P<wall>[\d.]+)s$"
)


class TuneProgress:
    """`kernels tune` progress on stderr (`--progress`): a rich bar of items done (with the
    tuner's lines above it), JSON events, or nothing; without either, the tuner's lines go to
    stdout unless --json.

    JSON events: `start`, `item` (an item finished: `item`, `best_us`, `evals`), `log` (another
    line of the tuner), `end` (the final state from the run's summary). Each carries the
    counters `done` (items finished), `total`, `failed` (items with no valid config),
    `evaluations` and `eta_s`.
    """

    def __init__(self, total: int, *, mode: str, echo: bool) -> None:
        self.total, self.mode, self.echo = total, mode, echo
        self.done: set[str] = set()
        self.failed: set[str] = set()
        self.evaluations = 0
        self.t0 = time.monotonic()
        self._events: Any = None
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> TuneProgress:
        self.t0 = time.monotonic()
        if self.mode == "json":
            from autotune.sweep.progress import ProgressEvents

            self._events = ProgressEvents(command="kernels tune")
            self._events.emit("start", **self.counters())
        elif self.mode == "rich":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._progress = Progress(
                TextColumn("[bold]kernels tune"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("evals {task.fields[evals]}"),
                TextColumn("failed {task.fields[failed]}"),
                TextColumn("ETA {task.fields[eta]}"),
                console=Console(stderr=True),
            )
            self._progress.start()
            self._task = self._progress.add_task("", total=self.total, evals=0, failed=0, eta="?")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def counters(self, *, eta: float | None = None) -> dict[str, Any]:
        return {
            "done": len(self.done),
            "total": self.total,
            "failed": len(self.failed),
            "evaluations": self.evaluations,
            "eta_s": None if eta is None else round(eta, 1),
        }

    def eta(self) -> float | None:
        from autotune.sweep.progress import eta_seconds

        return eta_seconds(
            done=len(self.done),
            total=self.total,
            elapsed_s=time.monotonic() - self.t0,
            deadline_s=None,
        )

    def log(self, line: str) -> None:
        """The tuner's `log` callback: one line per finished item, and notes."""
        m = _ITEM_LINE.match(line.strip())
        if m is not None:
            key, us = m["item"], float(m["us"])
            if key not in self.done:
                self.evaluations += int(m["evals"])
            self.done.add(key)
            if us != us or us == float("inf"):
                self.failed.add(key)
            else:
                self.failed.discard(key)
        if self._events is not None:
            if m is None:
                self._events.emit("log", text=line, **self.counters(eta=self.eta()))
            else:
                self._events.emit(
                    "item",
                    item=m["item"],
                    best_us=float(m["us"]) if math.isfinite(float(m["us"])) else None,
                    evals=int(m["evals"]),
                    **self.counters(eta=self.eta()),
                )
            return
        if self._progress is not None:
            from autotune.sweep.progress import fmt_duration

            self._progress.console.print(line, highlight=False, markup=False)
            self._progress.update(
                self._task,
                completed=len(self.done),
                evals=self.evaluations,
                failed=len(self.failed),
                eta=fmt_duration(self.eta()),
            )
        elif self.echo:
            typer.echo(line)

    def finish(self, summary: Any) -> None:
        """The final state from the run's summary (items served from the cache included)."""
        self.evaluations = summary.evaluations
        self.done = {str(k) for k in summary.results}
        self.failed = {
            k for k, r in summary.results.items() if not math.isfinite(float(r.best_us))
        }
        if self._events is not None:
            self._events.emit(
                "end",
                items=len(summary.results),
                skipped=len(summary.skipped),
                wall_s=round(summary.wall_s, 1),
                files=len(summary.files),
                **self.counters(eta=0.0),
            )
        elif self._progress is not None:
            self._progress.update(
                self._task,
                completed=len(self.done),
                evals=self.evaluations,
                failed=len(self.failed),
                eta="0:00",
            )


def _engine_target(engine: str | None, version: str | None, kind: str) -> Any:
    """The engine release whose own kernel is tuned (None: our kernels); its facts must be
    catalogued (autotune.engines.kernel_facts)."""
    if engine is None:
        if version is not None:
            raise ConfigError("--engine-version needs --engine", field="--engine-version")
        return None
    if engine not in ("sglang", "vllm"):
        raise ConfigError(f"expected sglang or vllm, got {engine!r}", field="--engine")
    if version is None:
        raise ConfigError(
            "--engine needs --engine-version: the kernel differs between releases",
            field="--engine-version",
        )
    if kind != "fp8":
        raise ConfigError(
            "--engine tunes the engines' block-FP8 kernel; no engine reads an INT4 W4A16 "
            "Triton config file (INT4 files: omit --engine)",
            field="--kind",
        )
    from kernels_tuning.engine_space import EngineTarget

    target = EngineTarget(engine, version)
    target.facts()  # unknown releases fail here, naming the known ones
    return target


def _engine_note(target: Any, arch: str, quiet: bool) -> None:
    """Say which keys the release honours elsewhere but not on this GPU (left out of its files)."""
    facts = target.facts()
    skipped = sorted(key for key in facts.arch_keys if key not in facts.honoured_keys(arch))
    if skipped and not quiet:
        where = ", ".join(sorted({a for key in skipped for a in facts.arch_keys[key]}))
        typer.echo(
            f"note: {target.tag} honours {', '.join(skipped)} only on {where}; this GPU is "
            f"{arch}, so they are neither searched nor written",
            err=True,
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
    f, found = res.facts, res.found
    typer.echo(
        f"{f.engine} {f.version} ({found.version_source})"
        + (f", site-packages {found.site}" if found.site else "")
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
