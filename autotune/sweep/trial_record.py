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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.secrets import hide, holds_secret, scrub_argv
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
# The GPUs are the trial's own (set per trial, or by the spec), never the shell's.
NOT_INHERITED = frozenset({"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"})


def engine_relevant(name: str) -> bool:
    return name not in NOT_INHERITED and (
        name in ENGINE_ENV_NAMES or name.startswith(ENGINE_ENV_PREFIXES)
    )


def command_record(
    spec: TrialSpec,
    adapter: EngineAdapter,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The trial's command as its row keeps it: the launcher it ran (the spec's, or the binary
    the adapter chose), the engine release and model path it was given, its argv and the
    variables it was given (`gpus`: the CUDA_VISIBLE_DEVICES its GPUs from the sweep's pool
    gave it), secrets kept out, and the engine-relevant variables it inherited."""
    environ = os.environ if environ is None else environ
    secrets = list(spec.secrets.values())
    given: dict[str, str | None] = {}
    gpus = None
    for name, value in env.items():
        if name == "CUDA_VISIBLE_DEVICES" and name not in spec.env:
            gpus = value  # the trial's own GPUs, from the sweep's pool
        elif name in spec.env:  # as the stored spec holds it: a secret stays its reference
            given[name] = spec.env[name]
        else:
            given[name] = None if holds_secret(name, value, env=True) else hide(value, secrets)
    inherited = {
        name: None if holds_secret(name, value, env=True) else hide(value, secrets)
        for name, value in sorted(environ.items())
        if name not in env and engine_relevant(name)
    }
    binary = getattr(adapter, "binary", None)  # llama.cpp: the llama-server found at startup
    launcher = list(spec.launcher) if spec.launcher else ([binary] if binary else None)
    return {
        "engine_version": spec.engine_version,
        "launcher": launcher,
        "model": _absolute_if_local(spec.model),
        "argv": [hide(a, secrets) for a in scrub_argv(argv)],
        "env": given,
        "gpus": gpus,
        "inherited": inherited,
        "cwd": os.getcwd(),
    }


def _absolute_if_local(model: str) -> str:
    """A model path the engine resolved against the sweep's working folder, made absolute (a
    hub id, which no local path matches, stays as written)."""
    path = Path(model)
    return str(path.resolve()) if not path.is_absolute() and path.exists() else model
