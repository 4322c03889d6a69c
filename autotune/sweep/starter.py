"""`autotune init`: a commented starter sweep spec for a GPU, a model and an engine release.

What it resolves, and how:

- the GPU: a catalog name, or `auto` (NVML; no driver is a HardwareError, exit 3), or `cpu`
  (llama.cpp only);
- the model: a built-in card, a local Hugging Face folder, a GGUF file (llama.cpp), or a hub id
  written as is (resolved to its snapshot folder when the Hugging Face cache holds one);
- the engine release: `--engine-version`, else the version installed for another interpreter
  (`--engine-python`, read from the distribution's metadata by the probe of
  `kernels_tuning.install`, without importing the engine), else the engine's default;
- the space: the built-in one (`space: {file: builtin}`), with the model-specific fixed fields
  of the built-in space cleared for models they do not fit, and the known-good configurations
  (autotune.sweep.known_good) that apply listed; `search.known_good` enqueues them.

The text is YAML with a comment on every section (autotune.sweep.starter_text);
`render_starter` returns it and the facts it was built from, and the result always loads with
`autotune.sweep.spec.spec_from_yaml`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError, ModelLoadError, UnknownNameError
from autotune.sweep.starter_text import Starter, StarterModel, render_text

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


# ---------------------------------------------------------------------------------------------
# resolution


def resolve_engine_version(
    engine: str, engine_version: str | None, engine_python: str | None
) -> tuple[str, str, list[str]]:
    """(version, where it came from, notes); a nightly or a release candidate is noted with the
    catalogued release it follows, a build the catalogue cannot follow refused
    (autotune.engines.builds). The probe never imports the engine."""
    from autotune.planner.dispatch import followed

    version, source, notes = _resolve_engine_version(engine, engine_version, engine_python)
    note = followed(engine, version).note()
    return version, source, [*notes, *([note] if note else [])]


def _resolve_engine_version(
    engine: str, engine_version: str | None, engine_python: str | None
) -> tuple[str, str, list[str]]:
    from autotune.planner.dispatch import default_version
    from autotune.versions import parse_version

    notes: list[str] = []
    found: str | None = None
    if engine_python is not None:
        found = probe_engine_version(engine, engine_python)
        if found is None and engine_version is None:
            raise ConfigError(
                f"{engine_python} has no {engine} distribution installed (looked for "
                f"{', '.join(probe_dists(engine)[1])} without importing it); install it there, "
                "or give --engine-version",
                field="--engine-python",
            )
    if engine_version is not None:
        parse_version(engine_version, field="--engine-version")
        if (
            found is not None
            and parse_version(found).public != parse_version(engine_version).public
        ):
            notes.append(
                f"--engine-version {engine_version} differs from the {engine} {found} that "
                f"{engine_python} has installed; the spec follows {engine_version}"
            )
        return engine_version.strip(), "--engine-version", notes
    if found is not None:
        parse_version(found, field="--engine-python")
        return found, f"installed for {engine_python}", notes
    return default_version(engine), "the engine's default release", notes


def probe_dists(engine: str) -> tuple[str, tuple[str, ...]]:
    """(top-level package, distribution names) that carry `engine` in a Python environment."""
    from kernels_tuning.install import ENGINE_DISTS

    if engine in ENGINE_DISTS:
        return engine, ENGINE_DISTS[engine]
    # llama.cpp: the pinned llama-cpp-python release vendors the llama.cpp the server is built from
    return "llama_cpp", ("llama-cpp-python",)


def probe_engine_version(
    engine: str, python: str, env: Mapping[str, str] | None = None
) -> str | None:
    """The engine's version installed for interpreter `python` (kernels_tuning.install's probe:
    find_spec and the distribution's metadata, run by that interpreter with `env`, default this
    process's environment; nothing imported)."""
    from kernels_tuning.install import run_probe

    package, dists = probe_dists(engine)
    version = run_probe(python, package, dists, env=env).get("version")
    return str(version) if version else None


