"""Side-by-side timings for the report (GPU): tuned vs the engine default vs cuBLAS vs bf16.

For each finished item, in one process and with the same timing (bench.time_graph):

- FP8: the tuned engine config (SPLIT_K=1), our split-K winner when different, SGLang's default
  (BM64 BN128 BK128 G32 w4 s3), cuBLAS per-tensor FP8 (`torch._scaled_mm`, bf16 out) and bf16
  `torch.matmul` on the unquantized weights;
- INT4 W4A16: the tuned config, our default, our kernel with vLLM's AWQ values (32/32/32,
  split-K 8), the vLLM AWQ-Triton algorithm with those defaults (fp16, kernels/vllm_awq_like),
  and bf16 `torch.matmul` on the dequantized weights.

Our kernels pass the correctness gate before being timed. Also: the budgeted-vs-exhaustive
check on sampled (shape, M) pairs.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kernels_tuning.kernel_config import (
    DEFAULT_INT4,
    SGLANG_DEFAULT_FP8,
    VLLM_AWQ_DEFAULT,
    KernelConfig,
)
from kernels_tuning.resources import DeviceLimits
from kernels_tuning.space import build_space
from kernels_tuning.work_items import ItemResult, WorkItem

if TYPE_CHECKING:
    from kernels_tuning.engine_kernel import EngineKernel
    from kernels_tuning.problems import Problem


def compare_item(
    res: ItemResult,
    *,
    rounds: int = 2,
    extra: Mapping[str, KernelConfig | None] | None = None,
    engine: EngineKernel | None = None,
    engine_arch: str = "",
) -> dict[str, Any]:
    """Time the item's tuned config(s), the defaults and the baselines side by side: every
    candidate once per round, rounds interleaved, the fastest round's median kept (noise only
    ever slows a measurement down). Our kernels pass the correctness gate first.

    An item tuned on an engine release's own kernel (`engine`: its loaded EngineKernel) times
    its winner and the release's default on that kernel, plus `extra` configs on it (e.g. the
    entry an earlier file holds for this M)."""
    from kernels_tuning import bench

    it = res.item
    p = bench.make_problem(
        it.kind,
        it.m,
        it.n,
        it.k,
        packing=it.packing,
        baselines=True,
        engine=engine,
        engine_arch=engine_arch,
    )
    c = _Candidates(p)
    if it.kind == "fp8":
        _fp8_candidates(c, res, extra, engine)
    else:
        _int4_candidates(c, res)
    times = _time_rounds(c, rounds)
    return {
        "item": it.to_dict(),
        "times_us": times,
        "errors": c.errors,
        "rel_err": c.rel_err,
        "bytes": p.bytes_moved,
        "flops": p.flops,
        "rounds": rounds,
        "engine_best": res.engine_best.as_dict() if res.engine_best else None,
        "best": res.best.as_dict() if res.best else None,
        "search_us": {
            "engine_best": _finite(res.engine_best_us),
            "best": _finite(res.best_us),
            "default": res.default_us,
        },
        "evaluations": res.evaluations,
        "space_size": res.space_size,
    }


class _Candidates:
    """What compare_item times on one problem, by name: our kernel's configs (once each, after
    the correctness gate) and the baselines; and why any of them could not run."""

    def __init__(self, problem: Problem) -> None:
        self.p = problem
        self.cands: dict[str, Callable[[int], object]] = {}
        self.errors: dict[str, str] = {}
        self.rel_err: dict[str, float] = {}
        self.same_as: dict[str, str] = {}  # a name whose config another name already times
        self.cfg_of: dict[KernelConfig, str] = {}

    def ours(self, name: str, cfg: KernelConfig | None) -> None:
        from kernels_tuning import bench

        p = self.p
        if cfg is None:
            return
        if cfg in self.cfg_of:  # one config, one timing: e.g. a tuned entry that is the default
            self.same_as[name] = self.cfg_of[cfg]
            return
        self.cfg_of[cfg] = name
        try:
            out = p.output(0)
            out.fill_(float("nan"))
            p.launch(cfg, 0, poison=True)
            chk = bench.check_output(p.output(0), p.ref)
        except Exception as exc:  # e.g. a workspace too large for this M
            self.errors[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            return
        if not chk.ok:
            self.errors[name] = f"correctness gate: {chk.detail}"
            return
        self.rel_err[name] = chk.rel_err
        self.cands[name] = _launcher(p, cfg)

    def base(self, name: str, fn: Callable[[int], object]) -> None:
        import torch

        try:
            fn(0)
            torch.cuda.synchronize()
        except Exception as exc:  # a baseline that cannot run this shape is reported
            self.errors[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            return
        self.cands[name] = fn


def _fp8_candidates(
    c: _Candidates,
    res: ItemResult,
    extra: Mapping[str, KernelConfig | None] | None,
    engine: EngineKernel | None,
) -> None:
    """FP8: the tuned configs, the default, `extra`, cuBLAS per-tensor FP8 and bf16 matmul."""
    import torch

    s = c.p.sets
    c.ours("tuned", res.engine_best)
    if res.best is not None and res.best != res.engine_best:
        c.ours("tuned_splitk", res.best)
    c.ours("default", engine.facts_default() if engine is not None else SGLANG_DEFAULT_FP8)
    for name, cfg in (extra or {}).items():
        c.ours(name, cfg)
    c.base(
        "cublas_fp8_per_tensor",
        lambda i: torch._scaled_mm(
            s[i]["A_pt"],
            s[i]["B_pt"].t(),
            scale_a=s[i]["sa"],
            scale_b=s[i]["sb"],
            out_dtype=torch.bfloat16,
        ),
    )
    c.base("bf16_matmul", lambda i: torch.matmul(s[i]["x_bf16"], s[i]["w_bf16"].t()))


def _int4_candidates(c: _Candidates, res: ItemResult) -> None:
    """INT4: the tuned config, our default, our kernel with vLLM's AWQ values, vLLM's AWQ
    algorithm with its defaults and bf16 matmul."""
    import torch

    from kernels_tuning.kernels.vllm_awq_like import awq_gemm_vllm_defaults

    s = c.p.sets
    c.ours("tuned", res.best)
    c.ours("default", DEFAULT_INT4)
    c.ours("ours_vllm_config", VLLM_AWQ_DEFAULT)
    c.base(
        "vllm_awq_defaults",
        lambda i: awq_gemm_vllm_defaults(
            s[i]["x_fp16"], s[i]["qweight"], s[i]["scales_fp16"], s[i]["qzeros"]
        ),
    )
    c.base("bf16_matmul", lambda i: torch.matmul(s[i]["x"], s[i]["w_bf16_t"].t()))


def _time_rounds(c: _Candidates, rounds: int) -> dict[str, float | None]:
    """Each candidate's fastest time over `rounds` interleaved rounds (None: it could not run;
    a name whose config another one timed gets that time)."""
    from kernels_tuning import bench

    times: dict[str, float | None] = {name: None for name in [*c.cands, *c.errors]}
    names = list(c.cands)
    for rnd in range(rounds):
        # each round starts one later: no candidate always runs first (clock ramp-up)
        shift = rnd % max(1, len(names))
        for name in names[shift:] + names[:shift]:
            fn = c.cands[name]
            prev = times[name]
            if rnd > 0 and prev is not None and prev > 1000.0:
                continue  # long kernels vary little; a second round would cost seconds
            us = bench.time_graph(fn, c.p.n_sets)[0]
            times[name] = us if prev is None else min(prev, us)
    for name, other in c.same_as.items():
        times[name] = times.get(other)
    return times


def sample_pairs(items: Sequence[WorkItem], n: int = 8, seed: int = 0) -> list[WorkItem]:
    """Stratified sample: M buckets (<=16, 24-128, 256-1024, >=1536), round-robin, random shape
    and M within each bucket (fixed seed)."""
    rng = random.Random(seed)
    buckets: list[list[WorkItem]] = [[], [], [], []]
    for it in items:
        idx = 0 if it.m <= 16 else 1 if it.m <= 128 else 2 if it.m <= 1024 else 3
        buckets[idx].append(it)
    for bucket in buckets:
        rng.shuffle(bucket)
    out: list[WorkItem] = []
    while len(out) < n and any(buckets):
        for bucket in buckets:
            if bucket and len(out) < n:
                out.append(bucket.pop())
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _launcher(problem: Problem, cfg: KernelConfig) -> Callable[[int], None]:
    def launch(i: int) -> None:
        problem.launch(cfg, i)

    return launch


def engine_evals(res: ItemResult) -> int:
    """Evaluations the budgeted search spent in the engine space (FP8's split-K refinement,
    which searches another space, is not counted)."""
    return sum(v for k, v in res.phases.items() if not k.startswith("split_k"))


def exhaustive_check(res: ItemResult, limits: DeviceLimits, *, rounds: int = 3) -> dict[str, Any]:
    """Exhaustive search of the item's engine space, then both winners re-timed side by side."""
    import time

    from kernels_tuning import bench
    from kernels_tuning.strategies import Memo, exhaustive

    it = res.item
    t0 = time.perf_counter()
    problem = bench.make_problem(it.kind, it.m, it.n, it.k, packing=it.packing)
    space = build_space(it.kind, it.m, it.n, it.k, limits, split_k=it.kind == "int4")
    memo = Memo(bench.Evaluator(problem))
    ex = exhaustive.search(space, memo)
    budget_cfg = res.engine_best
    a: list[float] = []
    b: list[float] = []
    if ex.best is not None and budget_cfg is not None:
        for _ in range(rounds):  # interleaved, so drift hits both alike
            for cfg, acc in ((budget_cfg, a), (ex.best, b)):
                acc.append(bench.time_graph(_launcher(problem, cfg), problem.n_sets)[0])
    ta = statistics.median(a) if a else None
    tb = statistics.median(b) if b else None
    return {
        "item": it.to_dict(),
        "space_size": len(space),
        "exhaustive_evals": ex.evaluations,
        "budgeted_evals": engine_evals(res),
        "budgeted_best": budget_cfg.as_dict() if budget_cfg else None,
        "exhaustive_best": ex.best.as_dict() if ex.best else None,
        "budgeted_us": ta,
        "exhaustive_us": tb,
        "ratio": (ta / tb) if (ta and tb) else None,
        "failed": sum(1 for v in memo.costs.values() if not math.isfinite(v)),
        "wall_s": round(time.perf_counter() - t0, 2),
    }
