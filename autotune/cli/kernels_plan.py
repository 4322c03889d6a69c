"""What `autotune kernels` runs on, from its options: the kernel kind, the engine release whose
own kernel is tuned, the (shape, M) work items of a tune run, and the binaries compiled before
it (the commands themselves: autotune/cli/kernels.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import typer

from autotune.errors import ConfigError

if TYPE_CHECKING:
    from kernels_tuning.space import KernelKind
    from kernels_tuning.work_items import WorkItem


def kernel_kind(card: Any, kind: str | None) -> KernelKind:
    from kernels_tuning.shapes import kind_for_card

    if kind is None:
        if card is None:
            return "fp8"
        return kind_for_card(card)
    if kind not in ("fp8", "int4"):
        raise ConfigError(f"expected fp8 or int4, got {kind!r}", field="--kind")
    return "fp8" if kind == "fp8" else "int4"


class EngineWhere(NamedTuple):
    """Where `kernels tune --engine` finds the release when it is another environment's:
    --site-packages or --engine-python (neither: this interpreter, else the wheel)."""

    site_packages: Path | None = None
    engine_python: str | None = None


def tune_items(
    model: str | None,
    nk: list[str] | None,
    tp: list[int],
    kind: str | None,
    batch_sizes: str | None,
    packing: str,
    engine: str | None,
    engine_version: str | None,
    *,
    engine_site: EngineWhere = EngineWhere(),
) -> tuple[KernelKind, Any, list[int], list[WorkItem]]:
    """(kind, engine target or None, batch sizes, work items) of `kernels tune`: the card's GEMM
    shapes at each TP size and the --nk shapes, each at every batch size."""
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
    k = kernel_kind(card, kind)
    target = engine_target(engine, engine_version, k, where=engine_site)
    ms = parse_batch_sizes(batch_sizes) if batch_sizes else default_batch_sizes()
    shapes = []
    if card is not None:
        for t in tp:
            shapes += gemm_shapes(card, t, k)
    shapes += explicit_shapes([parse_nk(s) for s in nk or []], k)
    items = runner.make_items(k, shapes, ms, packing, target.tag if target else "")
    # de-duplicate shapes shared by several TP sizes
    items = list({i.key(): i for i in items}.values())
    return k, target, ms, items


def precompile_binaries(
    k: KernelKind,
    target: Any,
    ms: list[int],
    items: list[WorkItem],
    limits: Any,
    packing: str,
    *,
    quiet: bool,
) -> None:
    """Compile every binary the search can use, in parallel, before it times any: the engine
    release's kernel for the items' shapes (`target`), or our kernel's whole space."""
    if target is not None:
        from kernels_tuning.compile import precompile_engine
        from kernels_tuning.engine_space import engine_compile_set

        splits, swap = target.options(limits.arch)
        by_shape = engine_compile_set(
            ms, sorted({(i.n, i.k) for i in items}), limits, split_k_values=splits, swap_ab=swap
        )
        rep = precompile_engine(target.tag, by_shape, arch=limits.arch)
        if not quiet:
            typer.echo(
                f"precompiled {rep.compiled} binaries of {target.tag}'s kernel in "
                f"{rep.wall_s:.0f}s{f', {len(rep.failed)} failed' if rep.failed else ''}"
            )
    else:
        from kernels_tuning.compile import precompile as run_precompile
        from kernels_tuning.space import compile_set

        rep = run_precompile(k, compile_set(k, limits), packing=packing)
        if not quiet:
            typer.echo(
                f"precompiled {rep.compiled} binaries in {rep.wall_s:.0f}s"
                f"{f', {len(rep.failed)} failed' if rep.failed else ''}"
            )


def engine_target(
    engine: str | None, version: str | None, kind: str, *, where: EngineWhere = EngineWhere()
) -> Any:
    """The engine release whose own kernel is tuned (None: our kernels); its facts must be
    catalogued (autotune.engines.kernel_facts) or, for a nightly, read where this interpreter
    (or the environment `where` names) has it installed (autotune.engines.kernel_derive)."""
    if engine is None:
        for flag, given in (
            ("--engine-version", version),
            ("--site-packages", where.site_packages),
            ("--engine-python", where.engine_python),
        ):
            if given is not None:
                raise ConfigError("needs --engine (the engine whose kernel is tuned)", field=flag)
        return None
    if engine not in ("sglang", "vllm"):
        raise ConfigError(f"expected sglang or vllm, got {engine!r}", field="--engine")
    if where.site_packages is not None or where.engine_python is not None:
        return _elsewhere(engine, version, kind, where)
    if version is None:
        raise ConfigError(
            "--engine needs --engine-version: the kernel differs between releases",
            field="--engine-version",
        )
    _fp8_only(kind)
    from kernels_tuning.engine_space import EngineTarget

    target = EngineTarget(engine, version)
    target.facts()  # unknown releases fail here, naming the known ones
    return target


def _fp8_only(kind: str) -> None:
    if kind != "fp8":
        raise ConfigError(
            "--engine tunes the engines' block-FP8 kernel; no engine reads an INT4 W4A16 "
            "Triton config file (INT4 files: omit --engine)",
            field="--kind",
        )


def _elsewhere(engine: str, version: str | None, kind: str, where: EngineWhere) -> Any:
    """The release installed in another environment: found without importing it (as `kernels
    install` finds it), its facts and kernel read from its source there."""
    from kernels_tuning.engine_site import find_engine, release_facts
    from kernels_tuning.engine_space import EngineTarget

    if where.site_packages is not None and where.engine_python is not None:
        raise ConfigError(
            "give --site-packages or --engine-python, not both", field="--site-packages"
        )
    _fp8_only(kind)  # before asking another interpreter anything
    found = find_engine(
        engine,
        site_packages=where.site_packages,
        engine_python=where.engine_python,
        engine_version=version,
    )
    flag = "--site-packages" if where.site_packages is not None else "--engine-python"
    if found.site is None:
        raise ConfigError(f"{engine} is not installed there ({found.version_source})", field=flag)
    if not found.metadata_agrees:
        raise ConfigError(
            f"the {engine} in {found.site} is another release ({found.version_source}), so "
            "its kernel is not that release's: drop --engine-version or point at an install "
            "of that release",
            field="--engine-version",
        )
    facts = release_facts(found, have_target=False)
    target = EngineTarget(engine, facts.version, str(found.site.resolve()))
    target.facts()
    return target


def engine_note(target: Any, arch: str, quiet: bool) -> None:
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
