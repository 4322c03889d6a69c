"""One entry point to every engine's planner, so callers (the sweep, the report, `autotune plan`,
the service) never name an engine's planner or model format themselves.

What differs per engine is data in `PLANNERS`: how the target model is loaded (SGLang and vLLM
read a ModelCard, llama.cpp a GGUF file's header), which planner prices a configuration, whether
the engine can run without a GPU, and its default version. A target without a GPU is written
`gpu: cpu` (CPU_TARGET); only engines that run on a CPU (llama.cpp) accept it, and
`resolve_target_gpu` returns None for it. GPU names keep going through `resolve_gpu`.

Rules (autotune.space.rules) test target facts (model.*, gpu.*, engine.version). A target states
only what it knows: a GGUF header says whether the model is hybrid but not its quantization
scheme or MTP weights in the ModelCard sense, and a CPU target has no gpu.* facts. `target_facts`
returns those unknown facts too; the sweep skips the rules that test them (rather than deciding
them on made-up values).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from autotune.engines.builds import Followed
from autotune.errors import ConfigError, ModelLoadError, UnknownNameError

if TYPE_CHECKING:
    from autotune.hardware.gpus import GPUSpec
    from autotune.models.card import ModelCard
    from autotune.planner.common import Plan
    from autotune.planner.llamacpp import GGUFModel
    from autotune.space.rules import RuleContext

    TargetModel: TypeAlias = ModelCard | GGUFModel

CPU_TARGET = "cpu"  # `target.gpu` / `--gpu` value for a run with no GPU
SGLANG_DEFAULT_VERSION = "0.5.17"  # FIELD-NOTES C1: the release the measurements were taken on
GPU_FACTS = frozenset({"gpu.name", "gpu.memory_gib", "gpu.arch", "gpu.vendor"})
GGUF_UNKNOWN_FACTS = frozenset({"model.mtp", "model.quantization"})


def _sglang_version() -> str:
    return SGLANG_DEFAULT_VERSION


def _vllm_version() -> str:
    from autotune.engines.vllm.flags import supported_versions

    return supported_versions()[-1]


def _llamacpp_version() -> str:
    from autotune.engines.llamacpp.binary import PINNED_VERSION

    return PINNED_VERSION


@dataclass(frozen=True)
class EnginePlanner:
    """What the planner layer knows about one engine."""

    engine: str
    label: str  # how people write the engine's name
    model_format: Literal["card", "gguf"]
    runs_on_cpu: bool
    default_version: Callable[[], str]


PLANNERS: dict[str, EnginePlanner] = {
    "sglang": EnginePlanner("sglang", "SGLang", "card", False, _sglang_version),
    "vllm": EnginePlanner("vllm", "vLLM", "card", False, _vllm_version),
    "llamacpp": EnginePlanner("llamacpp", "llama.cpp", "gguf", True, _llamacpp_version),
}


def engine_planner(engine: str) -> EnginePlanner:
    try:
        return PLANNERS[engine]
    except KeyError:
        raise UnknownNameError("engine", engine, PLANNERS) from None


def default_version(engine: str) -> str:
    """The version a target of `engine` follows when none is given: SGLang 0.5.17, the newest
    catalogued vLLM release, llama.cpp's pinned build (scripts/build-llama-server)."""
    return engine_planner(engine).default_version()


def engine_label(engine: str) -> str:
    return PLANNERS[engine].label if engine in PLANNERS else engine


def is_cpu_target(gpu: str | None) -> bool:
    return gpu is not None and gpu.strip().lower() == CPU_TARGET


def engine_model_path(model: str) -> str:
    """What the engine is given to load: a home-relative path expanded (an engine gets no shell
    to expand `~`), anything else (a card name, a hub id) as written."""
    return str(Path(model).expanduser()) if model.startswith("~") else model


def resolve_target_gpu(engine: str, gpu: str, *, field: str = "gpu") -> GPUSpec | None:
    """A catalog GPU (or `auto`, detected through NVML), or None for `cpu` where the engine runs
    without a GPU.

    Raises:
        ConfigError: `cpu` for an engine that needs a GPU.
        UnknownNameError, HardwareError: from resolve_gpu.
    """
    ep = engine_planner(engine)
    if is_cpu_target(gpu):
        if not ep.runs_on_cpu:
            cpu_engines = [e for e, p in PLANNERS.items() if p.runs_on_cpu]
            raise ConfigError(
                f"{ep.label} needs a GPU; `{CPU_TARGET}` (no GPU) is a target only for "
                f"{', '.join(cpu_engines)}. Give a catalog GPU name (autotune gpus) or auto",
                field=field,
            )
        return None
    from autotune.hardware.detect import resolve_gpu

    return resolve_gpu(gpu)


