"""The correctness gate of one W4A16 config inside a serving process (the vLLM AWQ plugin).

Like `kernels_tuning.bench`'s gate (NaN-poisoned output, `check_output` against the
dequantize-then-matmul fp32 reference) but lean enough to run after the engine has taken most
of the GPU memory for its KV cache: random packed nibbles instead of quantizing a float matrix
(the kernel's correctness does not depend on where the nibbles came from), and the reference
dequantized a slice of columns at a time (a whole 5120 x 34816 layer would need several GB of
temporaries). Random numbers come from a private generator: the engine's seeded RNG stream
(sampling) must not move because a gate ran.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernels_tuning.bench import CheckResult, check_output
from kernels_tuning.space import KernelConfig

if TYPE_CHECKING:
    import torch

GROUP_SIZE = 128
# Elements of one dequantized reference slice (fp32 and int temporaries of about 4-8 B each).
REF_SLICE_ELEMS = 1 << 24
RUNS = 2  # the second launch sees the split-K counters and sums the first one left behind


@dataclass(frozen=True)
class AwqInputs:
    x: torch.Tensor  # [M, K] activations
    qweight: torch.Tensor  # int32 [K, N/8], AWQ order
    qzeros: torch.Tensor  # int32 [K/G, N/8]
    scales: torch.Tensor  # [K/G, N], the activations' dtype


def synthetic_weights(
    n: int, k: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(qweight, qzeros, scales): every nibble uniform in 0..15, scales in [1e-3, 3e-3)."""
    import torch

    lo, hi = -(2**31), 2**31 - 1
    qweight = torch.randint(lo, hi, (k, n // 8), dtype=torch.int32, device=device, generator=gen)
    qzeros = torch.randint(
        lo, hi, (k // GROUP_SIZE, n // 8), dtype=torch.int32, device=device, generator=gen
    )
    scales = torch.rand((k // GROUP_SIZE, n), device=device, generator=gen) * 2e-3 + 1e-3
    return qweight, qzeros, scales.to(dtype)


def reference(inp: AwqInputs) -> torch.Tensor:
    """`int4_w4a16.reference`, one slice of output columns at a time."""
    import torch

    from kernels_tuning.kernels.int4_w4a16 import reference as full

    k, cols = inp.qweight.shape
    step = max(1, min(cols, REF_SLICE_ELEMS // (8 * k)))
    parts = [
        full(
            inp.x,
            inp.qweight[:, c : c + step],
            inp.qzeros[:, c : c + step],
            inp.scales[:, 8 * c : 8 * (c + step)],
            group_size=GROUP_SIZE,
            packing="awq",
        )
        for c in range(0, cols, step)
    ]
    return torch.cat(parts, dim=1)


def run_gate(
    cfg: KernelConfig,
    n: int,
    k: int,
    ms: Sequence[int],
    dtype: torch.dtype,
    device: torch.device,
    seed: int = 0,
) -> CheckResult:
    """Gate `cfg` for (N, K, dtype) at each M in `ms`; the first failure is the result (a
    compile or launch error is one too)."""
    import torch

    from kernels_tuning.kernels.int4_w4a16 import w4a16_matmul

    worst = 0.0
    try:
        gen = torch.Generator(device=device)
        gen.manual_seed(seed * 1_000_003 + n * 7919 + k)
        qweight, qzeros, scales = synthetic_weights(n, k, dtype, device, gen)
        for m in ms:
            x = torch.randn((m, k), device=device, generator=gen).to(dtype)
            inp = AwqInputs(x, qweight, qzeros, scales)
            ref = reference(inp)
            for _ in range(RUNS):
                out = torch.full((m, n), math.nan, dtype=dtype, device=device)
                w4a16_matmul(
                    x, qweight, qzeros, scales, group_size=GROUP_SIZE, config=cfg, out=out
                )
                chk = check_output(out, ref)
                if not chk.ok:
                    return CheckResult(False, chk.rel_err, f"M={m}: {chk.detail}")
                worst = max(worst, chk.rel_err)
    except Exception as exc:  # compile errors, OutOfResources, out of memory, illegal config
        return CheckResult(False, math.inf, f"{type(exc).__name__}: {str(exc)[:300]}")
    return CheckResult(True, worst)
