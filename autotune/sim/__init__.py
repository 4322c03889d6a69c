"""The simulated SGLang engine: a real server process that speaks SGLang's flags, logs and HTTP
API with timings from the roofline perf model (`python -m autotune.sim`), and the same scheduler
run analytically over a workload without a process (`autotune.sim.analytic.evaluate`).

Modules: `args` (SGLang flags by version), `tokens` (fake tokenizer and text), `radix` (prefix
cache with HiCache and mamba checkpoints), `scheduler` (the discrete-event engine model),
`analytic` (workloads in virtual time), `api`/`http`/`server`/`metrics`/`startup` (the process).
"""

from __future__ import annotations

from typing import Any

__all__ = ["RequestSpec", "Workload", "closed_loop", "evaluate", "multi_turn", "open_loop"]


def __getattr__(name: str) -> Any:
    # lazy: `import autotune.sim` stays cheap for the CLI
    if name in __all__:
        from autotune.sim import analytic

        return getattr(analytic, name)
    raise AttributeError(f"module 'autotune.sim' has no attribute {name!r}")