def load_target_model(engine: str, model: str) -> TargetModel:
    """What the planner reads for `model` on `engine`: a ModelCard (built-in name or HF folder)
    for SGLang and vLLM; the GGUF file's header for llama.cpp.

    Raises:
        ModelLoadError, UnknownNameError: the model cannot be read.
    """
    ep = engine_planner(engine)
    if ep.model_format == "card":
        from autotune.models.registry import load_card

        return load_card(model)
    from autotune.planner.llamacpp import read_gguf

    path = Path(model).expanduser()
    if not path.is_file():
        raise ModelLoadError(
            f"{model}: {ep.label} loads one GGUF file; no such file (write the test models with "
            "`python -m autotune.testing.gguf_models tiny`)"
        )
    return read_gguf(path)


def _card_of(engine: str, model: TargetModel) -> ModelCard:
    from autotune.models.card import ModelCard

    if not isinstance(model, ModelCard):
        raise ConfigError(
            f"{engine_label(engine)} plans from a model card, got a {type(model).__name__}",
            field="model",
        )
    return model


def _gpu_of(engine: str, gpu: GPUSpec | None) -> GPUSpec:
    if gpu is None:
        raise ConfigError(f"{engine_label(engine)} needs a GPU to plan for", field="gpu")
    return gpu


def plan_for(
    engine: str,
    model: TargetModel | str,
    gpu: GPUSpec | None,
    config: Mapping[str, Any] | None,
    *,
    version: str,
    tp: int = 1,
    gpu_free_gib: float | None = None,
    host_free_gib: float | None = None,
    gpu_free_after_weights_gib: float | None = None,
) -> Plan:
    """Plan one launch of `engine` (`model` loaded, or a name/path loaded here). `gpu` None is a
    CPU run (engines with runs_on_cpu only). The result is the common Plan contract (a VLLMPlan
    or LlamaPlan subclass carries each engine's own figures). `gpu_free_after_weights_gib`:
    SGLang only (planner.sglang.plan_sglang).

    Raises:
        ConfigError: the engine and the target do not go together (no GPU for SGLang, a model
            card for llama.cpp, tp > 1 for llama.cpp), or a bad config value.
    """
    ep = engine_planner(engine)
    target = load_target_model(engine, model) if isinstance(model, str) else model
    cfg = dict(config or {})
    if engine == "llamacpp":
        from autotune.planner.llamacpp import GGUFModel, plan_llamacpp

        if not isinstance(target, GGUFModel):
            raise ConfigError(
                f"{ep.label} plans from a GGUF file, got a {type(target).__name__}", field="model"
            )
        if tp != 1:
            raise ConfigError(
                f"{ep.label} has no tensor parallelism here (tp={tp}); use tp 1", field="tp"
            )
        return plan_llamacpp(
            target,
            cfg,
            version=version,
            gpu=gpu,
            gpu_free_gib=gpu_free_gib,
            host_free_gib=host_free_gib,
        )
    card, spec = _card_of(engine, target), _gpu_of(engine, gpu)
    plan_gpu: Callable[..., Plan]
    if engine == "vllm":
        from autotune.planner.vllm import plan_vllm as plan_gpu
    else:
        from autotune.planner.sglang import plan_sglang as plan_gpu
    after: dict[str, float] = {}
    if gpu_free_after_weights_gib is not None:  # SGLang's second reading (unified memory)
        if engine != "sglang":
            raise ConfigError(
                f"{ep.label} plans take no free memory after weights",
                field="gpu_free_after_weights_gib",
            )
        after["gpu_free_after_weights_gib"] = gpu_free_after_weights_gib
    plan = plan_gpu(
        card,
        spec,
        cfg,
        version=version,
        tp=tp,
        gpu_free_gib=gpu_free_gib,
        host_free_gib=host_free_gib,
        **after,
    )
    from autotune.planner.tp_split import attention_tp, tp_split_problem

    split = tp_split_problem(card, attention_tp(engine, tp, cfg, version))
    if split is not None:  # the engine fails at load whatever the memory says
        plan = plan.model_copy(update={"fits": False, "reasons": [split, *plan.reasons]})
    return plan


def scheduler_plan(plan: Plan) -> Plan:
    """The plan as the roofline perf model and the simulator's scheduler read it: SGLang's
    `speculative` keys. A vLLM plan's SpeculativeConfig (method, num_speculative_tokens) is
    mapped by perf.sglang_speculation (n-gram and suffix lookups to NGRAM, DFlash and DSpark to
    DFLASH, every other draft to the EAGLE family); other plans come back unchanged."""
    spec = plan.speculative or {}
    if "algorithm" in spec or "method" not in spec:
        return plan
    from autotune.planner.perf import sglang_speculation

    return plan.model_copy(update={"speculative": sglang_speculation(spec)})


