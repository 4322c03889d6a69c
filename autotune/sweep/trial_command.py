"""The engine command of a trial: argv and environment from the engine adapter (the simulator
driven the same way, plus its own --sim-* flags), secrets resolved; and the API key the engine
was started with, which the benchmark must send.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from autotune.sweep.trial_models import TrialSpec

if TYPE_CHECKING:
    from autotune.engines.base import EngineAdapter


def engine_command(
    spec: TrialSpec, adapter: EngineAdapter, port: int
) -> tuple[list[str], dict[str, str]]:
    """argv + env for this trial; the simulator is driven exactly like the engine (its flags
    come from the adapter) plus its own --sim-* flags."""
    from autotune.sim import sim_launcher

    launcher = (
        list(spec.launcher)
        if spec.launcher
        else (sim_launcher(spec.engine) if spec.simulate else None)
    )
    from autotune.secrets import resolve_refs

    config = resolve_refs(spec.config, spec.secrets)  # the engine gets the values themselves
    if spec.tp > 1:
        config.setdefault("tp_size", spec.tp)
    cmd = adapter.build_command(
        config,
        model=spec.model,
        version=spec.engine_version,
        host=spec.host,
        port=port,
        launcher=launcher,
    )
    argv = list(cmd.argv)
    if spec.simulate:
        argv += [
            "--sim-gpu",
            spec.gpu,
            "--sim-engine-version",
            spec.engine_version,
            "--sim-time-scale",
            f"{spec.sim_time_scale:g}",
            "--sim-seed",
            str(spec.sim_seed),
        ]
        if spec.gpu_free_gib is not None:
            argv += ["--sim-gpu-free-gib", f"{spec.gpu_free_gib:g}"]
        if spec.host_free_gib is not None:
            argv += ["--sim-host-free-gib", f"{spec.host_free_gib:g}"]
        argv += spec.sim_extra_args
    env = {**cmd.env, **spec.engine_env()}
    return argv, env


def api_key_of(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The API key the engine was started with (`--api-key K`, `--api-key=K`, vLLM's
    VLLM_API_KEY): the benchmark must send it, or every request is refused with HTTP 401."""
    for i, arg in enumerate(argv):
        if arg == "--api-key" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--api-key="):
            return arg.partition("=")[2]
    return env.get("VLLM_API_KEY") or None
