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

The text is YAML with a comment on every section; `render_starter` returns it and the facts it
was built from, and the result always loads with `autotune.sweep.spec.spec_from_yaml`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError, ModelLoadError, UnknownNameError

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
QWEN3_PARSER_FIELDS = ("reasoning_parser", "tool_call_parser")


@dataclass
class Starter:
    """The spec text and what it was built from (`autotune init --json`)."""

    text: str
    name: str
    engine: str
    engine_version: str
    version_source: str
    gpu: str
    gpu_source: str
    model: str
    model_kind: str  # card | folder | hub-cache | hub-id | gguf
    model_path: str | None
    launcher: list[str] | None
    simulated: bool
    known_good: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "text"}


@dataclass(frozen=True)
class _Model:
    model: str
    kind: str
    model_path: str | None = None
    card: Any = None  # ModelCard where one was read


# ---------------------------------------------------------------------------------------------
# resolution


def resolve_engine_version(
    engine: str, engine_version: str | None, engine_python: str | None
) -> tuple[str, str, list[str]]:
    """(version, where it came from, notes). The probe never imports the engine."""
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


def probe_engine_version(engine: str, python: str) -> str | None:
    """The engine's version installed for interpreter `python` (kernels_tuning.install's probe:
    find_spec and the distribution's metadata, run by that interpreter; nothing imported)."""
    from kernels_tuning.install import ENGINE_DISTS, _run_probe, find_engine

    if engine in ENGINE_DISTS:
        return find_engine(engine, engine_python=python).version
    package, dists = probe_dists(engine)
    version = _run_probe(python, package, dists).get("version")
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


def resolve_model(engine: str, model: str) -> _Model:
    from autotune.models import BUILTIN_CARDS, load_card
    from autotune.planner.dispatch import engine_planner

    ep = engine_planner(engine)
    path = Path(model).expanduser()
    if ep.model_format == "gguf":
        if path.is_file():
            return _Model(str(path.resolve()), "gguf")
        raise ModelLoadError(
            f"--model {model}: {ep.label} loads one GGUF file; no such file (write a test model "
            "with `python -m autotune.testing.gguf_models tiny`)"
        )
    if model in BUILTIN_CARDS:
        return _Model(model, "card", card=BUILTIN_CARDS[model])
    if path.is_dir():
        return _Model(str(path.resolve()), "folder", card=load_card(str(path)))
    if HUB_ID.match(model) and not model.startswith((".", "~")):
        snap = hub_snapshot(model)
        if snap is not None:
            return _Model(str(snap), "hub-cache", model_path=model, card=load_card(str(snap)))
        return _Model(model, "hub-id")
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
# rendering


