"""GEMM shapes (N, K) to tune, from a model card and a TP size, and the batch sizes M.

Projections come from `autotune.models.layout.projections`, already merged the way SGLang
merges them (qkv_proj, gate_up_proj, in_proj_qkvz, ...). Column-parallel layers split N across
TP ranks, row-parallel layers split K. Projections that share an (N, K) become one shape (one
config file serves both; for Qwen3.8-27B o_proj and the Gated DeltaNet out_proj coincide).
`in_proj_ba` is unquantized in every pack (FIELD-NOTES P10) and therefore never tuned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from autotune.errors import ConfigError
from autotune.models.card import ModelCard
from autotune.models.layout import projections
from kernels_tuning.kernel_config import KERNEL_KINDS, KernelKind

# SGLang's tuning_block_wise_kernel.py default batch sizes (and vLLM's).
SGLANG_BATCH_SIZES: tuple[int, ...] = (
    1,
    2,
    4,
    8,
    16,
    24,
    32,
    48,
    64,
    96,
    128,
    256,
    512,
    1024,
    1536,
    2048,
    3072,
    4096,
)
# A chunked-prefill step of 8192 tokens: with only SGLang's keys, nearest-key lookup would give
# it the 4096 config (kernel-tuning-anchors §5.7).
PREFILL_EXTRA: tuple[int, ...] = (8192,)

FP8_BLOCK = 128  # [128, 128] weight blocks, 1x128 activation groups
INT4_GROUP = 128
INT4_PACK = 8  # int4 values per int32


@dataclass(frozen=True)
class GemmShape:
    """One (N, K) on one rank. `names` lists the merged projections that share it."""

    n: int
    k: int
    names: tuple[str, ...] = ()
    tp: int = 1
    layers: int = 0

    @property
    def label(self) -> str:
        return "+".join(self.names) if self.names else f"N={self.n},K={self.k}"


@dataclass(frozen=True)
class ShapeReport:
    shapes: list[GemmShape]
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (projection, reason)


def check_shape(
    n: int, k: int, kind: KernelKind, *, where: str = "shape", group_size: int = INT4_GROUP
) -> None:
    """Raise ConfigError when (N, K) breaks the kernel's divisibility rules."""
    problems = shape_problems(n, k, kind, group_size=group_size)
    if problems:
        raise ConfigError("; ".join(problems), field=where)


def shape_problems(n: int, k: int, kind: KernelKind, *, group_size: int = INT4_GROUP) -> list[str]:
    if kind not in KERNEL_KINDS:
        raise ConfigError(
            f"unknown kernel kind {kind!r}; valid: {list(KERNEL_KINDS)}", field="kind"
        )
    out = []
    if n < 1 or k < 1:
        return [f"N and K must be positive, got N={n} K={k}"]
    if kind == "fp8":
        if n % FP8_BLOCK:
            out.append(f"N={n} is not a multiple of the fp8 weight block {FP8_BLOCK}")
        if k % FP8_BLOCK:
            out.append(f"K={k} is not a multiple of the fp8 block {FP8_BLOCK}")
    else:
        if k % group_size:
            out.append(f"K={k} is not a multiple of the int4 group size {group_size}")
        if n % INT4_PACK:
            out.append(f"N={n} is not a multiple of the int4 pack factor {INT4_PACK}")
    return out


def shape_report(
    card: ModelCard, tp: int, kind: KernelKind, *, group_size: int = INT4_GROUP
) -> ShapeReport:
    """Shapes for `card` at TP `tp`, plus the projections left out and why."""
    if tp < 1:
        raise ConfigError(f"TP size must be >= 1, got {tp}", field="--tp")
    merged: dict[tuple[int, int], GemmShape] = {}
    excluded: list[tuple[str, str]] = []
    for p in projections(card):
        if not p.quantizable:
            excluded.append((p.name, "kept unquantized (bf16) by the checkpoint; not tuned"))
            continue
        split = p.n if p.parallel == "column" else p.k
        if split % tp:
            dim = "N" if p.parallel == "column" else "K"
            excluded.append(
                (p.name, f"{p.parallel}-parallel {dim}={split} not divisible by TP {tp}")
            )
            continue
        n, k = p.at_tp(tp)
        problems = shape_problems(n, k, kind, group_size=group_size)
        if problems:
            excluded.append((p.name, "; ".join(problems)))
            continue
        old = merged.get((n, k))
        if old is None:
            merged[(n, k)] = GemmShape(n, k, (p.name,), tp, p.layers)
        else:
            merged[(n, k)] = GemmShape(n, k, (*old.names, p.name), tp, old.layers + p.layers)
    return ShapeReport(list(merged.values()), excluded)


