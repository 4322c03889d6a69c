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

The problems timed (inputs, their L2-cold copies, the reference) are built in
kernels_tuning.problems; its names are importable from here too.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernels_tuning.kernel_config import KernelConfig
from kernels_tuning.problems import Problem, WeightCache, l2_bytes, make_problem, ring_size

if TYPE_CHECKING:
    import torch

__all__ = [
    "ATOL_RMS",
    "REJECT_FLOOR_US",
    "REL_FRO_TOL",
    "RTOL",
    "WARM_US",
    "CheckResult",
    "Evaluator",
    "Measurement",
    "Problem",
    "WeightCache",
    "check_output",
    "l2_bytes",
    "make_problem",
    "ring_size",
    "time_callable",
    "time_graph",
]

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


def check_output(out: torch.Tensor, ref: torch.Tensor) -> CheckResult:
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
    launch: Callable[[int], object],
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
    est = _eager_estimate(launch, n_sets)
    if reject_above_us is not None and est > reject_above_us:
        return est, True
    if est > 2000.0:  # long kernels: little noise, and each replay costs milliseconds
        replays = min(replays, 3)
    r = max(1, min(max_launches, int(target_us / max(est, 1.0))))
    if r > 1:
        r = max(r, min(n_sets, max_launches))
    graph = _capture(launch, n_sets, r)
    per = _timed_replays(graph, r, replays)
    del graph
    return statistics.median(per), False


def _eager_estimate(launch: Callable[[int], object], n_sets: int) -> float:
    """Microseconds per launch of one or two eager launches (Python launch overhead included)."""
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
    return float(start.elapsed_time(end) * 1000.0 / n_est)


def _capture(launch: Callable[[int], object], n_sets: int, r: int) -> torch.cuda.CUDAGraph:
    """A CUDA graph of `r` back-to-back launches, rotating through the input sets."""
    import torch

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
    return graph


def _timed_replays(graph: torch.cuda.CUDAGraph, r: int, replays: int) -> list[float]:
    """Microseconds per launch of each of `replays` timed replays of `graph` (`r` launches),
    after the warm-up."""
    import torch

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
    return [a.elapsed_time(b) * 1000.0 / r for a, b in events]


_STREAM: dict[str, torch.cuda.Stream] = {}


def _event() -> torch.cuda.Event:
    import torch

    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def _side_stream() -> torch.cuda.Stream:
    """One side stream for every capture (each graph keeps its own private memory pool)."""
    import torch

    if "s" not in _STREAM:
        _STREAM["s"] = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    return _STREAM["s"]


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


def time_callable(fn: Callable[[int], object], n_sets: int) -> float:
    """Baselines (cuBLAS, torch.matmul, ...) through the same graph timing."""
    fn(0)
    return time_graph(fn, n_sets)[0]
