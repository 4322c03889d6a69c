"""The simulated engine: a real server process that speaks SGLang's (or, with `--sim-engine vllm`,
vLLM's) flags, logs and HTTP API with timings from the roofline perf model
(`python -m autotune.sim`), and the same scheduler run analytically over a workload without a
process (`autotune.sim.analytic.evaluate`).

Modules: `options` (the simulator's own --sim-* flags), `args` (SGLang flags by version; vLLM's
in `vllm_args`), `tokens` (fake tokenizer and text), `radix` (prefix cache with HiCache and mamba
checkpoints), `scheduler` (the discrete-event engine model; its records in `records`, speculative
acceptance in `speculation`), `analytic` (workloads in virtual time), `main` (the process entry).
The process: `core` (what both simulated servers share: engine loop, dispatch, generation,
lifecycle; `clock` maps its virtual time to real time), `server` (SGLang's routes, texts and log
lines) and `vllm_server` (vLLM's), `launch` (plan before serving), `startup`/`vllm_startup` (each
engine's startup and refusal lines), `api` (request parsing, error bodies), `job` (one request's
output and response bytes), `http` (the HTTP/1.1 server), `metrics` (/metrics).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["RequestSpec", "Workload", "closed_loop", "evaluate", "multi_turn", "open_loop"]

# The engines the simulator impersonates (flags, logs, HTTP API); the first is the default.
SIM_ENGINES: tuple[str, ...] = ("sglang", "vllm")


def sim_launcher(engine: str) -> list[str]:
    """The argv prefix that starts the simulator as `engine`; the engine's adapter appends the
    model, host, port and flags exactly as for the real engine.

    Raises:
        ConfigError: an engine the simulator does not impersonate.
    """
    if engine not in SIM_ENGINES:
        from autotune.errors import ConfigError

        raise ConfigError(
            f"the simulator impersonates {', '.join(SIM_ENGINES)}, not {engine!r}",
            field="target.engine",
        )
    argv = [sys.executable, "-m", "autotune.sim"]
    return argv if engine == SIM_ENGINES[0] else [*argv, "--sim-engine", engine]


def __getattr__(name: str) -> Any:
    # lazy: `import autotune.sim` stays cheap for the CLI
    if name in __all__:
        from autotune.sim import analytic

        return getattr(analytic, name)
    raise AttributeError(f"module 'autotune.sim' has no attribute {name!r}")