def followed(engine: str, version: str) -> Followed:
    """The catalogued release an SGLang or vLLM build follows (autotune.engines.builds: a
    nightly, a source build or a release candidate); llama.cpp versions are pinned builds and
    follow themselves.

    Raises:
        ConfigError: a build the catalogue cannot follow, naming --engine-version.
    """
    if engine == "vllm":
        from autotune.engines.vllm.releases import followed_release

        return followed_release(version)
    if engine == "sglang":
        from autotune.engines.sglang.flags import followed_release as sglang_followed

        return sglang_followed(version)
    return Followed(engine=engine, build=version, release=version, kind="release")


def followed_note(engine: str, version: str) -> str | None:
    """What a plan, a starter spec or a sweep says when `version` is a nightly, a release
    candidate or an uncatalogued patch release (autotune.engines.builds); None for a release or
    a version the catalogue does not take (the planner's older releases)."""
    try:
        return followed(engine, version).note()
    except ConfigError:
        return None


def _rule_version(engine: str, version: str) -> str:
    """The version the search space's rules compare: a nightly or a release candidate meets
    the rules of the catalogued release it follows (autotune.engines.builds); a release, a post
    release or a version outside the catalogue (a planner-only older release) as given."""
    try:
        f = followed(engine, version)
    except ConfigError:
        return version
    return version if f.exact else f.release


def target_facts(
    engine: str, model: TargetModel, gpu: GPUSpec | None, version: str, tp: int = 1
) -> tuple[RuleContext, frozenset[str]]:
    """The rule context of a target and the facts it cannot state (rules testing those are
    skipped by the caller). Placeholders fill the unknown facts; nothing may read them."""
    from pydantic import ValidationError

    from autotune.models.card import ModelCard
    from autotune.space.rules import RuleContext

    engine_planner(engine)
    unknown: set[str] = set()
    quant: str
    if isinstance(model, ModelCard):
        hybrid, mtp, quant = model.is_hybrid, model.has_mtp, model.quantization.scheme
    else:
        hybrid, mtp, quant = bool(model.hybrid), False, "unknown"
        unknown |= GGUF_UNKNOWN_FACTS
    if gpu is None:
        unknown |= GPU_FACTS
        name, memory, arch, vendor = CPU_TARGET, 0.0, "none", "none"
    else:
        name, memory, arch, vendor = gpu.name, gpu.memory_gib, gpu.arch, gpu.vendor
    try:
        context = RuleContext(
            model_hybrid=hybrid,
            model_mtp=mtp,
            quantization=quant,
            engine_version=_rule_version(engine, version),
            gpu_name=name,
            gpu_memory_gib=memory,
            gpu_arch=arch,
            gpu_vendor=vendor,
            tp_size=tp,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        field = "engine version" if err["loc"] == ("engine_version",) else "tp"
        raise ConfigError(err["msg"].removeprefix("Value error, "), field=field) from None
    return context, frozenset(unknown)


def plan_target(
    engine: str,
    model: str,
    gpu: str,
    config: Mapping[str, Any],
    *,
    version: str | None = None,
    tp: int = 1,
    gpu_free_gib: float | None = None,
    host_free_gib: float | None = None,
    perf: bool = False,
) -> Plan:
    """`autotune plan` and the service's plan: check the config against the engine version's
    flags (the adapter refuses unknown fields before any arithmetic), load the model, resolve the
    GPU (or `cpu`), plan, and with `perf` add the roofline prediction (model card + GPU only).

    Raises:
        ConfigError, UnknownNameError, UnsupportedFlagError, ModelLoadError: bad input.
    """
    from autotune.engines import get_adapter

    adapter = get_adapter(engine)
    version = version or default_version(engine)
    cfg = dict(config)
    if tp > 1:
        cfg.setdefault("tp_size", tp)
    adapter.build_command(cfg, model=model, version=version)
    target = load_target_model(engine, model)
    spec = resolve_target_gpu(engine, gpu)
    result = plan_for(
        engine,
        target,
        spec,
        cfg,
        version=version,
        tp=tp,
        gpu_free_gib=gpu_free_gib,
        host_free_gib=host_free_gib,
    )
    note = followed_note(engine, version)
    if note is not None:
        result = result.model_copy(update={"assumptions": [note, *result.assumptions]})
    if perf:
        from autotune.models.card import ModelCard
        from autotune.planner.perf import PerfModel, perf_summary

        if not isinstance(target, ModelCard) or spec is None:
            raise ConfigError(
                f"the roofline prediction needs a model card and a GPU; {engine_label(engine)} "
                f"on {gpu} has {'no GPU' if spec is None else 'no model card'}",
                field="perf",
            )
        model_ = PerfModel(target, spec, scheduler_plan(result), config=cfg)
        result = result.model_copy(update={"perf": perf_summary(model_)})
    return result
