"""Measurement on the GPU: the correctness gate, then serving-faithful timing.

Correctness gate (every candidate, before it is timed; split-K candidates again on the output of
the timed replays, which catches races that only show under back-to-back launches): the output
buffer is poisoned with NaN, the kernel runs, and the result is compared with the dequantize-
then-matmul fp32 reference of the same quantized inputs. Pass when all of

- every element is finite (NaN poison: every element was written);
- ||out - ref|| / ||ref|| <= 5e-3;
- |out - ref| <= 1e-2 * |ref| + 2e-3 * rms(ref) element-wise.

With bf16 output the rounding alone is at most 2^-8 = 0.39 % of |ref| per element; the inputs are
exact in both paths (fp8 values and fp32 scales; int4 weights dequantized with one rounding, as in
the reference), so a correct kernel lands far inside these bounds and a wrong tile, row or scale
group does not.

Timing: a CUDA graph of R back-to-back launches (R chosen so a replay takes about 0.4 ms, at
most 64), replayed for about 3 ms to bring the clocks up (the GPU idles down between
evaluations), then replayed 5 times, each replay between two CUDA events; the figure is the median replay time / R. L2 is
kept cold by rotating through input sets whose total size is at least 3x the L2 (each launch
reads weights no earlier launch of the replay left in L2), instead of a flush kernel whose time
would have to be subtracted. A config whose eager estimate is over `reject_ratio` x the best so
far is recorded with that estimate and not graph-timed (it cannot win; saves most of the time
of exhaustive runs at large M). Output in bf16, the dtype SGLang runs these models in.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kernels_tuning.space import KernelConfig, KernelKind, cdiv

REL_FRO_TOL = 5e-3
RTOL = 1e-2
ATOL_RMS = 2e-3
REJECT_FLOOR_US = 200.0
WARM_US = 3000.0


@dataclass
class Measurement:
    """One evaluated config. `us` is None when it failed (compile, launch or the gate)."""

    us: float | None
    ok: bool
    error: str | None = None
    rel_err: float | None = None
    early: bool = False  # timed eagerly only (rejected as far slower than the best)
    launch_s: float | None = None  # first launch incl. compile or cache load
    wall_s: float | None = None  # the whole evaluation

    @property
    def cost(self) -> float:
        return self.us if (self.ok and self.us is not None) else math.inf


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    rel_err: float
    detail: str = ""


def check_output(out: Any, ref: Any) -> CheckResult:
    """The gate's comparison (module docstring)."""
    import torch

    o = out.float()
    r = ref.float()
    if not bool(torch.isfinite(o).all()):
        bad = int((~torch.isfinite(o)).sum())
        return CheckResult(False, math.inf, f"{bad} non-finite or unwritten elements")
    diff = o - r
    ref_norm = float(r.norm())
    rel = float(diff.norm()) / max(ref_norm, 1e-30)
    rms = ref_norm / math.sqrt(max(r.numel(), 1))
    worst = float((diff.abs() - (RTOL * r.abs() + ATOL_RMS * rms)).max())
    if rel > REL_FRO_TOL:
        return CheckResult(False, rel, f"relative error {rel:.3g} > {REL_FRO_TOL}")
    if worst > 0:
        return CheckResult(False, rel, f"element error exceeds tolerance by {worst:.3g}")
    return CheckResult(True, rel)


def time_graph(
    launch: Callable[[int], None],
    n_sets: int,
    *,
    target_us: float = 400.0,
    max_launches: int = 64,
    replays: int = 5,
    reject_above_us: float | None = None,
) -> tuple[float, bool]:
    """Median microseconds per launch of `launch(i)` (i = input set), captured in a CUDA graph.

    Returns (us, early): early is True when the eager estimate exceeded `reject_above_us` and
    that estimate is returned instead of a graph timing.
    """
    import torch

    start = _event()
    end = _event()
    n_est = min(2, max(1, n_sets))
    torch.cuda.synchronize()
    start.record()
    for i in range(n_est):
        launch(i % n_sets)
    end.record()
    end.synchronize()
    est = start.elapsed_time(end) * 1000.0 / n_est
    if reject_above_us is not None and est > reject_above_us:
        return est, True
    if est > 2000.0:  # long kernels: little noise, and each replay costs milliseconds
        replays = min(replays, 3)
    r = max(1, min(max_launches, int(target_us / max(est, 1.0))))
    if r > 1:
        r = max(r, min(n_sets, max_launches))
    # capture_begin/end rather than `with torch.cuda.graph(...)`, whose __enter__ runs
    # gc.collect() and empty_cache() on every capture: tens of ms each, thousands of times.
    stream = _side_stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        launch(0)  # warm the side stream (allocator, lazy module loads) before capture
        graph.capture_begin()
        try:
            for i in range(r):
                launch(i % n_sets)
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    # Warm-up: the H200 drops its clocks within milliseconds of idling (the host-side search
    # between evaluations is enough), and the first replays after that ran up to 2x slow in the
    # first H200 run. Replay for about WARM_US of GPU time before timing.
    w0, w1 = _event(), _event()
    w0.record()
    graph.replay()
    w1.record()
    w1.synchronize()
    first_us = max(w0.elapsed_time(w1) * 1000.0, 1.0)
    for _ in range(max(1, min(64, int(WARM_US / first_us)))):
        graph.replay()
    events = [(_event(), _event()) for _ in range(replays)]
    for a, b in events:
        a.record()
        graph.replay()
        b.record()
    torch.cuda.synchronize()
    per = [a.elapsed_time(b) * 1000.0 / r for a, b in events]
    del graph
    return statistics.median(per), False