def resolve_gpu_name(engine: str, gpu: str) -> tuple[str, str, Any]:
    """(catalog name or `cpu`, how it was chosen, GPUSpec or None)."""
    from autotune.planner.dispatch import resolve_target_gpu

    if gpu.strip().lower() == "auto":
        from autotune.hardware.detect import detect_gpus

        found = detect_gpus()  # HardwareError (exit 3) without a driver
        names = sorted({g.spec.name for g in found})
        if len(names) > 1:
            raise ConfigError(
                f"--gpu auto: this machine mixes GPUs ({', '.join(names)}); pass one with --gpu",
                field="--gpu",
            )
        first = found[0]
        how = f"detected: {len(found)} x {first.device_name} ({first.memory_mib} MiB), driver {first.driver}"
        return first.spec.name, how, first.spec
    spec = resolve_target_gpu(engine, gpu, field="--gpu")
    if spec is None:
        return "cpu", "--gpu cpu (no GPU)", None
    return spec.name, "--gpu", spec


def hub_snapshot(hub_id: str) -> Path | None:
    """The newest snapshot folder of `hub_id` in the Hugging Face cache, if it has a config."""
    root = os.environ.get("HF_HUB_CACHE")
    if root is None:
        home = os.environ.get("HF_HOME") or str(Path("~/.cache/huggingface").expanduser())
        root = str(Path(home) / "hub")
    snaps = Path(root) / f"models--{hub_id.replace('/', '--')}" / "snapshots"
    if not snaps.is_dir():
        return None
    found = [p for p in snaps.iterdir() if (p / "config.json").is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def resolve_model(engine: str, model: str) -> StarterModel:
    from autotune.models import BUILTIN_CARDS, load_card
    from autotune.planner.dispatch import engine_planner

    ep = engine_planner(engine)
    path = Path(model).expanduser()
    if ep.model_format == "gguf":
        if path.is_file():
            return StarterModel(str(path.resolve()), "gguf")
        raise ModelLoadError(
            f"--model {model}: {ep.label} loads one GGUF file; no such file (write a test model "
            "with `python -m autotune.testing.gguf_models tiny`)"
        )
    if model in BUILTIN_CARDS:
        return StarterModel(model, "card", card=BUILTIN_CARDS[model])
    if path.is_dir():
        return StarterModel(str(path.resolve()), "folder", card=load_card(str(path)))
    if HUB_ID.match(model) and not model.startswith((".", "~")):
        snap = hub_snapshot(model)
        if snap is not None:
            return StarterModel(
                str(snap), "hub-cache", model_path=model, card=load_card(str(snap))
            )
        from autotune.models.config_cards import config_card

        # not downloaded: a committed config card (the hub's config.json values) still plans it
        return StarterModel(model, "hub-id", card=config_card(model))
    if any(s in model for s in ("/", "\\")) or model.startswith((".", "~")):
        raise ModelLoadError(
            f"--model {model}: no such model folder (expected a built-in card: "
            f"{', '.join(BUILTIN_CARDS)}; a local Hugging Face folder; or a hub id ORG/NAME)"
        )
    raise UnknownNameError("model card", model, BUILTIN_CARDS)


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return s or "sweep"


# ---------------------------------------------------------------------------------------------
# the spec


def _default_launcher(engine: str, python: str | None) -> list[str] | None:
    if python is None:
        return None
    if engine == "sglang":
        return [python, "-m", "sglang.launch_server"]
    if engine == "vllm":
        return [str(Path(python).parent / "vllm"), "serve"]
    return None


def render_starter(
    *,
    engine: str = "sglang",
    model: str,
    gpu: str = "auto",
    engine_version: str | None = None,
    engine_python: str | None = None,
    simulate: bool = False,
    name: str | None = None,
    max_trials: int | None = None,
    out_name: str = "sweep.yaml",
) -> Starter:
    """Resolve the target and write the commented spec text (validated before it is returned).

    Raises:
        UnknownNameError: an unknown engine, GPU or model card (the message lists valid ones).
        HardwareError: `--gpu auto` without an NVIDIA driver.
        ConfigError, ModelLoadError: a bad version, interpreter or model.
    """
    from autotune.planner.dispatch import engine_planner
    from autotune.sim import SIM_ENGINES

    ep = engine_planner(engine)  # UnknownNameError lists the engines
    if simulate and engine not in SIM_ENGINES:
        raise ConfigError(
            f"the simulated engine impersonates {', '.join(SIM_ENGINES)}, not {engine}; "
            "leave out --simulate",
            field="--simulate",
        )
    version, version_source, notes = resolve_engine_version(engine, engine_version, engine_python)
    gpu_name, gpu_source, gpu_spec = resolve_gpu_name(engine, gpu)
    if simulate and gpu_spec is None:
        raise ConfigError("the simulated engine needs a GPU (a catalog name)", field="--gpu")
    m = _starter_model(engine, model, simulate, notes)
    known = _known_good(engine, m, gpu_spec)
    launcher = _default_launcher(engine, engine_python)
    starter = Starter(
        text="",
        name=_sweep_name(name, engine, gpu_name, m),
        engine=engine,
        engine_version=version,
        version_source=version_source,
        gpu=gpu_name,
        gpu_source=gpu_source,
        model=m.model,
        model_kind=m.kind,
        model_path=m.model_path,
        launcher=launcher,
        simulated=simulate,
        known_good=known,
        notes=notes,
    )
    starter.text = render_text(starter, ep.label, m, max_trials, out_name)
    from autotune.sweep.spec import spec_from_yaml

    spec_from_yaml(starter.text, source="the starter spec")  # never write one that does not load
    return starter


def _starter_model(engine: str, model: str, simulate: bool, notes: list[str]) -> StarterModel:
    """The resolved model; a hub id not in the cache gets a note (nothing to plan from yet)."""
    m = resolve_model(engine, model)
    if simulate and m.card is None:
        raise ConfigError(
            f"--simulate plans from a model card; {model!r} is not a built-in card, a local "
            "folder, a downloaded hub id, or a hub id autotune has a config card for",
            field="--model",
        )
    if m.kind == "hub-id" and not simulate and m.card is not None:
        notes.append(
            f"{model} is not in the Hugging Face cache: the plan comes from autotune's copy of its "
            f"config.json, but the engine loads the checkpoint, so download it first (`hf "
            f"download {model}`), or set target.model to its local folder and target.model_path "
            "to the hub id"
        )
    elif m.kind == "hub-id" and not simulate:
        notes.append(
            f"{model} is not in the Hugging Face cache: autotune plans from the checkpoint's "
            f"config, so download it first (`hf download {model}`) and run `autotune init` "
            "again, or set target.model to its local folder and target.model_path to the hub id"
        )
    return m


def _known_good(engine: str, m: StarterModel, gpu_spec: Any) -> list[dict[str, Any]]:
    """The known-good configurations catalogued for the model card on the GPU (id, source,
    why one is skipped)."""
    known: list[dict[str, Any]] = []
    if m.card is not None and gpu_spec is not None:
        from autotune.sweep.known_good import applicable

        for seed in applicable(
            engine=engine, gpu=gpu_spec.name, quantization=m.card.quantization.scheme, tp=1
        ):
            known.append({"id": seed.id, "source": seed.source, "skipped": seed.reason})
    return known


def _sweep_name(name: str | None, engine: str, gpu_name: str, m: StarterModel) -> str:
    """--name (checked), else engine-gpu-model."""
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError(
            f"expected letters, digits, '.', '_' or '-' (a letter or digit first), got {name!r}",
            field="--name",
        )
    return name or _slug(f"{engine}-{gpu_name}-{Path(m.model_path or m.model).name}")
