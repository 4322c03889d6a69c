"""Known-good launch configurations (FIELD-NOTES K1..K5) that seed a sweep.

Each entry keeps the command line exactly as the field notes give it, the target it was measured
on, and what it needs beyond the flags. `applicable()` picks those that match a sweep's target;
the orchestrator then checks each against the search space, the rules and the planner before it
enqueues it (seeds, not answers: a seed that does not fit is skipped with its reason).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import ConfigError
from autotune.sources import cite
from autotune.space.models import SearchSpace
from autotune.space.rules import same

# Flags whose field name is not the flag with dashes turned into underscores.
FLAG_ALIASES = {"tp": "tp_size", "tensor_parallel_size": "tp_size"}
# Fields the sweep's target decides, never a seed.
TARGET_FIELDS = frozenset({"tp_size", "tensor_parallel_size", "model_path", "port", "host"})


class KnownGood(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    source: str = Field(description="where it was measured (autotune.sources), shown to users")
    engine: str = "sglang"
    flags: str = Field(description="the command line as measured")
    gpus: tuple[str, ...] = Field(description="GPU catalog names it was measured on")
    quantization: tuple[str, ...] = Field(description="ModelCard quantization schemes")
    tp: int = 1
    engine_version: str | None = Field(None, description="version it was measured on")
    requires: tuple[str, ...] = Field(
        default=(), description="fields the target must provide (e.g. a draft model path)"
    )
    note: str = ""

    def config(self) -> dict[str, Any]:
        """Engine field -> value, target-decided fields (TP) removed; vLLM's one
        `--speculative-config` JSON becomes the space's speculative fields."""
        cfg = flags_to_config(self.flags)
        if self.engine == "vllm" and isinstance(cfg.get("speculative_config"), str):
            cfg.update(_vllm_speculative_fields(cfg.pop("speculative_config")))
        cfg = {_canonical(self.engine, k): v for k, v in cfg.items()}
        return {
            k: v
            for k, v in _without_overridden(self.engine, cfg).items()
            if k not in TARGET_FIELDS
        }


def _canonical(engine: str, key: str) -> str:
    """The engine's current name of a field (`cuda_graph_max_bs` -> `cuda_graph_max_bs_decode`)."""
    if engine == "sglang":
        from autotune.engines.sglang.flags import ALIASES
    elif engine == "vllm":
        from autotune.engines.vllm.fields import ALIASES
    else:
        return key
    return ALIASES.get(key, key)


