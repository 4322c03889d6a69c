"""What `autotune kernels` runs on, from its options: the kernel kind, the engine release whose
own kernel is tuned, the (shape, M) work items of a tune run, and the binaries compiled before
it (the commands themselves: autotune/cli/kernels.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def tune_items(
    model: str | None,
    nk: list[str] | None,
    tp: list[int],
    kind: str | None,
    batch_sizes: str | None,
    packing: str,
    engine: str | None,
    engine_version: str | None,
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
    target = engine_target(engine, engine_version, k)
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


def engine_target(engine: str | None, version: str | None, kind: str) -> Any:
    """The engine release whose own kernel is tuned (None: our kernels); its facts must be
    catalogued (autotune.engines.kernel_facts) or, for a nightly, read where this interpreter
    has it installed (autotune.engines.kernel_derive.facts_of)."""
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
