"""`autotune gpus` and `autotune cards`: what the catalogs hold."""

from __future__ import annotations

import typer

from autotune.cli._common import JSON_OPTION, emit_json


def gpus(json_out: bool = JSON_OPTION) -> None:
    """List the built-in GPU catalog (names for --gpu)."""
    from autotune.hardware import GPU_CATALOG

    if json_out:
        emit_json(list(GPU_CATALOG.values()))
        return
    for g in GPU_CATALOG.values():
        fp8 = f"{g.fp8_tflops:g}" if g.fp8_tflops else "-"
        fp4 = f"{g.fp4_tflops:g}" if g.fp4_tflops else "-"
        if g.fabric_gbs:
            link = f"fabric {g.fabric_gbs:g} GB/s" + (
                f" ({g.fabric_group} GPUs)" if g.fabric_group else ""
            )
        else:
            link = f"PCIe {g.pcie_gen} x{g.pcie_lanes}" + ("" if g.p2p else " no P2P")
        typer.echo(
            f"{g.name:20s} {g.memory_mib:>7d} MiB {g.bandwidth_gbs:>6g} GB/s "
            f"fp16 {g.fp16_tflops:>6g} fp8 {fp8:>6s} fp4 {fp4:>6s} TFLOP/s  {link:18s} {g.label}"
        )


def cards(json_out: bool = JSON_OPTION) -> None:
    """List the built-in model cards (names for --model)."""
    from autotune.models import BUILTIN_CARDS

    if json_out:
        emit_json([c.summary() for c in BUILTIN_CARDS.values()])
        return
    for c in BUILTIN_CARDS.values():
        s = c.summary()
        typer.echo(f"{c.name:24s} {s['weights_gib']:>6} GiB  {c.quantization.scheme:9s} {c.notes}")


def register(app: typer.Typer) -> None:
    app.command("gpus")(gpus)
    app.command("cards")(cards)
