"""A launch record replayed: its log through the engine's parser, its launch through the planner,
and the two compared (benchmarks/fidelity.py prints the set; tests hold the parse to 100%).

The planner is given what the engine itself measured before loading weights when the log states
it (SGLang's `Load weight begin. avail mem=`, or `Load weight end`'s free memory plus its
`mem usage`) and the device total vLLM <= 0.9.2 prints; otherwise it starts from the GPU
catalog's capacity, as it does before a first launch. Either way the weights, the KV cell and the engine's
budget rules are the planner's own. A launch whose GPU is not named (or not in the catalog) but
whose log states that free memory is planned on a stand-in of that size (`stand_in_gpu`):
SGLang's budget is a share of the free memory it measured, and the card's size class only picks
the engine's size-dependent defaults. Such a replay still counts as unstated. A log that states
the free memory after weights only (an excerpt without `Load weight begin`, a release whose end
line prints no `mem usage`) gives it before them as that plus the planner's weights, where the
catalog's capacity cannot stand in: an unnamed GPU, or one whose memory the host shares (CUDA's
free memory there is what the OS has free, whatever else runs on the box). On such a shared pool
SGLang sizes its KV budget from a second reading after the weights, which loses whatever the box
took meanwhile: where the log states both readings, the planner is also given the free memory the
last `Load weight end` ahead of the pool logs (`gpu_free_after_weights_gib`).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.calibration.records import ArgValue, LaunchRecord, PublicRecord
from autotune.errors import AutotuneError

if TYPE_CHECKING:
    from autotune.engines.base import LaunchReport
    from autotune.hardware.gpus import GPUSpec
    from autotune.models.card import ModelCard
    from autotune.planner.common import Plan

_MEM_RE = re.compile(r"(\d+)\s*G(?:i)?B?(?![A-Z0-9])", re.IGNORECASE)


def parse(record: LaunchRecord) -> LaunchReport:
    """The record's startup lines through its engine's parser."""
    if record.engine == "sglang":
        from autotune.engines.sglang.logs import parse_startup

        return parse_startup(record.log)
    from autotune.engines.vllm.logs import parse_startup as parse_vllm

    return parse_vllm(record.log)


# vLLM's default KV block size (CacheConfig) in every release the records span; V0 logs count
# blocks, not tokens.
VLLM_BLOCK_SIZE = 16


def observed_kv_tokens(report: LaunchReport, record: LaunchRecord) -> int | None:
    """The KV pool in tokens as the log states it (V0 vLLM: blocks x block size)."""
    tokens = report.kv_pool_tokens or report.max_total_num_tokens
    blocks = getattr(report, "num_gpu_blocks", None)
    if tokens or not blocks:
        return tokens
    size = record.args.get("block_size") or getattr(report, "block_size", None)
    return int(blocks) * int(size if isinstance(size, int) else VLLM_BLOCK_SIZE)


def gpus_named(record: PublicRecord) -> list[GPUSpec]:
    """Catalog GPUs whose names the record's GPU mentions (A100: the 40 and 80 GB entries)."""
    from autotune.hardware.gpus import GPU_CATALOG

    if record.gpu is None:
        return []
    text = _names(record.gpu)
    return [
        g
        for g in GPU_CATALOG.values()
        if g.vendor == record.gpu_vendor
        and any(_mentions(text, _names(n)) for n in (*g.device_names, g.label))
    ]


def gpu_of(record: PublicRecord) -> GPUSpec | None:
    """The catalog GPU the record names. A longer name it mentions wins over one inside it ('H100
    NVL' over 'H100'); a memory it states picks among the named GPU's variants, the catalog
    entries whose names extend it when within 10% of their memory ('H100 98GB' is no 80 GB H100
    SXM but the 94 GB H100 NVL; '8x H100 640GB' stays the SXM)."""
    from autotune.hardware.gpus import GPU_CATALOG

    hits = gpus_named(record)
    if not hits:
        return None
    text = _names(record.gpu or "")
    said = {g.name: _named(g, text) for g in hits}
    hits = [
        g for g in hits if not any(said[g.name] in t and said[g.name] != t for t in said.values())
    ]
    stated = [int(m) for m in _MEM_RE.findall(record.gpu or "")]
    if stated:
        stems = {f"{said[g.name]} " for g in hits}
        # A variant the text does not name joins only at a stated memory near its own (GB vs
        # GiB and rounding): '8x H100 640GB' (a total) or host RAM must not pick the NVL.
        hits += [
            g
            for g in GPU_CATALOG.values()
            if g not in hits
            and g.vendor == record.gpu_vendor
            and any(_names(n).startswith(stem) for n in g.device_names for stem in stems)
            and any(abs(g.memory_gib - s) <= 0.1 * g.memory_gib for s in stated)
        ]
        return min(hits, key=lambda g: min(abs(g.memory_gib - s) for s in stated))
    stock = [g for g in hits if "modded" not in g.label]
    if len({g.memory_mib for g in stock}) == 1:
        return stock[0]
    return None  # several capacities (A100 40/80 GB) and the record states none


