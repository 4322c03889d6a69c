"""The text of `autotune init`'s starter spec: YAML with a comment on every section, written
section by section from what autotune.sweep.starter resolved (the Starter and its model)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

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
class StarterModel:
    """The model as resolved: its name or folder, kind, what the engine loads, its card."""

    model: str
    kind: str
    model_path: str | None = None
    card: Any = None  # ModelCard where one was read


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


def fixed_for_model(engine: str, m: StarterModel) -> dict[str, Any]:
    """Built-in fixed fields that do not fit the model: the Qwen3 parsers for other models."""
    if engine not in ("sglang", "vllm") or m.card is None:
        return {}
    if str(m.card.architecture).startswith("Qwen3"):
        return {}
    out: dict[str, Any] = dict.fromkeys(QWEN3_PARSER_FIELDS)
    if engine == "vllm":
        out["enable_auto_tool_choice"] = None
    return out


def render_text(
    s: Starter, label: str, m: StarterModel, max_trials: int | None, out_name: str
) -> str:
    """The spec text, section by section, each with its comments."""
    sections = [
        _header(s, label, out_name),
        _target(s, m),
        _simulate(s),
        _space(s, m),
        _workload(s),
        _objective_and_budget(s, max_trials),
        _search_and_finalists(s),
        _engine(s),
        _execution(s),
    ]
    return "\n".join(line for lines in sections for line in lines) + "\n"


def _header(s: Starter, label: str, out_name: str) -> list[str]:
    w: list[str] = [
        f"# Starter sweep spec for {label} {s.engine_version} on {s.gpu}: written by `autotune init`.",
        "# Every field: docs/spec.md (or `autotune spec schema`). Check it with a dry look at the",
        f"# plan first: autotune plan --engine {s.engine} --model {s.model} --gpu {s.gpu}",
        f"# Then run it:  autotune sweep {out_name}   (continue: autotune sweep --resume {s.name})",
    ]
    if s.simulated:
        w.append(
            "# SIMULATED: the engine is autotune's simulator (a real server process speaking the"
        )
        w.append(
            "# engine's API with timings from a roofline model); remove `simulate:` for the real one."
        )
    w += [f"# NOTE: {note}" for note in s.notes]
    w.append("")
    w.append("# The sweep's name: its key in the database (autotune.db) and its report folder.")
    w.append(f"name: {_y(s.name)}")
    w.append(f"description: {_y(f'{label} {s.engine_version}, {s.model} on {s.gpu}')}")
    w.append("")
    return w


MODEL_NOTES = {
    "card": "built-in model card (autotune cards)",
    "folder": "local Hugging Face folder",
    "hub-cache": "snapshot of the hub id in the Hugging Face cache",
    "hub-id": "hub id, written as given (see the NOTE above)",
    "gguf": "the GGUF file llama-server loads",
}


def _model_note(s: Starter, m: StarterModel) -> str:
    if m.kind == "hub-id" and m.card is not None:  # planned from a committed config card
        note = "hub id, planned from autotune's copy of its config.json"
        return note if s.simulated else f"{note} (see the NOTE above)"
    return MODEL_NOTES[m.kind]


def _target(s: Starter, m: StarterModel) -> list[str]:
    w = [
        "# What is tuned. engine_version picks the flags and version rules that apply.",
        "target:",
        f"  engine: {s.engine}",
        f"  engine_version: {json.dumps(s.engine_version)}   # {s.version_source}",
        f"  model: {_y(s.model)}   # {_model_note(s, m)}",
    ]
    if s.model_path is not None:
        w.append(f"  model_path: {_y(s.model_path)}   # what the engine is given to load")
    elif m.kind == "card" and not s.simulated:
        w.append(
            "  # model_path: /models/your-checkpoint   # what the engine loads (a card is only the"
        )
        w.append("  #                                       # planner's facts); default: `model`")
    w.append(
        f"  gpu: {s.gpu}   # {s.gpu_source}; `auto` detects at run time, `autotune gpus` lists names"
    )
    w.append("  tp: 1                        # tensor-parallel size of one engine")
    if s.engine != "llamacpp":
        w.append(
            "  # gpus: 2                    # GPUs to use (default: all); trials run on GPU groups of tp"
        )
    if s.engine == "sglang":
        w.append(
            "  # host_free_gib: 64          # host RAM for the HiCache pool (default: what is free)"
        )
    return w


def _simulate(s: Starter) -> list[str]:
    if not s.simulated:
        return []
    return [
        "",
        "# The simulated engine: remove this section to run the real engine.",
        "simulate:",
        "  time_scale: 50               # simulated seconds per real second",
        "  seed: 0",
        "  max_startup_s: 0.5",
    ]


SPACE_EXAMPLES = {
    "sglang": [
        "  #  mem_fraction_static: {low: 0.84, high: 0.94, step: 0.02}",
        "  #  max_running_requests: {choices: [null, 2, 4, 8]}",
    ],
    "vllm": [
        "  #  gpu_memory_utilization: {low: 0.85, high: 0.95, step: 0.05}",
        "  #  max_num_seqs: {choices: [null, 4, 8, 16]}",
    ],
}
CONTEXT_FIELD = {"sglang": "context_length", "vllm": "max_model_len", "llamacpp": "ctx_size"}


def _space(s: Starter, m: StarterModel) -> list[str]:
    w = [
        "",
        f"# The built-in search space (autotune space show {s.engine}); narrow a parameter with",
        "# overrides ({name: {low: .., high: ..}} or {name: {choices: [..]}}), fix one with",
        "# {name: value}; `fixed` sets flags in every trial (null: leave it to the engine).",
        "space:",
        "  file: builtin",
        "  overrides: {}",
    ]
    w += SPACE_EXAMPLES.get(s.engine, ["  #  ctx_size: {choices: [null, 4096, 8192, 16384]}"])
    fixed = fixed_for_model(s.engine, m)
    if fixed:
        w.append(
            "  fixed:                       # the built-in space's Qwen3 parsers do not fit this model"
        )
        w += [f"    {k}: {_y(v)}" for k, v in fixed.items()]
    else:
        w.append("  fixed: {}")
    w.append(
        f"  #  {CONTEXT_FIELD[s.engine]}: 65536     # e.g. the longest context your clients need"
    )
    return w


def _workload(s: Starter) -> list[str]:
    w = [
        "",
        "# What every trial is measured on. The cheap probe runs first: a trial below",
        "# prune_below x the best probe so far is stopped there.",
        "workload:",
        "  scenarios:",
    ]
    if s.simulated:
        w.append(
            "    - {kind: decode, name: probe, prompt_len: 128, output_len: 32, num_requests: 2}"
        )
        w.append(
            "    - {kind: throughput, name: streams, prompt_len: 1024, output_len: 128, concurrency: 4,"
        )
        w.append("       num_requests: 8}")
    else:
        conc = 4 if s.engine == "llamacpp" else 8
        w.append(
            "    - {kind: decode, name: probe, prompt_len: 128, output_len: 64, num_requests: 2}"
        )
        w.append(
            f"    - {{kind: throughput, name: streams, prompt_len: 2048, output_len: 256, concurrency: {conc},"
        )
        w.append(f"       num_requests: {4 * conc}}}")
        w.append(
            "    # - {kind: agent, name: agents, prompt_len: 8192, turn_len: 512, turns: 4, concurrency: 2}"
        )
    w.append("  prune_below: 0.5")
    return w


def _objective_and_budget(s: Starter, max_trials: int | None) -> list[str]:
    w = [
        "",
        "# The objective: SCENARIO.FIGURE (docs/spec.md lists the figures); constraints bound others.",
        "objective:",
        "  metric: streams.output_tok_s",
        "  vram_headroom_gib: 0.25       # GPU memory that must stay free after startup",
        "  constraints: []",
        "  #  - {metric: streams.ttft_p95_s, max: 30}",
        "",
        "# When to stop: whichever comes first (`autotune sweep --until 07:00` overrides).",
        "budget:",
        f"  max_trials: {max_trials or (20 if s.simulated else 60)}",
    ]
    if s.simulated:
        w.append("  wall_clock_s: 600")
    else:
        w.append(
            '  until: "07:00"               # next 07:00 local time: the morning report is ready'
        )
    return w


def _search_and_finalists(s: Starter) -> list[str]:
    w = [
        "",
        "search:",
        "  sampler: tpe",
        "  baseline: true               # trial 0: the engine's own defaults, the report's reference",
    ]
    if s.known_good:
        seeds = ", ".join(seed["id"] for seed in s.known_good)
        w.append(
            f"  known_good: true             # enqueues known-good configurations that apply: {seeds}"
        )
        for seed in s.known_good:
            extra = f"; skipped: {seed['skipped']}" if seed["skipped"] else ""
            w.append(f"  #   {seed['id']}: {seed['source']}{extra}")
    else:
        w.append(
            "  known_good: true             # none is catalogued for this engine, GPU, model and TP"
        )
    sim = s.simulated
    w += [
        "  refine: 0.25                 # last quarter: one-parameter steps around the best",
        "",
        "# The best trials are launched again and re-measured; the winner is the best mean.",
        "finalists:",
        f"  top_k: {1 if sim else 3}",
        f"  repeats: {2 if sim else 3}",
    ]
    return w


LAUNCHER_EXAMPLES = {
    "sglang": [
        "  # launcher: [/opt/sglang/.venv/bin/python, -m, sglang.launch_server]   # default:",
        "  #                            # python3 -m sglang.launch_server on PATH",
    ],
    "vllm": ["  # launcher: [/opt/vllm/.venv/bin/vllm, serve]   # default: vllm serve on PATH"],
    "llamacpp": [
        "  # launcher: [/opt/llama.cpp/build/bin/llama-server]   # default: $AUTOTUNE_LLAMA_SERVER,",
        "  #                            # else the cached build (scripts/build-llama-server)",
    ],
}


def _engine(s: Starter) -> list[str]:
    sim, llama = s.simulated, s.engine == "llamacpp"
    w = [
        "",
        "# How each engine process is started and stopped.",
        "engine:",
        f"  startup_timeout_s: {60 if sim else 300 if llama else 900}",
        f"  bench_timeout_s: {120 if sim else 1800}",
        f"  stop_grace_s: {5 if sim else 20}",
    ]
    if s.launcher is not None:
        w.append(f"  launcher: {json.dumps(s.launcher)}   # the engine of --engine-python")
    else:
        w += LAUNCHER_EXAMPLES.get(s.engine, LAUNCHER_EXAMPLES["llamacpp"])
    w += ["  # port: 30000                # default: a free port per trial", "  env: {}"]
    return w


def _execution(s: Starter) -> list[str]:
    w = [
        "",
        "execution:",
        "  executor: inprocess          # ray: trials on a Ray cluster (pip install 'autotune[ray]')",
    ]
    if s.simulated:
        w.append("  workers: 2                   # trials at once")
    else:
        w.append(
            "  # workers: 1                 # trials at once; default: one per GPU group of tp GPUs"
        )
    return w
