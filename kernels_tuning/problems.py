"""The inputs of one GEMM problem (kind, M, N, K) for the benchmark (kernels_tuning.bench):
random activations and weights quantized the way the engines quantize them, in as many copies
as keep L2 cold (`ring_size`: each launch of a timed replay reads weights no earlier launch left
in L2), the outputs, and the fp32 reference the correctness gate compares with.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernels_tuning.kernel_config import KernelConfig, KernelKind
from kernels_tuning.space import cdiv

if TYPE_CHECKING:
    import torch

    from kernels_tuning.engine_kernel import EngineKernel


def ring_size(set_bytes: int, l2_bytes: int, factor: float = 3.0, cap: int = 48) -> int:
    """How many input sets keep every launch's inputs out of L2 (module docstring)."""
    return max(1, min(cap, cdiv(int(factor * l2_bytes), max(set_bytes, 1))))


def l2_bytes() -> int:
    import torch

    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(p, "L2_cache_size", 0) or 50 * 2**20)


@dataclass
class Problem:
    """Inputs for one (kind, M, N, K): `n_sets` copies (L2 rotation), outputs, the reference."""

    kind: KernelKind
    m: int
    n: int
    k: int
    sets: list[dict[str, Any]]  # tensors by name, and the INT4 "packing"
    ref: torch.Tensor
    bytes_moved: int
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # split-K workspaces
    # An engine's own kernel instead of ours: its launcher allocates the output, which `launch`
    # keeps in the set as "C".
    engine: EngineKernel | None = None
    engine_arch: str = ""

    @property
    def n_sets(self) -> int:
        return len(self.sets)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def launch(self, cfg: KernelConfig, i: int, *, poison: bool = False) -> None:
        """Run `cfg` on input set i. `poison`: the engine launcher's freshly allocated output is
        NaN-filled first (our kernels write into "C", which the gate fills itself)."""
        s = self.sets[i]
        if self.engine is not None:
            from kernels_tuning.engine_kernel import honoured_config

            feed = honoured_config(cfg.as_dict(), self.engine.facts, self.engine_arch)
            s["C"] = self.engine.run(s["A"], s["B"], s["As"], s["Bs"], feed, poison=poison)
            return
        ws = self._workspace(cfg.SPLIT_K)
        if self.kind == "fp8":
            from kernels_tuning.kernels.fp8_block import w8a8_block_fp8_matmul

            w8a8_block_fp8_matmul(
                s["A"], s["B"], s["As"], s["Bs"], (128, 128), config=cfg, out=s["C"], workspace=ws
            )
        else:
            from kernels_tuning.kernels.int4_w4a16 import w4a16_matmul

            w4a16_matmul(
                s["x"],
                s["qweight"],
                s["qzeros"],
                s["scales"],
                packing=s["packing"],
                config=cfg,
                out=s["C"],
                workspace=ws,
            )

    def _workspace(self, split_k: int) -> torch.Tensor | None:
        """Split-K partials, allocated on first (eager) use so graph capture allocates nothing
        (ATOMIC_REDUCE configs sum into the device's cached zeroed buffer instead,
        kernels/_buffers.py, which the eager first launch also sizes)."""
        if split_k == 1:
            return None
        ws = self.extras.get(f"ws{split_k}")
        if ws is None:
            import torch

            ws = torch.empty(
                (split_k, self.m, self.n), dtype=torch.float32, device=self.sets[0]["C"].device
            )
            self.extras[f"ws{split_k}"] = ws
        return ws

    def output(self, i: int = 0) -> torch.Tensor:
        out: torch.Tensor = self.sets[i]["C"]
        return out


class WeightCache:
    """Quantized weights of the current (kind, N, K), reused across the M values of a shape."""

    def __init__(self) -> None:
        self.key: tuple[Hashable, ...] | None = None
        self.copies: list[dict[str, Any]] = []
        self.base: dict[str, Any] = {}

    def get(
        self, key: tuple[Hashable, ...], make: Callable[[], dict[str, Any]], n: int
    ) -> list[dict[str, Any]]:
        import torch

        if key != self.key:
            self.copies = []
            self.base = make()
            self.key = key
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        while len(self.copies) < n:
            self.copies.append(
                {k: (v.clone() if hasattr(v, "clone") else v) for k, v in self.base.items()}
            )
        return self.copies[:n]


_WEIGHTS = WeightCache()


def make_problem(
    kind: KernelKind,
    m: int,
    n: int,
    k: int,
    *,
    seed: int = 0,
    packing: str = "awq",
    baselines: bool = False,
    device: str = "cuda",
    act_dtype: str = "bfloat16",
    engine: EngineKernel | None = None,
    engine_arch: str = "",
) -> Problem:
    """Random activations and weights, quantized the way the engines quantize them.
    (`device="cpu"` with `act_dtype="float16"` runs under Triton's interpreter, for tests.)"""
    import torch

    dev = torch.device(device)
    # Separate streams of random numbers for weights and activations: the weights of a shape are
    # cached across M, so the activations must not depend on whether the cache was hit.
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed * 1_000_003 + n * 7919 + k)
    gen_x = torch.Generator(device=dev)
    gen_x.manual_seed(seed * 1_000_003 + m)
    l2 = l2_bytes() if dev.type == "cuda" else 0
    if kind == "fp8":
        return _fp8_problem(
            m,
            n,
            k,
            dev,
            gen,
            gen_x,
            l2,
            baselines=baselines,
            engine=engine,
            engine_arch=engine_arch,
        )
    return _int4_problem(
        m, n, k, dev, gen, gen_x, l2, packing=packing, baselines=baselines, act_dtype=act_dtype
    )