_STREAM: dict[str, Any] = {}


def _event() -> Any:
    import torch

    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def _side_stream() -> Any:
    """One side stream for every capture (each graph keeps its own private memory pool)."""
    import torch

    if "s" not in _STREAM:
        _STREAM["s"] = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    return _STREAM["s"]


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
    sets: list[dict[str, Any]]
    ref: Any
    bytes_moved: int
    extras: dict[str, Any] = field(default_factory=dict)  # baseline inputs
    # An engine's own kernel (kernels_tuning.engine_kernel.EngineKernel) instead of ours: its
    # launcher allocates the output, which `launch` keeps in the set as "C".
    engine: Any = None
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

    def _workspace(self, split_k: int) -> Any:
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

    def output(self, i: int = 0) -> Any:
        return self.sets[i]["C"]


class WeightCache:
    """Quantized weights of the current (kind, N, K), reused across the M values of a shape."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.copies: list[dict[str, Any]] = []
        self.base: dict[str, Any] = {}

    def get(
        self, key: tuple[Any, ...], make: Callable[[], dict[str, Any]], n: int
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
    engine: Any = None,
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
        return Problem(kind, m, n, k, sets, ref, moved, engine=engine, engine_arch=engine_arch)
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
    return Problem(kind, m, n, k, sets, ref, moved)


class Evaluator:
    """Callable objective for one Problem: config -> Measurement (gate, then timing)."""

    def __init__(self, problem: Problem, *, reject_ratio: float | None = 1.5) -> None:
        self.problem = problem
        self.reject_ratio = reject_ratio
        self.best_us = math.inf

    def __call__(self, cfg: KernelConfig) -> Measurement:
        t0 = time.perf_counter()
        m = self._measure(cfg)
        m.wall_s = time.perf_counter() - t0
        return m

    def _measure(self, cfg: KernelConfig) -> Measurement:
        import torch

        p = self.problem
        cuda = p.output(0).is_cuda
        try:
            out = p.output(0)
            out.fill_(float("nan"))
            t = time.perf_counter()
            p.launch(cfg, 0, poison=True)  # the first launch compiles or loads the binary
            if cuda:
                torch.cuda.synchronize()
            launch_s = time.perf_counter() - t
        except Exception as exc:  # compile errors, OutOfResources, launch failures
            return Measurement(None, False, f"{type(exc).__name__}: {str(exc)[:300]}")
        chk = check_output(p.output(0), p.ref)
        if not chk.ok:
            return Measurement(
                None, False, f"correctness gate: {chk.detail}", chk.rel_err, launch_s=launch_s
            )
        if not cuda:  # CPU (interpreter): the gate only, no timing
            return Measurement(None, True, None, chk.rel_err, launch_s=launch_s)
        # Eager estimates include Python launch overhead (~20-40 us), so only long kernels are
        # rejected on them.
        reject = (
            max(self.best_us * self.reject_ratio, REJECT_FLOOR_US)
            if self.reject_ratio is not None and math.isfinite(self.best_us)
            else None
        )
        try:
            us, early = time_graph(lambda i: p.launch(cfg, i), p.n_sets, reject_above_us=reject)
        except Exception as exc:
            return Measurement(
                None, False, f"timing: {type(exc).__name__}: {str(exc)[:300]}", launch_s=launch_s
            )
        if not early and cfg.SPLIT_K > 1:
            # Split-K programs communicate through memory: check the output of the timed
            # back-to-back replays too (a race shows there, not in one isolated launch).
            after = check_output(p.output(0), p.ref)
            if not after.ok:
                return Measurement(
                    None,
                    False,
                    f"gate after timing: {after.detail}",
                    after.rel_err,
                    launch_s=launch_s,
                )
        if not early:
            self.best_us = min(self.best_us, us)
        return Measurement(us, True, None, chk.rel_err, early, launch_s=launch_s)


def time_callable(fn: Callable[[int], None], n_sets: int) -> float:
    """Baselines (cuBLAS, torch.matmul, ...) through the same graph timing."""
    fn(0)
    return time_graph(fn, n_sets)[0]
