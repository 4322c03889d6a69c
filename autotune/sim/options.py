"""The simulator's own command-line options, the same whichever engine it impersonates: the
`--sim-*` flags and the SimOptions they parse into (sim/args.py adds SGLang's flags to them,
sim/vllm_args.py vLLM's)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

# The SGLang version the simulator follows when --sim-engine-version is not given.
SIM_DEFAULT_VERSION = "0.5.17"
# argparse's nargs for the engines' catalog kinds that take values: a list, an optional value.
CATALOG_NARGS = {"l": "+", "o": "?"}


@dataclass(frozen=True)
class SimOptions:
    gpu: str
    engine_version: str
    time_scale: float
    seed: int
    model: str | None
    gpu_free_gib: float | None
    host_free_gib: float | None
    max_startup_s: float
    noise: float
    alloc_deviation: float = 1.0  # scales the simulated machine's shares (sim/allocator.py)
    slowdown: float = 1.0  # this launch's run-to-run time factor (sim/variation.py)
    start_fails: bool = False  # this launch fails before it serves (sim/variation.py)
    engine: str = "sglang"  # the engine impersonated (autotune.sim.SIM_ENGINES)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace, engine: str = "sglang") -> SimOptions:
        """The --sim-* flags `add_sim_flags` declared, as parsed (field x from --sim-x)."""
        parsed = {f.name: getattr(ns, "sim_" + f.name) for f in fields(cls) if f.name != "engine"}
        return cls(**parsed, engine=engine)


def add_sim_flags(
    p: argparse.ArgumentParser,
    *,
    engine: str = "sglang",
    default_version: str = SIM_DEFAULT_VERSION,
) -> None:
    """The simulator's own flags (the same for every impersonated engine)."""
    from autotune.sim import SIM_ENGINES

    g = p.add_argument_group("simulation (autotune only)")
    g.add_argument(
        "--sim-engine",
        choices=SIM_ENGINES,
        default=SIM_ENGINES[0],
        help="the engine to impersonate: its flags, log lines and HTTP API",
    )
    g.add_argument("--sim-gpu", required=True, help="GPU catalog name, e.g. rtx-4080-super-32g")
    g.add_argument(
        "--sim-engine-version",
        default=default_version,
        help=f"{engine} version whose flags, defaults and log formats to follow",
    )
    g.add_argument(
        "--sim-time-scale",
        type=float,
        default=1.0,
        help="simulated seconds per real second; 0 = never sleep (virtual timings)",
    )
    g.add_argument("--sim-seed", type=int, default=0)
    g.add_argument(
        "--sim-model",
        default=None,
        help="model card to simulate when --model-path is not one (built-in or dir)",
    )
    g.add_argument(
        "--sim-gpu-free-gib",
        type=float,
        default=None,
        help="free GPU memory before weights (default: capacity - reserve)",
    )
    g.add_argument(
        "--sim-host-free-gib",
        type=float,
        default=None,
        help="free host RAM for HiCache (default: read from this machine)",
    )
    g.add_argument(
        "--sim-max-startup-s",
        type=float,
        default=3.0,
        help="cap on the real seconds the simulated startup takes",
    )
    g.add_argument("--sim-noise", type=float, default=0.02, help="lognormal step-time sigma")
    g.add_argument(
        "--sim-alloc-deviation",
        type=float,
        default=1.0,
        help="scale of the simulated machine's memory beyond the planner's figures "
        "(0: the KV pool exactly as planned)",
    )
    g.add_argument(
        "--sim-slowdown",
        type=float,
        default=1.0,
        help="this launch's time factor (> 1: slower), its run-to-run luck",
    )
    g.add_argument(
        "--sim-start-fails",
        action="store_true",
        help="fail before serving, for a reason that is not the configuration's",
    )
