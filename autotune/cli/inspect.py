"""`autotune inspect MODEL_DIR`: check a checkpoint against its own config and the kernels."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from autotune.cli._common import JSON_OPTION, emit_json

if TYPE_CHECKING:
    from autotune.inspect.report import InspectionReport, QuantReport


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.4g} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"


def inspect(
    model_dir: Path = typer.Argument(
        ..., help="Local Hugging Face model folder (config.json + *.safetensors)."
    ),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel size for the kernel checks."),
    json_out: bool = JSON_OPTION,
) -> None:
    """Check a checkpoint against its own config and the kernels before serving it.

    Reads config.json and the safetensors headers only (sglang#35797, sglang#20370).
    Reports per layer which projections are quantized, exclusion-list names
    that match no tensor, modules declared unquantized but stored packed,
    widths Marlin cannot run (size_n % 64), whether MTP weights exist, sizes
    the config's quantization does not match, and what SGLang and vLLM load
    per rank at --tp, part by part.

    Exit status: 0 ok, 10 warnings, 11 broken (some finding is an error);
    2 when the folder cannot be read (missing, no config.json or
    safetensors files, corrupt header).
    """
    from autotune.inspect import inspect_checkpoint

    report = inspect_checkpoint(model_dir, tp=tp)
    if json_out:
        emit_json(report.model_dump(mode="json") | {"exit_code": report.exit_code})
        raise typer.Exit(report.exit_code)
    _echo_summary(report)
    _echo_layers(report)
    _echo_findings(report)
    typer.echo(f"verdict: {report.verdict} (exit {report.exit_code})")
    raise typer.Exit(report.exit_code)


def _quantization(q: QuantReport) -> str:
    """`awq (gemm), 4-bit, group 128`: the method and the details it declares."""
    quant = q.method or "none"
    if q.method:
        quant += f" ({q.format})" if q.format else ""
        quant += f", {q.bits}-bit" if q.bits else ""
        quant += f", group {q.group_size}" if q.group_size else ""
        quant += f", blocks {q.block_shape}" if q.block_shape else ""
    return quant


def _echo_summary(report: InspectionReport) -> None:
    """The checkpoint's files, quantization, weight sizes, MTP and vision tensors."""
    q = report.quantization
    echo = typer.echo
    echo(f"checkpoint   {report.path}")
    echo(f"architecture {report.architecture}, {report.num_layers} layers, TP {report.tp}")
    echo(f"files        {len(report.files)} safetensors, {report.tensor_count} tensors")
    echo(f"quantization {_quantization(q)}")
    if q.exclude_field:
        echo(f"             {q.exclude_field}: {len(q.exclude)} entries")
    comp = ", ".join(f"{k} {_size(v)}" for k, v in report.bytes_by_component.items() if v)
    echo(f"weights      {_size(sum(report.bytes_by_component.values()))} ({comp})")
    echo("dtypes       " + ", ".join(f"{k} {_size(v)}" for k, v in report.bytes_by_dtype.items()))
    echo(
        f"MTP          declared {report.mtp.declared_layers}, present "
        f"{report.mtp.present_layers} ({report.mtp.tensors} tensors)"
    )
    echo(f"vision       {report.vision_tensors} tensors")
    for engine, parts in report.loaded_per_rank.items():
        mtp = {k: v for k, v in parts.items() if k.startswith("mtp")}
        rest = {k: v for k, v in parts.items() if v and k not in mtp}
        detail = ", ".join(f"{k} {_size(v)}" for k, v in rest.items())
        extra = "".join(f"; +{_size(v)} {k}" for k, v in mtp.items() if v)
        echo(f"{engine + ' loads':<12} {_size(sum(rest.values()))} per rank ({detail}{extra})")
    echo("")


def _echo_layers(report: InspectionReport) -> None:
    """Runs of alike layers: their kind and which projections are (un)quantized."""
    from autotune.inspect import layer_groups

    echo = typer.echo
    echo("layers:")
    for ranges, layer in layer_groups(report):
        echo(f"  {ranges:<16} {layer.kind}")
        echo(f"  {'':<16}   quantized:   {', '.join(layer.quantized) or '-'}")
        echo(f"  {'':<16}   unquantized: {', '.join(layer.unquantized) or '-'}")
    echo("")


def _echo_findings(report: InspectionReport) -> None:
    """Each finding with the tensors it names (a few) and its fix."""
    echo = typer.echo
    if report.findings:
        echo("findings:")
    for f in report.findings:
        echo(f"  {f.severity.upper():<7} {f.code}: {f.message}")
        if f.tensors:
            more = f" (+{f.count - len(f.tensors)} more)" if f.count > len(f.tensors) else ""
            echo(f"          tensors: {', '.join(f.tensors)}{more}")
        if f.fix:
            echo(f"          fix: {f.fix}")


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
