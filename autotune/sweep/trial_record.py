"""What a real trial started, as its row keeps it (`launch.command`), so that the report's
launch.sh starts the engine the winning trial ran rather than what the spec says today: a spec
edited before `--resume`, the llama-server binary found on this machine, the environment of the
shell that ran the sweep, the GPUs the trial was given.

Nothing secret is kept: the spec's secrets stay the `${env:NAME}` references the stored spec
holds, flag values that hold one are scrubbed from the argv, and an inherited variable that
holds one is kept by name only (autotune.secrets.holds_secret).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.secrets import REDACTED, hide, holds_secret, ref_name, scrub_argv
from autotune.sweep.trial_models import TrialSpec

if TYPE_CHECKING:
    from autotune.engines.base import EngineAdapter

# Inherited variables that change what an engine does (its own switches, the CUDA/ROCm runtime,
# NCCL, the kernel libraries, the hub, autotune's kernel-file folder for the vLLM plugin); the
# rest of the shell's environment (PATH, HOME, LANG, ...) is the machine's, not the config's.
ENGINE_ENV_PREFIXES = (
    "SGLANG_",
    "SGL_",
    "VLLM_",
    "LLAMA_",
    "GGML_",
    "CUDA_",
    "NCCL_",
    "NVIDIA_",
    "TORCH_",
    "PYTORCH_",
    "TORCHINDUCTOR_",
    "TRITON_",
    "FLASHINFER_",
    "HIP_",
    "HSA_",
    "ROCM_",
    "MIOPEN_",
    "HF_",
    "HUGGING_FACE_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "OMP_",
    "MKL_",
)
ENGINE_ENV_NAMES = frozenset({"AUTOTUNE_KERNEL_CONFIG_DIR"})
# The GPUs are the trial's own (set per trial, or by the spec), never the shell's; a container
# image's metadata (CUDA_VERSION, NVIDIA_REQUIRE_CUDA, ...) and build-time settings describe
# the machine, not the configuration.
NOT_INHERITED = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_PRODUCT_NAME",
        "CUDA_HOME",
        "CUDA_PATH",
        "ROCM_PATH",
        "ROCM_HOME",
        "TORCH_CUDA_ARCH_LIST",
    }
)
NOT_INHERITED_SUFFIXES = ("_VERSION", "_VERSION_MAJOR", "_VERSION_MINOR")
NOT_INHERITED_PREFIXES = ("NVIDIA_REQUIRE_", "NV_")


def engine_relevant(name: str) -> bool:
    return (
        name not in NOT_INHERITED
        and not name.endswith(NOT_INHERITED_SUFFIXES)
        and not name.startswith(NOT_INHERITED_PREFIXES)
        and (name in ENGINE_ENV_NAMES or name.startswith(ENGINE_ENV_PREFIXES))
    )


def command_record(
    spec: TrialSpec,
    adapter: EngineAdapter,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The trial's command as its row keeps it: the launcher it ran (the spec's, or the
    adapter's with its program resolved on the search path the engine had), the engine
    release, tensor-parallel size and model path it was given, its argv and the variables it
    was given (`gpus`: the CUDA_VISIBLE_DEVICES its GPUs gave it), and the engine-relevant
    variables it inherited; a secret (autotune.secrets.holds_secret) is kept as its reference
    or as REDACTED, an inherited one by name only (None)."""
    environ = os.environ if environ is None else environ
    secrets = list(spec.secrets.values())
    given: dict[str, str] = {}
    gpus = None
    for name, value in env.items():
        stored = spec.env.get(name, value)  # as the stored spec holds it: a reference stays one
        if name == "CUDA_VISIBLE_DEVICES" and name not in spec.env:
            gpus = value  # the trial's own GPUs
        elif holds_secret(name, stored):
            given[name] = stored if ref_name(stored) else REDACTED
        else:
            given[name] = hide(stored, secrets)
    inherited = {
        name: None if holds_secret(name, value) else hide(value, secrets)
        for name, value in sorted(environ.items())
        if name not in env and engine_relevant(name)
    }
    return {
        "engine_version": spec.engine_version,
        "tp": spec.tp,
        "launcher": _launcher(spec, adapter, argv, env.get("PATH", environ.get("PATH"))),
        "model": _absolute_if_local(spec.model),
        "argv": [hide(a, secrets) for a in scrub_argv(argv)],
        "env": given,
        "gpus": gpus,
        "inherited": inherited,
    }


def _launcher(
    spec: TrialSpec, adapter: EngineAdapter, argv: Sequence[str], path: str | None
) -> list[str]:
    """The argv prefix that started the engine: the spec's launcher as written, else the
    adapter's default (llama.cpp: the binary it found) with its program resolved where the
    engine's search path found it (`vllm` -> /opt/venv/bin/vllm)."""
    if spec.launcher:
        return list(spec.launcher)
    binary = getattr(adapter, "binary", None)  # llama.cpp: the llama-server found at startup
    if binary:
        return [str(binary)]
    from importlib import import_module

    default = import_module(f"autotune.engines.{spec.engine}.command").DEFAULT_LAUNCHER
    prefix = list(argv[: len(default)])
    found = shutil.which(prefix[0], path=path) if prefix else None
    return [found or prefix[0], *prefix[1:]] if prefix else []


def _absolute_if_local(model: str) -> str:
    """A model path the engine resolved against the sweep's working folder, made absolute (a
    hub id, which no local path matches, stays as written)."""
    path = Path(model)
    return str(path.resolve()) if not path.is_absolute() and path.exists() else model