def _without_overridden(engine: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """`cfg` without values the engine overrides with what it would choose anyway, so the
    configuration means what it says (SGLang's ServerArgs adjustments):
    - with a speculative tree of width 1 (eagle topk 1), NEXTN/EAGLE verify steps + 1 tokens,
      whatever speculative_num_draft_tokens says;
    - a host pool size (hicache_size > 0) overrides hicache_ratio.
    """
    out = dict(cfg)
    if engine != "sglang":
        return out
    steps = out.get("speculative_num_steps")
    if (
        out.get("speculative_algorithm") in ("NEXTN", "EAGLE", "EAGLE3")
        and out.get("speculative_eagle_topk") in (None, 1)
        and isinstance(steps, int)
        and out.get("speculative_num_draft_tokens") == steps + 1
    ):
        del out["speculative_num_draft_tokens"]
    size = out.get("hicache_size")
    if isinstance(size, int | float) and size > 0:
        out.pop("hicache_ratio", None)
    return out


def _vllm_speculative_fields(text: str) -> dict[str, Any]:
    import json

    from autotune.engines.vllm.fields import SPECULATIVE_KEYS

    field_of = {key: field for field, key in SPECULATIVE_KEYS.items()}
    obj = json.loads(text)
    unknown = sorted(set(obj) - set(field_of))
    if unknown:
        raise ValueError(f"--speculative-config keys {unknown} have no search-space field")
    return {field_of[k]: v for k, v in obj.items()}


def _value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text


def flags_to_config(flags: str | Sequence[str]) -> dict[str, Any]:
    """`--page-size 64 --enable-x --cuda-graph-bs 1 2 4` -> {page_size: 64, enable_x: True,
    cuda_graph_bs: [1, 2, 4]} (engine field names; numbers parsed)."""
    tokens = shlex.split(flags) if isinstance(flags, str) else list(flags)
    out: dict[str, Any] = {}
    key: str | None = None
    vals: list[Any] = []

    def flush() -> None:
        if key is not None:
            out[key] = True if not vals else vals[0] if len(vals) == 1 else list(vals)

    for tok in tokens:
        if tok.startswith("--"):
            flush()
            name = tok[2:].replace("-", "_")
            key, vals = FLAG_ALIASES.get(name, name), []
        elif key is None:
            raise ValueError(f"value {tok!r} before any --flag in {flags!r}")
        else:
            vals.append(_value(tok))
    flush()
    return out


KNOWN_GOOD: tuple[KnownGood, ...] = (
    KnownGood(
        id="K1",
        source=cite("K1"),
        flags="--context-length 131072 --max-running-requests 2 --mem-fraction-static 0.92 "
        "--kv-cache-dtype fp8_e4m3 --page-size 1 --max-mamba-cache-size 6 "
        "--enable-hierarchical-cache --hicache-size 12 --hicache-write-policy write_through "
        "--reasoning-parser qwen3 --tool-call-parser qwen3_coder",
        gpus=("rtx-4080-super-32g",),
        quantization=("awq",),
        engine_version="0.5.17",
    ),
    KnownGood(
        id="K2",
        source=cite("K2"),
        flags="--enable-hierarchical-cache --hicache-size 32 --tp 1 --mem-fraction-static 0.85 "
        "--max-running-requests 1 --context-length 131072",
        gpus=("rtx-pro-4500-32g",),
        quantization=("nvfp4",),
        engine_version="0.5.18",
    ),
    KnownGood(
        id="K3",
        source=cite("K3"),
        flags="--tp-size 2 --quantization gptq --mamba-ssm-dtype bfloat16 --kv-cache-dtype auto "
        "--attention-backend triton --context-length 196608 --mem-fraction-static 0.91 "
        "--max-running-requests 4 --max-mamba-cache-size 20 --speculative-algorithm NEXTN "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
        "--cuda-graph-bs-decode 1 2 4 --chunked-prefill-size 2048 --page-size 64 "
        "--schedule-policy lpm --enable-hierarchical-cache --hicache-ratio 2 "
        "--hicache-io-backend direct --hicache-write-policy write_through",
        gpus=("rx-7900xtx-24g",),
        quantization=("gptq",),
        tp=2,
        note="NEXTN needs MTP weights in the checkpoint",
    ),
    KnownGood(
        id="K4",
        source=cite("K4"),
        flags="--tp-size 2 --kv-cache-dtype fp8_e4m3 --speculative-algorithm DFLASH "
        "--speculative-num-draft-tokens 8 --context-length 200000 --max-total-tokens 185000 "
        "--max-running-requests 4 --cuda-graph-max-bs-decode 4 --mem-fraction-static 0.88 "
        "--mamba-ssm-dtype bfloat16 --mamba-radix-cache-strategy extra_buffer_lazy "
        "--enable-hierarchical-cache --hicache-ratio 2 --hicache-size 15 "
        "--hicache-io-backend direct --hicache-mem-layout page_first_direct "
        "--hicache-write-policy write_through --page-size 64",
        gpus=("rtx-3080-20g",),
        quantization=("awq",),
        tp=2,
        requires=("speculative_draft_model_path",),
        note="DFLASH needs its draft model (DFlash2): give speculative_draft_model_path",
    ),
    KnownGood(
        id="K5",
        source=cite("K5"),
        flags="--tp 2 --kv-cache-dtype fp8_e4m3 --context-length 262144 "
        "--mem-fraction-static 0.88 --max-running-requests 8 --cuda-graph-max-bs 8 "
        "--chunked-prefill-size 4096 --page-size 64 --max-mamba-cache-size 32 "
        "--enable-hierarchical-cache --hicache-ratio 2 --hicache-io-backend direct "
        "--hicache-write-policy write_through --speculative-algorithm NEXTN",
        gpus=("rtx-4080-super-32g",),
        quantization=("fp8_block",),
        tp=2,
        engine_version="0.5.18",
    ),
    KnownGood(
        id="K6",
        source=cite("K6"),
        engine="vllm",
        # the field notes write the speculative config as method=mtp,num_speculative_tokens=2;
        # vLLM takes it as one JSON argument
        flags="--tensor-parallel-size 2 --max-model-len 262144 --max-num-seqs 8 "
        "--max-num-batched-tokens 2048 "
        """--speculative-config '{"method": "mtp", "num_speculative_tokens": 2}' """
        "--enable-chunked-prefill --enable-prefix-caching",
        gpus=("rtx-2080ti-22g",),
        quantization=("gptq", "awq"),
        tp=2,
        note="MTP needs the MTP layer in the checkpoint; measured on a vLLM fork",
    ),
)


# Fields a sweep's target or workload decides (its spec fixes them), not knobs a search turns:
# the context the workload needs, the checkpoint's format, its parsers and draft model, and a
# total-token cap sized to one model on one GPU (FIELD-NOTES P7).
SWEEP_FIELDS = frozenset(
    {
        "context_length",
        "max_model_len",
        "quantization",
        "reasoning_parser",
        "tool_call_parser",
        "enable_auto_tool_choice",
        "speculative_draft_model_path",
        "speculative_model",
        "max_total_tokens",
    }
)


def express(kg: KnownGood, space: SearchSpace) -> tuple[dict[str, Any], list[str]]:
    """`kg` as a point of `space`: (the searched parameters' values, what keeps it from being
    one: a flag the space does not search, a value outside a parameter's domain, a parameter
    set where its condition does not hold). Fields of SWEEP_FIELDS are left to the spec."""
    params: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in kg.config().items():
        if key in SWEEP_FIELDS:
            continue
        if key in space.parameters:
            params[key] = value
        elif key in space.fixed:
            if not same(space.fixed[key], value):
                problems.append(
                    f"{key}: fixed to {space.fixed[key]!r} in the space, {value!r} here"
                )
        else:
            problems.append(f"{key}: not a parameter of the {space.engine} space")
    try:
        space.validate_config(params, source=kg.id)
    except ConfigError as exc:
        problems.append(str(exc))
    return params, problems


class Seed(BaseModel):
    """A known-good configuration considered for one sweep, and what became of it."""

    id: str
    source: str
    config: dict[str, Any]
    enqueued: bool = False
    reason: str | None = Field(None, description="why it was skipped")


def applicable(
    *,
    engine: str,
    gpu: str,
    quantization: str,
    tp: int,
    provided: Mapping[str, Any] | None = None,
    entries: Sequence[KnownGood] = KNOWN_GOOD,
) -> list[Seed]:
    """The entries measured on this engine, GPU, quantization scheme and TP size.

    An entry whose `requires` the target does not provide (in `provided`, the space's fixed
    fields) is returned with `reason` set, so the sweep can say why it was not used.
    """
    out: list[Seed] = []
    for kg in entries:
        if kg.engine != engine or gpu not in kg.gpus or quantization not in kg.quantization:
            continue
        if kg.tp != tp:
            continue
        cfg = kg.config()
        missing = [f for f in kg.requires if (provided or {}).get(f) is None]
        reason = f"needs {', '.join(missing)} ({kg.note})" if missing else None
        out.append(Seed(id=kg.id, source=kg.source, config=cfg, reason=reason))
    return out
