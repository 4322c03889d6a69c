"""Measuring a work item: the objective (config -> measurement) a search calls, built per item by
an objective factory; the default one benchmarks the kernel on this process's GPU
(kernels_tuning.bench).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from kernels_tuning.strategies import Objective
from kernels_tuning.work_items import WorkItem

if TYPE_CHECKING:
    from kernels_tuning.engine_kernel import EngineKernel


class ObjectiveFactory(Protocol):
    def __call__(self, item: WorkItem) -> Objective: ...


class GpuObjectiveFactory:
    """Builds the GPU benchmark for an item (kernels_tuning.bench), on our kernel or on an
    engine release's own (loaded once per process)."""

    def __init__(self, *, reject_ratio: float = 1.5) -> None:
        self.reject_ratio = reject_ratio
        self._engines: dict[str, EngineKernel] = {}

    def __call__(self, item: WorkItem) -> Objective:
        from kernels_tuning import bench

        engine = None
        arch = ""
        if item.engine:
            from kernels_tuning.engine_kernel import load_engine_kernel
            from kernels_tuning.engine_space import EngineTarget
            from kernels_tuning.resources import DeviceLimits

            if item.engine not in self._engines:
                t = EngineTarget.parse(item.engine)
                self._engines[item.engine] = load_engine_kernel(
                    t.engine, t.version, site=t.site_path
                )
            engine = self._engines[item.engine]
            arch = DeviceLimits.from_torch().arch
        problem = bench.make_problem(
            item.kind,
            item.m,
            item.n,
            item.k,
            packing=item.packing,
            engine=engine,
            engine_arch=arch,
        )
        # No early rejection on an engine's launcher: its eager estimate is mostly the Python
        # launcher's own CPU time (torch allocations, asserts, the config lookup), up to 250 us
        # on an H200 host against a 70 us kernel, so it rejected fast configs with inflated
        # figures (engine-kernel call 2); SGLang replays these GEMMs in CUDA graphs, as timed.
        ratio = None if item.engine else self.reject_ratio
        return bench.Evaluator(problem, reject_ratio=ratio)
