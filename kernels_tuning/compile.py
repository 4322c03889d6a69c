"""Parallel precompile: build every binary a run may launch, in worker processes, before timing.

Triton compiles on first launch, about 0.5-1.5 s per config for these kernels on Hopper (seen in
sm_90 compiles here), so a search that compiles as it goes spends most of its time compiling on
one core. Our kernels take GROUP_SIZE_M, SPLIT_K and M as runtime arguments, so one binary per
(BM, BN, BK, warps, stages) serves every group size, split and batch size (`space.compile_set`:
about 300 per kernel instead of 1,280 x 18 M values). Workers call `JITFunction.warmup` with the
same argument pattern as a real launch, which writes the binary to Triton's on-disk cache; the
tuning process then loads it from there on first launch. Workers are spawned (never forked
after CUDA is initialized).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from kernels_tuning.kernel_config import KernelConfig, KernelKind


@dataclass
class PrecompileReport:
    kind: str
    compiled: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float = 0.0


def _compile_chunk(
    kind: str, cfgs: list[dict[str, int]], dtype_name: str, packing: str, n: int, k: int
) -> list[tuple[str, str | None, float]]:
    import torch

    dtype = getattr(torch, dtype_name)
    out: list[tuple[str, str | None, float]] = []
    for d in cfgs:
        cfg = KernelConfig.from_dict(d)
        t = time.perf_counter()
        try:
            if kind == "fp8":
                from kernels_tuning.kernels import fp8_block

                fp8_block.warmup(cfg, dtype, n=n, k=k)
            else:
                from kernels_tuning.kernels import int4_w4a16

                int4_w4a16.warmup(cfg, dtype, packing=packing, n=n, k=k)  # type: ignore[arg-type]
            out.append((cfg.key(), None, time.perf_counter() - t))
        except Exception as exc:  # a config that cannot compile is reported, not fatal
            out.append(
                (cfg.key(), f"{type(exc).__name__}: {str(exc)[:200]}", time.perf_counter() - t)
            )
    return out


def precompile(
    kind: KernelKind,
    configs: Sequence[KernelConfig],
    *,
    dtype_name: str = "bfloat16",
    packing: str = "awq",
    workers: int | None = None,
    n: int = 5120,
    k: int = 5120,
) -> PrecompileReport:
    """Compile `configs` (one per binary) into Triton's cache using `workers` processes.

    `n`, `k` must have the divisibility pattern of the real shapes (multiples of 128 here), so
    the specialization, hence the cache key, is the same as at launch.
    """
    t0 = time.perf_counter()
    rep = PrecompileReport(kind)
    uniq = list({c.compile_key(): c.with_(GROUP_SIZE_M=1, SPLIT_K=1) for c in configs}.values())
    if not uniq:
        return rep
    workers = workers or max(1, (os.cpu_count() or 2) - 1)
    n_chunks = min(len(uniq), workers * 4)
    chunks = [uniq[i::n_chunks] for i in range(n_chunks)]
    calls = [
        (_compile_chunk, (kind, [c.as_dict() for c in ch], dtype_name, packing, n, k))
        for ch in chunks
    ]
    return _run_pool(rep, calls, workers, t0)


def _run_pool(
    rep: PrecompileReport,
    calls: Sequence[tuple[Callable[..., list[tuple[str, str | None, float]]], tuple[Any, ...]]],
    workers: int,
    t0: float,
) -> PrecompileReport:
    """Run the compile chunks in `workers` spawned processes (never forked after CUDA is
    initialized) and tally their (config key, error, seconds) into `rep`."""
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        futs = [ex.submit(fn, *args) for fn, args in calls]
        for fut in as_completed(futs):
            for key, err, secs in fut.result():
                rep.cpu_s += secs
                if err is None:
                    rep.compiled += 1
                else:
                    rep.failed[key] = err
    rep.wall_s = time.perf_counter() - t0
    return rep


def _compile_engine_chunk(
    tag: str, arch: str, cfgs: list[dict[str, int]], m: int, n: int, k: int
) -> list[tuple[str, str | None, float]]:
    import torch

    from kernels_tuning.engine_kernel import honoured_config, load_engine_kernel
    from kernels_tuning.engine_space import EngineTarget
    from kernels_tuning.kernels import fp8_block

    target = EngineTarget.parse(tag)
    engine = load_engine_kernel(target.engine, target.version, site=target.site_path)
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn((n, k), device="cuda", generator=gen) * 0.02
    b, bs = fp8_block.block_quant_fp8(w)
    a, a_s = fp8_block.per_token_group_quant_fp8(torch.randn((m, k), device="cuda", generator=gen))
    out: list[tuple[str, str | None, float]] = []
    for d in cfgs:
        cfg = KernelConfig.from_dict(d)
        t = time.perf_counter()
        try:
            engine.run(a, b, a_s, bs, honoured_config(d, engine.facts, arch))
            torch.cuda.synchronize()
            out.append((cfg.key(), None, time.perf_counter() - t))
        except Exception as exc:  # reported, not fatal: the search records it as failed
            out.append(
                (cfg.key(), f"{type(exc).__name__}: {str(exc)[:200]}", time.perf_counter() - t)
            )
    return out


def precompile_engine(
    tag: str,
    by_shape: Mapping[tuple[int, int, int], Sequence[KernelConfig]],
    *,
    arch: str,
    workers: int | None = None,
) -> PrecompileReport:
    """Compile an engine release's kernel (`tag`, e.g. "sglang==0.5.23") for `by_shape`
    (engine_space.engine_compile_set: configs per representative (M, N, K) of a Triton
    specialization) into Triton's cache, one launch per config and shape in `workers` spawned
    processes."""
    from kernels_tuning.engine_kernel import load_engine_kernel
    from kernels_tuning.engine_space import EngineTarget

    t0 = time.perf_counter()
    rep = PrecompileReport(tag)
    target = EngineTarget.parse(tag)
    load_engine_kernel(
        target.engine, target.version, site=target.site_path
    )  # writes the module before workers read it
    jobs = [(mnk, [c.as_dict() for c in cs]) for mnk, cs in by_shape.items() if cs]
    if not jobs:
        return rep
    workers = workers or max(1, (os.cpu_count() or 2) - 1)
    total = sum(len(cs) for _, cs in jobs)
    per_chunk = max(1, total // (workers * 4))
    chunks = [
        (mnk, cs[i : i + per_chunk]) for mnk, cs in jobs for i in range(0, len(cs), per_chunk)
    ]
    return _run_pool(
        rep, [(_compile_engine_chunk, (tag, arch, cs, *mnk)) for mnk, cs in chunks], workers, t0
    )