def _fp8_problem(
    m: int,
    n: int,
    k: int,
    dev: torch.device,
    gen: torch.Generator,
    gen_x: torch.Generator,
    l2: int,
    *,
    baselines: bool,
    engine: EngineKernel | None,
    engine_arch: str,
) -> Problem:
    """make_problem for block FP8 (`gen`: the weights' random numbers, `gen_x`: the
    activations'; `l2`: the L2 size the input sets rotate past)."""
    import torch

    from kernels_tuning.kernels import fp8_block as F

    def make_w() -> dict[str, Any]:
        w = torch.randn((n, k), device=dev, generator=gen) * 0.02
        b, bs = F.block_quant_fp8(w)
        out: dict[str, Any] = {"B": b, "Bs": bs}
        if baselines:
            out["w_bf16"] = w.to(torch.bfloat16)
            sb = w.abs().amax().clamp(min=1e-10) / F.FP8_MAX
            out["B_pt"] = (w / sb).clamp(-F.FP8_MAX, F.FP8_MAX).to(torch.float8_e4m3fn)
            out["sb"] = sb.float().reshape(())
        return out

    set_bytes = n * k + m * k + 2 * m * n
    n_sets = ring_size(set_bytes, l2)
    weights = _WEIGHTS.get(("fp8", n, k, baselines, str(dev)), make_w, n_sets)
    x = torch.randn((m, k), device=dev, generator=gen_x)
    a, a_s = F.per_token_group_quant_fp8(x)
    sets = []
    for i in range(n_sets):
        s = dict(weights[i])
        s.update(
            A=a.clone(),
            As=a_s.clone(),
            C=torch.empty((m, n), dtype=torch.bfloat16, device=dev),
        )
        if baselines:
            sa = x.abs().amax().clamp(min=1e-10) / F.FP8_MAX
            s["x_bf16"] = x.to(torch.bfloat16)
            s["A_pt"] = (x / sa).clamp(-F.FP8_MAX, F.FP8_MAX).to(torch.float8_e4m3fn)
            s["sa"] = sa.float().reshape(())
        sets.append(s)
    ref = F.reference(a, weights[0]["B"], a_s, weights[0]["Bs"])
    moved = n * k + (n // 128) * (k // 128) * 4 + m * k + m * (k // 128) * 4 + 2 * m * n
    return Problem("fp8", m, n, k, sets, ref, moved, engine=engine, engine_arch=engine_arch)


def _int4_problem(
    m: int,
    n: int,
    k: int,
    dev: torch.device,
    gen: torch.Generator,
    gen_x: torch.Generator,
    l2: int,
    *,
    packing: str,
    baselines: bool,
    act_dtype: str,
) -> Problem:
    """make_problem for INT4 W4A16 (arguments as _fp8_problem's)."""
    import torch

    from kernels_tuning.kernels import int4_w4a16 as W

    adt = getattr(torch, act_dtype)

    def make_q() -> dict[str, Any]:
        w = torch.randn((k, n), device=dev, generator=gen) * 0.02
        q, z, sc = W.quantize_int4(w, 128)
        qw, qz = W.pack(q, z, packing)  # type: ignore[arg-type]
        out: dict[str, Any] = {
            "qweight": qw.contiguous(),
            "qzeros": qz.contiguous(),
            "scales": sc.to(adt),
            "packing": packing,
        }
        if baselines:
            out["scales_fp16"] = sc.to(torch.float16)
            w_deq = W.dequantize(qw, qz, sc.to(torch.bfloat16), packing=packing)  # type: ignore[arg-type]
            out["w_bf16_t"] = w_deq.to(torch.bfloat16).t().contiguous()  # [N, K] like nn.Linear
        return out

    set_bytes = n * k // 2 + 2 * m * k + 2 * m * n
    n_sets = ring_size(set_bytes, l2)
    weights = _WEIGHTS.get(("int4", n, k, packing, baselines, str(dev), act_dtype), make_q, n_sets)
    x = torch.randn((m, k), device=dev, generator=gen_x).to(adt)
    sets = []
    for i in range(n_sets):
        s = dict(weights[i])
        s.update(x=x.clone(), C=torch.empty((m, n), dtype=adt, device=dev))
        if baselines:
            s["x_fp16"] = x.to(torch.float16)
        sets.append(s)
    w0 = weights[0]
    ref = W.reference(x, w0["qweight"], w0["qzeros"], w0["scales"], packing=packing)  # type: ignore[arg-type]
    moved = n * k // 2 + (k // 128) * (n // 8) * 4 + (k // 128) * n * 2 + 2 * m * k + 2 * m * n
    return Problem("int4", m, n, k, sets, ref, moved)