def _y(value: Any) -> str:
    """A YAML scalar or flow collection (JSON is YAML)."""
    if value is None:
        return "null"
    if (
        isinstance(value, str)
        and re.fullmatch(r"[A-Za-z0-9_./~-]+", value)
        and not re.fullmatch(r"(?i)(null|true|false|yes|no|on|off|~|[-+.\d_eE]+)", value)
    ):
        return value
    return json.dumps(value)


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
    m = resolve_model(engine, model)
    if simulate and m.card is None:
        raise ConfigError(
            f"--simulate plans from a model card; {model!r} is not a built-in card or a local "
            "folder",
            field="--model",
        )
    if m.kind == "hub-id":
        notes.append(
            f"{model} is not in the Hugging Face cache: autotune plans from the checkpoint's "
            f"config, so download it first (`hf download {model}`) and run `autotune init` "
            "again, or set target.model to its local folder and target.model_path to the hub id"
        )
    known: list[dict[str, Any]] = []
    if m.card is not None and gpu_spec is not None:
        from autotune.sweep.known_good import applicable

        for seed in applicable(
            engine=engine, gpu=gpu_spec.name, quantization=m.card.quantization.scheme, tp=1
        ):
            known.append({"id": seed.id, "source": seed.source, "skipped": seed.reason})
    launcher = _default_launcher(engine, engine_python)
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError(
            f"expected letters, digits, '.', '_' or '-' (a letter or digit first), got {name!r}",
            field="--name",
        )
    sweep_name = name or _slug(f"{engine}-{gpu_name}-{Path(m.model_path or m.model).name}")
    starter = Starter(
        text="",
        name=sweep_name,
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
    starter.text = _render(starter, ep.label, m, max_trials, out_name)
    from autotune.sweep.spec import spec_from_yaml

    spec_from_yaml(starter.text, source="the starter spec")  # never write one that does not load
    return starter


def _fixed_for_model(engine: str, m: _Model) -> dict[str, Any]:
    """Built-in fixed fields that do not fit the model: the Qwen3 parsers for other models."""
    if engine not in ("sglang", "vllm") or m.card is None:
        return {}
    if str(m.card.architecture).startswith("Qwen3"):
        return {}
    out: dict[str, Any] = dict.fromkeys(QWEN3_PARSER_FIELDS)
    if engine == "vllm":
        out["enable_auto_tool_choice"] = None
    return out


def _render(s: Starter, label: str, m: _Model, max_trials: int | None, out_name: str) -> str:
    sim = s.simulated
    llama = s.engine == "llamacpp"
    trials = max_trials or (20 if sim else 60)
    ctx_field = {"sglang": "context_length", "vllm": "max_model_len", "llamacpp": "ctx_size"}
    out: list[str] = []
    w = out.append
    w(
        f"# Starter sweep spec for {label} {s.engine_version} on {s.gpu}: written by `autotune init`."
    )
    w("# Every field: docs/spec.md (or `autotune spec schema`). Check it with a dry look at the")
    w(f"# plan first: autotune plan --engine {s.engine} --model {s.model} --gpu {s.gpu}")
    w(f"# Then run it:  autotune sweep {out_name}   (continue: autotune sweep --resume {s.name})")
    if sim:
        w("# SIMULATED: the engine is autotune's simulator (a real server process speaking the")
        w(
            "# engine's API with timings from a roofline model); remove `simulate:` for the real one."
        )
    for note in s.notes:
        w(f"# NOTE: {note}")
    w("")
    w("# The sweep's name: its key in the database (autotune.db) and its report folder.")
    w(f"name: {_y(s.name)}")
    w(f"description: {_y(f'{label} {s.engine_version}, {s.model} on {s.gpu}')}")
    w("")
    w("# What is tuned. engine_version picks the flags and version rules that apply.")
    w("target:")
    w(f"  engine: {s.engine}")
    w(f"  engine_version: {json.dumps(s.engine_version)}   # {s.version_source}")
    model_note = {
        "card": "built-in model card (autotune cards)",
        "folder": "local Hugging Face folder",
        "hub-cache": "snapshot of the hub id in the Hugging Face cache",
        "hub-id": "hub id, written as given (see the NOTE above)",
        "gguf": "the GGUF file llama-server loads",
    }[m.kind]
    w(f"  model: {_y(s.model)}   # {model_note}")
    if s.model_path is not None:
        w(f"  model_path: {_y(s.model_path)}   # what the engine is given to load")
    elif m.kind == "card" and not sim:
        w("  # model_path: /models/your-checkpoint   # what the engine loads (a card is only the")
        w("  #                                       # planner's facts); default: `model`")
    w(
        f"  gpu: {s.gpu}   # {s.gpu_source}; `auto` detects at run time, `autotune gpus` lists names"
    )
    w("  tp: 1                        # tensor-parallel size of one engine")
    if not llama:
        w(
            "  # gpus: 2                    # GPUs to use (default: all); trials run on GPU groups of tp"
        )
    if s.engine == "sglang":
        w("  # host_free_gib: 64          # host RAM for the HiCache pool (default: what is free)")
    if sim:
        w("")
        w("# The simulated engine: remove this section to run the real engine.")
        w("simulate:")
        w("  time_scale: 50               # simulated seconds per real second")
        w("  seed: 0")
        w("  max_startup_s: 0.5")
    w("")
    w(f"# The built-in search space (autotune space show {s.engine}); narrow a parameter with")
    w("# overrides ({name: {low: .., high: ..}} or {name: {choices: [..]}}), fix one with")
    w("# {name: value}; `fixed` sets flags in every trial (null: leave it to the engine).")
    w("space:")
    w("  file: builtin")
    w("  overrides: {}")
    if s.engine == "sglang":
        w("  #  mem_fraction_static: {low: 0.84, high: 0.94, step: 0.02}")
        w("  #  max_running_requests: {choices: [null, 2, 4, 8]}")
    elif s.engine == "vllm":
        w("  #  gpu_memory_utilization: {low: 0.85, high: 0.95, step: 0.05}")
        w("  #  max_num_seqs: {choices: [null, 4, 8, 16]}")
    else:
        w("  #  ctx_size: {choices: [null, 4096, 8192, 16384]}")
    fixed = _fixed_for_model(s.engine, m)
    if fixed:
        w(
            "  fixed:                       # the built-in space's Qwen3 parsers do not fit this model"
        )
        for k, v in fixed.items():
            w(f"    {k}: {_y(v)}")
    else:
        w("  fixed: {}")
    w(f"  #  {ctx_field[s.engine]}: 65536     # e.g. the longest context your clients need")
    w("")
    w("# What every trial is measured on. The cheap probe runs first: a trial below")
    w("# prune_below x the best probe so far is stopped there.")
    w("workload:")
    w("  scenarios:")
    if sim:
        w("    - {kind: decode, name: probe, prompt_len: 128, output_len: 32, num_requests: 2}")
        w(
            "    - {kind: throughput, name: streams, prompt_len: 1024, output_len: 128, concurrency: 4,"
        )
        w("       num_requests: 8}")
    else:
        conc = 4 if llama else 8
        w("    - {kind: decode, name: probe, prompt_len: 128, output_len: 64, num_requests: 2}")
        w(
            f"    - {{kind: throughput, name: streams, prompt_len: 2048, output_len: 256, concurrency: {conc},"
        )
        w(f"       num_requests: {4 * conc}}}")
        w(
            "    # - {kind: agent, name: agents, prompt_len: 8192, turn_len: 512, turns: 4, concurrency: 2}"
        )
    w("  prune_below: 0.5")
    w("")
    w(
        "# The objective: SCENARIO.FIGURE (docs/spec.md lists the figures); constraints bound others."
    )
    w("objective:")
    w("  metric: streams.output_tok_s")
    w("  vram_headroom_gib: 0.25       # GPU memory that must stay free after startup")
    w("  constraints: []")
    w("  #  - {metric: streams.ttft_p95_s, max: 30}")
    w("")
    w("# When to stop: whichever comes first (`autotune sweep --until 07:00` overrides).")
    w("budget:")
    w(f"  max_trials: {trials}")
    if sim:
        w("  wall_clock_s: 600")
    else:
        w('  until: "07:00"               # next 07:00 local time: the morning report is ready')
    w("")
    w("search:")
    w("  sampler: tpe")
    w(
        "  baseline: true               # trial 0: the engine's own defaults, the report's reference"
    )
    if s.known_good:
        seeds = ", ".join(seed["id"] for seed in s.known_good)
        w(
            f"  known_good: true             # enqueues known-good configurations that apply: {seeds}"
        )
        for seed in s.known_good:
            extra = f"; skipped: {seed['skipped']}" if seed["skipped"] else ""
            w(f"  #   {seed['id']}: {seed['source']}{extra}")
    else:
        w("  known_good: true             # none is catalogued for this engine, GPU, model and TP")
    w("  refine: 0.25                 # last quarter: one-parameter steps around the best")
    w("")
    w("# The best trials are launched again and re-measured; the winner is the best mean.")
    w("finalists:")
    w(f"  top_k: {1 if sim else 3}")
    w(f"  repeats: {2 if sim else 3}")
    w("")
    w("# How each engine process is started and stopped.")
    w("engine:")
    w(f"  startup_timeout_s: {60 if sim else 300 if llama else 900}")
    w(f"  bench_timeout_s: {120 if sim else 1800}")
    w(f"  stop_grace_s: {5 if sim else 20}")
    if s.launcher is not None:
        w(f"  launcher: {json.dumps(s.launcher)}   # the engine of --engine-python")
    elif s.engine == "sglang":
        w("  # launcher: [/opt/sglang/.venv/bin/python, -m, sglang.launch_server]   # default:")
        w("  #                            # python3 -m sglang.launch_server on PATH")
    elif s.engine == "vllm":
        w("  # launcher: [/opt/vllm/.venv/bin/vllm, serve]   # default: vllm serve on PATH")
    else:
        w(
            "  # launcher: [/opt/llama.cpp/build/bin/llama-server]   # default: $AUTOTUNE_LLAMA_SERVER,"
        )
        w("  #                            # else the cached build (scripts/build-llama-server)")
    w("  # port: 30000                # default: a free port per trial")
    w("  env: {}")
    w("")
    w("execution:")
    w(
        "  executor: inprocess          # ray: trials on a Ray cluster (pip install 'autotune[ray]')"
    )
    if sim:
        w("  workers: 2                   # trials at once")
    else:
        w("  # workers: 1                 # trials at once; default: one per GPU group of tp GPUs")
    return "\n".join(out) + "\n"