def _names(name: str) -> str:
    return name.upper().replace("-", " ").replace("NVIDIA ", "").replace("GEFORCE ", "")


def _named(g: GPUSpec, text: str) -> str:
    """The longest of the GPU's names that `text` mentions ('' for none)."""
    names = [_names(n) for n in (*g.device_names, g.label)]
    return max((n for n in names if _mentions(text, n)), key=len, default="")


def _mentions(text: str, name: str) -> bool:
    """`name` as a whole word of `text` (A10 is not A100)."""
    return re.search(rf"(?<![A-Z0-9]){re.escape(name)}(?![A-Z0-9])", text) is not None


def _arg(value: ArgValue) -> ArgValue:
    """A mapping the log printed as a Python dict (vLLM's `non-default args`) as JSON text,
    the form the flag takes."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            return json.dumps(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            return value
    return value


def card_of(record: PublicRecord) -> ModelCard | None:
    """The record's card: the one it names, else the committed config card of its model id."""
    from autotune.models.builtin import BUILTIN_CARDS
    from autotune.models.config_cards import config_card

    name = record.card or record.model
    return BUILTIN_CARDS.get(name) or config_card(name)


# Launch inputs the engine has no default for (the launch cannot start without one): unstated,
# there are no defaults to predict from. SGLang's --kt-num-gpu-experts: `kt_num_gpu_experts:
# Optional[int] = None` in server_args.py (0.5.6 .. 0.5.23; no code fills it), which
# KTEPWrapperMethod.create_weights (layers/moe/kt_ep_wrapper.py) passes as the GPU method's
# num_experts (torch.empty of None fails).
NO_DEFAULT: dict[str, frozenset[str]] = {"sglang": frozenset({"kt_num_gpu_experts"})}

# vLLM V0's "Initializing an LLM engine (vX) with config: ..., chunked_prefill_enabled=False, ..."
_V0_CHUNKED = re.compile(r"chunked_prefill_enabled=(True|False)")


@dataclass(frozen=True)
class Replay:
    record: LaunchRecord
    observed: LaunchReport
    plan: Plan | None
    skipped: str | None = None  # why no prediction
    note: str | None = None  # what the prediction assumed beyond the record (a stand-in GPU)
    # The source does not state an input of the launch (its KV dtype, which of a GPU's memory
    # sizes, the record's `unstated` list): no planner could predict it (for the list, the plan
    # is the engine's defaults). A missing card or catalog entry is ours, not this.
    unstated: bool = False

    @property
    def observed_kv(self) -> int | None:
        return observed_kv_tokens(self.observed, self.record)

    @property
    def kv_ratio(self) -> float | None:
        obs = self.observed_kv
        if self.plan is None or not obs:
            return None
        return self.plan.kv_pool_tokens / obs

    @property
    def weights_ratio(self) -> float | None:
        obs = self.observed.weights_gib
        if self.plan is None or not obs:
            return None
        return self.plan.weights_gib / obs