def gemm_shapes(
    card: ModelCard, tp: int, kind: KernelKind, *, group_size: int = INT4_GROUP
) -> list[GemmShape]:
    """The quantized GEMM shapes of `card` at TP `tp`.

    Raises ConfigError when a quantized projection cannot run the kernel at this TP (its rank's
    N or K breaks divisibility): the engine could not load it quantized either. `in_proj_ba`
    (unquantized by design) is left out silently; `shape_report` lists it.
    """
    rep = shape_report(card, tp, kind, group_size=group_size)
    bad = [(name, why) for name, why in rep.excluded if "unquantized" not in why]
    if bad:
        detail = "; ".join(f"{name}: {why}" for name, why in bad)
        raise ConfigError(f"{card.name} at TP {tp} ({kind}): {detail}", field="--tp")
    return rep.shapes


def explicit_shapes(
    pairs: Iterable[tuple[int, int]], kind: KernelKind, *, group_size: int = INT4_GROUP
) -> list[GemmShape]:
    """Shapes given as explicit (N, K) pairs (`--nk 5120,6144`), checked."""
    out = []
    for n, k in pairs:
        check_shape(n, k, kind, where=f"--nk {n},{k}", group_size=group_size)
        out.append(GemmShape(n, k))
    return out


def parse_nk(text: str) -> tuple[int, int]:
    """'5120,6144' or '5120x6144' -> (5120, 6144)."""
    parts = text.replace("x", ",").split(",")
    try:
        n, k = (int(p) for p in parts)
    except ValueError:
        raise ConfigError(f"expected N,K (two integers), got {text!r}", field="--nk") from None
    return n, k


def batch_sizes(
    *,
    spec_draft_tokens: int | None = 3,
    max_spec_batch: int = 1,
    extra: Sequence[int] = PREFILL_EXTRA,
    base: Sequence[int] = SGLANG_BATCH_SIZES,
) -> list[int]:
    """SGLang's 18 batch sizes, plus `extra` (8192, a chunked-prefill step) and the M values of
    speculative-decoding verify steps, `spec_draft_tokens * b` for b = 1, 2, 4, ... up to
    `max_spec_batch` requests. The default adds 3 (one request verifying 3 draft tokens) and
    8192, 20 values in all."""
    out = set(base) | set(extra)
    if spec_draft_tokens:
        b = 1
        while b <= max_spec_batch:
            out.add(spec_draft_tokens * b)
            b *= 2
    bad = [m for m in out if m < 1]
    if bad:
        raise ConfigError(f"batch sizes must be >= 1, got {bad}", field="--batch-sizes")
    return sorted(out)


def parse_batch_sizes(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8] (sorted, deduplicated)."""
    try:
        vals = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise ConfigError(
            f"expected comma-separated integers, got {text!r}", field="--batch-sizes"
        ) from None
    if not vals or vals[0] < 1:
        raise ConfigError(
            f"batch sizes must be positive integers, got {text!r}", field="--batch-sizes"
        )
    return vals


def kind_for_card(card: ModelCard) -> KernelKind:
    """The kernel a card's weights need: fp8_block -> fp8, awq/gptq -> int4."""
    scheme = card.quantization.scheme
    if scheme == "fp8_block":
        return "fp8"
    if scheme in ("awq", "gptq"):
        return "int4"
    raise ConfigError(
        f"card {card.name} is quantized as {scheme!r}; kernel tuning covers fp8_block (fp8) and "
        "awq/gptq (int4); pass --kind to tune its shapes anyway",
        field="--kind",
    )
