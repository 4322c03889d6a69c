"""Findings on kernel limits: each quantized linear layer as the engine builds it (fused
shards merged), its per-rank widths at the TP size against Marlin W4A16's tile, the group size
and the FP8 weight block."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from autotune.inspect.modules import FUSED, Module
from autotune.inspect.naming import first_names, ranges, short_name
from autotune.inspect.report import Finding
from autotune.inspect.scheme import QuantSpec

# Marlin W4A16 tile limits (SGLang/vLLM marlin_utils: GPTQ_MARLIN_MIN_THREAD_N / _K).
MARLIN_MIN_N = 64
MARLIN_MIN_K = 128


@dataclass
class _KernelLayer:
    """A linear layer as the engine builds it: fused shards (q/k/v, in_proj_a/b, ...) share
    one GEMM whose per-rank width is what the kernel checks (P10: in_proj_ba is 96 wide)."""

    name: str  # short name in its layer, fused name for merged shards
    members: list[Module]
    n: int  # total output width at TP 1
    k: int
    quant: str | None
    row_parallel: bool

    @property
    def layer(self) -> int | None:
        return self.members[0].layer


def _kernel_layers(quantized: list[Module]) -> list[_KernelLayer]:
    groups: dict[str, list[Module]] = defaultdict(list)
    for m in quantized:
        if m.n is None or m.k is None:
            continue
        fused = next((f for g, f in FUSED.items() if m.leaf in g), None)
        groups[f"{m.name.rpartition('.')[0]}.{fused}" if fused else m.name].append(m)
    out = []
    for members in groups.values():
        first = members[0]
        short = short_name(first)
        if len(members) > 1:
            base = short.rpartition(".")[0]
            fused = next(f for g, f in FUSED.items() if first.leaf in g)
            parts = "+".join(m.leaf for m in members)
            short = f"{base + '.' if base else ''}{fused}[{parts}]"
        out.append(
            _KernelLayer(
                name=short,
                members=members,
                n=sum(m.n or 0 for m in members),
                k=first.k or 0,
                quant=first.quant,
                row_parallel=first.row_parallel,
            )
        )
    return out


_Hit = tuple[_KernelLayer, int, int]  # the layer, its per-rank size_n and size_k


def kernel_findings(quantized: list[Module], spec: QuantSpec | None, tp: int) -> list[Finding]:
    """One error per kernel limit the quantized layers break at TP `tp`."""
    group = spec.report.group_size if spec else None
    block = spec.report.block_shape if spec else None
    bad = _violations(quantized, tp, group, block)
    texts = _texts(tp, group, block)
    return [_finding(code, hits, *texts[code]) for code, hits in bad.items()]


def _violations(
    quantized: list[Module], tp: int, group: int | None, block: list[int] | None
) -> dict[str, list[_Hit]]:
    """The layers breaking each limit (by finding code), with their per-rank widths."""
    bad: dict[str, list[_Hit]] = defaultdict(list)
    for kl in _kernel_layers(quantized):
        split = [m.k if kl.row_parallel else m.n for m in kl.members]
        if any((w or 0) % tp for w in split):
            bad["tp-split"].append((kl, kl.n, kl.k))
            continue
        n = kl.n if kl.row_parallel else kl.n // tp
        k = kl.k // tp if kl.row_parallel else kl.k
        if kl.quant == "int":
            if n % MARLIN_MIN_N:
                bad["marlin-size-n"].append((kl, n, k))
            if k % MARLIN_MIN_K:
                bad["marlin-size-k"].append((kl, n, k))
            if group and k % group:
                bad["group-size-k"].append((kl, n, k))
        elif kl.quant == "fp8" and block and tp > 1 and (n % block[0] or k % block[1]):
            bad["fp8-block"].append((kl, n, k))
    return bad


def _texts(tp: int, group: int | None, block: list[int] | None) -> dict[str, tuple[str, str]]:
    """(what is wrong, the fix) per finding code."""
    at = f" per rank at TP {tp}" if tp > 1 else ""
    return {
        "tp-split": (
            f"have widths that TP {tp} does not divide",
            "use a TP size that divides them",
        ),
        "marlin-size-n": (
            f"are stored int-quantized with size_n{at} not a multiple of {MARLIN_MIN_N}, which "
            f"the Marlin W4A16 kernel needs (in_proj_a/in_proj_b are 48 wide, fused in_proj_ba "
            f"96: they must stay unquantized, sglang#19406)",
            "keep these projections in bf16 (dequantize them) and list them in the exclusion list",
        ),
        "marlin-size-k": (
            f"are stored int-quantized with size_k{at} not a multiple of {MARLIN_MIN_K}, which "
            f"the Marlin W4A16 kernel needs",
            "keep these projections in bf16, or use a TP size that keeps size_k aligned",
        ),
        "group-size-k": (
            f"have size_k{at} that is not a multiple of the quantization group size {group}",
            "use a TP size that keeps whole groups on each rank",
        ),
        "fp8-block": (
            f"have a width{at} not divisible by the FP8 weight block {block}; SGLang refuses to "
            f"load them",
            "use a smaller TP size",
        ),
    }


def _finding(code: str, hits: list[_Hit], text: str, fix: str) -> Finding:
    by: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    for kl, n, k in hits:
        by[(kl.name, n, k)] += [] if kl.layer is None else [kl.layer]
    where = "; ".join(
        f"{name} size_n {n}, size_k {k}" + (f" in layers {ranges(ids)}" if ids else "")
        for (name, n, k), ids in sorted(by.items(), key=lambda kv: (kv[0][0], kv[1][:1]))
    )
    mods = [m for kl, _, _ in hits for m in kl.members]
    return Finding(
        severity="error",
        code=code,
        message=f"{len(hits)} linear layer(s) ({len(mods)} checkpoint modules) {text}: {where}",
        tensors=first_names(m.main for m in mods),
        count=len(mods),
        fix=fix,
    )