def replay(record: LaunchRecord, *, blind: bool = False) -> Replay:
    """Parse the record and plan its launch (`blind`: ignore the free memory the log states)."""
    from autotune.planner.dispatch import plan_for

    observed = parse(record)
    free = None if blind else observed.free_before_weights_gib  # SGLang logs it; vLLM: None
    # The free memory after weights alone (an excerpt without `Load weight begin`, a release
    # whose end line has no `mem usage`): before = after + the planner's weights (below).
    after = None
    if record.engine == "sglang" and free is None and not blind:
        from autotune.engines.sglang.logs import free_after_weights_gib

        after = free_after_weights_gib(record.log)
    unstated = bool(record.unstated) or record.gpu is None
    note: str | None = None
    if record.gpu is None and free is None and after is None:  # no planner could place it
        return Replay(record, observed, None, "the GPU is not stated", unstated=True)
    card = card_of(record)
    if card is None:
        return Replay(
            record,
            observed,
            None,
            f"no card for {record.card or record.model}",
            unstated=record.gpu is None,
        )
    gpu = gpu_of(record)
    if after is not None and (gpu is None or gpu.unified_memory):
        # Unnamed, or a pool shared with the host (what the OS had free, not the capacity).
        weights = _planned_weights_gib(record, card, gpu or stand_in_gpu(record.gpu_vendor, after))
        if weights is not None:
            free = round(after + weights, 2)
            # The before figure is rebuilt from the planner's own weights: not an input the
            # source states, so the launch counts as unstated (its weights cannot miss the KV).
            unstated = True
            note = (
                f"free memory before weights: {after:.2f} GiB logged after them + "
                f"{weights:.2f} GiB planned weights"
            )
    if gpu is None and free is not None and (record.gpu is None or not gpus_named(record)):
        gpu = stand_in_gpu(record.gpu_vendor, free)
        what = "not stated" if record.gpu is None else f"{record.gpu!r}, not in the catalog"
        note = "; ".join(filter(None, (f"GPU {what}: planned on {gpu.label}", note)))
    if gpu is None:
        if not gpus_named(record):
            return Replay(record, observed, None, f"GPU {record.gpu!r} is not in the catalog")
        return Replay(
            record,
            observed,
            None,
            f"GPU {record.gpu!r}: its memory is not stated and the catalog has several",
            unstated=True,
        )
    total = None if blind else getattr(observed, "total_gpu_gib", None)
    if total:  # vLLM <= 0.9.2 logs the device total (torch's) its budget is a share of
        gpu = gpu.model_copy(update={"memory_mib": round(total * 1024), "driver_reserved_mib": 0})
    if record.kv_cache_dtype is None:
        return Replay(record, observed, None, "the KV cache dtype is not stated", unstated=True)
    missing = sorted(NO_DEFAULT.get(record.engine, frozenset()) & set(record.unstated))
    if missing:
        why = f"{', '.join(missing)} not stated, and the engine has no default for it"
        return Replay(record, observed, None, why, note, unstated=True)
    later = None
    if record.engine == "sglang" and gpu.unified_memory and after is None and not blind:
        from autotune.engines.sglang.logs import free_before_pool_gib

        later = free_before_pool_gib(record.log)
    try:
        plan = plan_for(
            record.engine,
            card,
            gpu,
            _config(record),
            version=record.version,
            tp=record.tp,
            gpu_free_gib=free,
            gpu_free_after_weights_gib=later,
        )
    except AutotuneError as exc:
        return Replay(record, observed, None, f"planner refused: {exc}", note, unstated)
    return Replay(record, observed, plan, note=note, unstated=unstated)


def _config(record: LaunchRecord) -> dict[str, ArgValue]:
    """The launch's config as the planner takes it: the record's args, and what its log or
    layout implies."""
    config = {k: _arg(v) for k, v in record.args.items() if v is not None}
    if record.engine == "sglang" and record.dp > 1 and record.gpu_count == record.tp:
        # DP inside the TP group: SGLang's DP attention (the ranks print DPn TPm).
        config.setdefault("enable_dp_attention", True)
        config.setdefault("dp_size", record.dp)
    if record.kv_cache_dtype not in (None, "auto"):
        config.setdefault("kv_cache_dtype", record.kv_cache_dtype)
    chunked = _V0_CHUNKED.search(record.log)
    if record.engine == "vllm" and chunked:
        # V0's engine-config line states it: entry points such as benchmark_throughput.py pass
        # enable_chunked_prefill=False explicitly, which the long-context default never overrides.
        config.setdefault("enable_chunked_prefill", chunked.group(1) == "True")
    return config


def _planned_weights_gib(record: LaunchRecord, card: ModelCard, gpu: GPUSpec) -> float | None:
    """The weights the planner puts on a rank of the record's launch (they do not depend on the
    card's size); None where the planner refuses the launch (the replay then says why)."""
    from autotune.planner.dispatch import plan_for

    try:
        plan = plan_for(
            record.engine, card, gpu, _config(record), version=record.version, tp=record.tp
        )
    except AutotuneError:
        return None
    return plan.weights_gib


def stand_in_gpu(vendor: str, free_gib: float) -> GPUSpec:
    """A GPU the record does not name, from the free memory its engine measured before the
    weights: the vendor's catalog card whose capacity less the planner's reserve is nearest,
    resized so that capacity less that reserve is the logged free memory (no desktop); a
    stock card, not a modded one, where sizes tie."""
    from autotune.hardware.gpus import GPU_CATALOG
    from autotune.planner.sglang import DEFAULT_RESERVE_MIB

    mib = round(free_gib * 1024) + DEFAULT_RESERVE_MIB
    same = sorted(
        (g for g in GPU_CATALOG.values() if g.vendor == vendor and "modded" not in g.label),
        key=lambda g: g.name,
    )
    if not same:
        raise AutotuneError(f"no catalog GPU of vendor {vendor!r} to stand in")
    like = min(same, key=lambda g: abs(g.memory_mib - mib))
    return like.model_copy(
        update={
            "name": f"unnamed-{vendor}-{mib}m",
            "label": f"a {mib / 1024:.1f} GiB card like {like.label} (free memory from the log)",
            "device_names": (),
            "memory_mib": mib,
            "desktop_reserve_mib": 0,
        }
    )
