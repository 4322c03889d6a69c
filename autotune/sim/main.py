"""`python -m autotune.sim` (and `autotune sim`): read the simulated engine's command line, then
run the engine it impersonates: SGLang (sim/server.py) or, with `--sim-engine vllm`, vLLM
(sim/vllm_server.py)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from autotune.sim.args import parse_args

log = logging.getLogger("autotune.sim")


def setup_logging(level: str) -> None:
    """The simulator's log lines on stderr, `[time] message`, at the engine's --log-level."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(getattr(logging, level.upper(), logging.INFO))
    log.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    ns, config, sim = parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(ns.log_level)
    if sim.start_fails:  # the launch's bad luck (sim/variation.py), whatever the engine
        from autotune.sim.variation import FLAKY_START

        log.error(FLAKY_START)
        return 1
    if sim.engine == "vllm":
        from autotune.sim.vllm_server import main_vllm

        return main_vllm(ns, config, sim)
    from autotune.sim.server import main_sglang

    return main_sglang(ns, config, sim)
