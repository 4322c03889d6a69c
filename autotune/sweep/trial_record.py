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
from typing import Any

from autotune.secrets import REDACTED, hide, holds_secret, ref_name, scrub_argv
from autotune.sweep.trial_models import TrialSpec

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
# image's metadata describes the machine, not the configuration (named exactly: VLLM_*_VERSION
# switches are real settings).
NOT_INHERITED = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_PRODUCT_NAME",
        "CUDA_VERSION",
        "CUDA_DRIVER_VERSION",
        "CUDNN_VERSION",
        "NCCL_VERSION",
        "PYTORCH_VERSION",
        "TORCH_VERSION",
        "ROCM_VERSION",
        "HIP_VERSION",
    }
)
NOT_INHERITED_PREFIXES = ("NVIDIA_REQUIRE_",)
# How the trial's GPUs were named: carried with them as defaults, not as the spec's settings.
GPU_NAMING = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def engine_relevant(name: str) -> bool:
    return (
        name not in NOT_INHERITED
        and not name.startswith(NOT_INHERITED_PREFIXES)
        and (name in ENGINE_ENV_NAMES or name.startswith(ENGINE_ENV_PREFIXES))
    )


def command_record(
    spec: TrialSpec,
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
    gpus: dict[str, str] = {}
    for name, value in env.items():
        stored = spec.env.get(name, value)  # as the stored spec holds it: a reference stays one
        if name in GPU_NAMING and name not in spec.env:
            gpus[name] = value  # the trial's own GPUs, and the order they were counted in
        elif holds_secret(name, stored, env=True):
            given[name] = stored if ref_name(stored) else REDACTED
        else:
            given[name] = hide(stored, secrets)
    inherited = {
        name: None if holds_secret(name, value, env=True) else hide(value, secrets)
        for name, value in sorted(environ.items())
        if name not in env and engine_relevant(name)
    }
    return {
        "engine_version": spec.engine_version,
        "tp": spec.tp,
        "launcher": _launcher(spec, argv, env.get("PATH", environ.get("PATH"))),
        "model": _absolute_if_local(spec.model),
        "argv": [hide(a, secrets) for a in scrub_argv(argv)],
        "env": given,
        "gpus": gpus.get("CUDA_VISIBLE_DEVICES"),
        "gpu_order": gpus.get("CUDA_DEVICE_ORDER"),
        "inherited": inherited,
    }


def _launcher(spec: TrialSpec, argv: Sequence[str], path: str | None) -> list[str]:
    """The argv prefix that started the engine (the spec's launcher, else the adapter's
    default, whose program for llama.cpp is the binary it found), its program as this worker
    found it: a relative path made absolute (the record outlives the sweep's folder), a bare
    name resolved on the engine's search path (`vllm` -> /opt/venv/bin/vllm)."""
    from importlib import import_module

    default = import_module(f"autotune.engines.{spec.engine}.command").DEFAULT_LAUNCHER
    prefix = list(argv[: len(spec.launcher or default)])
    if not prefix:
        return []
    program = prefix[0]
    if "/" in program:
        program = os.path.abspath(program)
    else:
        program = shutil.which(program, path=path) or program
    return [program, *prefix[1:]]


def _absolute_if_local(model: str) -> str:
    """A model path the engine resolved against the sweep's working folder, made absolute (a
    hub id, which no local path matches, stays as written)."""
    path = Path(model)
    return str(path.resolve()) if not path.is_absolute() and path.exists() else model
