"""SGLang's automatic adjustments by version (sglang-internals §1.4, §2.3), resolved before the
memory arithmetic. Each function names the version generation whose behaviour it follows.

Generations: rules change at 0.5.16 (mamba strategy renamed; the padding-aware slot formula:
FIELD-NOTES C1 on 0.5.17 gives 34 slots only with it) and at 0.5.20 (cuda-graph flags split,
new GPU-size defaults, draft KV budgeted in the cell). The `auto` mamba strategy follows the
wheels: from 0.5.14 extra_buffer when overlap or pages > 1 are wanted and the architecture is
one SGLang buffers (EXTRA_BUFFER_SINCE) on the Triton linear backend, else no_buffer with
overlap off. C1 (0.5.17, the text-only Qwen3_5ForCausalLM pack, which joined the list only in
0.5.19; page 1) therefore ran no_buffer, and K5 (0.5.18, page 64) the buffered cache. The mamba
rework that added extra_buffer_lazy and the hybrid-cache errors landed in 0.5.13 (flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.planner import rocm_backend, sglang_dp
from autotune.planner.sglang_graphs import (
    GraphFacts,
    prefill_graph_reserve_mib,
    prefill_graph_tokens,
)

SPEC_EAGLE_FAMILY = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "MTP"}

# The release each architecture joined SGLang's extra_buffer list (0.5.14:
# ServerArgs._support_mamba_cache_extra_buffer; 0.5.15+: arg_groups/overrides.py
# _MAMBA_EXTRA_BUFFER_ARCHS); tests/planner/test_sglang_history_wheels.py reads each wheel's.
EXTRA_BUFFER_SINCE: dict[str, tuple[int, int, int]] = {
    **dict.fromkeys(
        (
            "BailingMoeV2_5ForCausalLM",
            "FalconH1ForCausalLM",
            "GraniteMoeHybridForCausalLM",
            "InternS2PreviewForConditionalGeneration",
            "MiniCPMV4_6ForConditionalGeneration",
            "NemotronHForCausalLM",
            "NemotronHPuzzleForCausalLM",
            "Qwen3NextForCausalLM",
            "Qwen3_5ForConditionalGeneration",
            "Qwen3_5MoeForConditionalGeneration",
        ),
        (0, 5, 14),
    ),
    "KimiLinearForCausalLM": (0, 5, 16),
    "KimiK3ForConditionalGeneration": (0, 5, 17),
    **dict.fromkeys(
        ("BailingMoeV3ForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"), (0, 5, 19)
    ),
    **dict.fromkeys(
        (
            "Glm5NextForConditionalGeneration",
            "NemotronH_Omni_Reasoning_V3",
            "Qwen4ExpForConditionalGeneration",
        ),
        (0, 5, 20),
    ),
    **dict.fromkeys(
        (
            "BailingMoeV3VLForConditionalGeneration",
            "InklingForConditionalGeneration",
            "InklingForConditionalGenerationMTP",
        ),
        (0, 5, 21),
    ),
    "MiniCPMV4_7ForConditionalGeneration": (0, 5, 23),
}


def extra_buffer_archs(v: tuple[int, int, int]) -> frozenset[str]:
    """The architectures whose `auto` mamba strategy may resolve to extra_buffer at `v`."""
    return frozenset(a for a, since in EXTRA_BUFFER_SINCE.items() if v >= since)


def parse_version(version: str) -> tuple[int, int, int]:
    """The SGLang release `version` names, as (0, 5, N): the flag catalog's parser
    (autotune.engines.sglang.flags.parse_version), so `plan` accepts what the flags accept
    (`0.5.15.post1` included).

    Raises:
        ConfigError: outside 0.5.9 .. 0.5.23, naming --engine-version.
    """
    from autotune.engines.sglang.flags import parse_version as sglang_version

    return sglang_version(version)


def planning_version(version: str) -> tuple[int, int, int]:
    """parse_version, and also the releases before the flag catalog that the planner models
    from their own wheels (0.1.17 .. 0.5.8, planner.sglang_history and sglang_early), so older
    public launch logs can be replayed; launching still needs a catalogued release."""
    from autotune.planner import sglang_early, sglang_history

    rel = sglang_history.release(version)
    if rel is not None and sglang_history.is_history(version):
        return (0, rel[0], rel[1])
    if rel is not None and rel < sglang_early.FIRST:
        from autotune.errors import ConfigError

        raise ConfigError(
            f"SGLang {version} is older than the releases the planner models (0.1.17 .. 0.5.23; "
            "launching needs 0.5.9 .. 0.5.23)",
            field="--engine-version",
        )
    return parse_version(version)


@dataclass(frozen=True)
class Resolved:
    """The values SGLang would run with after its own adjustments."""

    chunked_prefill_size: int
    cuda_graph_max_bs: int
    mem_fraction_static: float
    mfs_was_default: bool
    max_running_requests: int | None  # None: SGLang derives it from the pool
    spec_algorithm: str | None
    spec_steps: int
    spec_topk: int
    spec_draft_tokens: int
    mamba_strategy: str  # no_buffer / extra_buffer / extra_buffer_lazy
    radix_cache: bool
    overlap: bool
    mixed_chunk: bool
    page_size: int
    context_len: int
    notes: tuple[str, ...]
    mamba_full_memory_ratio: float = 0.9  # the default; 0.2 in 0.5.3.post2
    dp_attention: int = 1  # the DP-attention size (1: off; planner.sglang_dp)
    prefill_graph_tokens: int = 0  # the largest prefill forward replayed from a graph (0: none)


def gpu_size_defaults(gpu_mem_mib: int, tp: int, v: tuple[int, int, int]) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU memory (§1.4 table)."""
    new = v >= (0, 5, 20)
    g = gpu_mem_mib
    if g < 20 * 1024:
        return 2048, 8
    if g < 35 * 1024:
        return (4096, 48 if tp < 4 else 160) if new else (2048, 24 if tp < 4 else 80)
    if g < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if g < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def default_mem_fraction(
    gpu_mem_mib: int,
    cps: int,
    max_bs: int,
    tp: int,
    spec: str | None,
    v: tuple[int, int, int],
    vision_factor: float | None,
    dp_attention: int = 1,
    graph_mib: float = 0.0,
) -> float:
    """SGLang's mem_fraction_static heuristic when the flag is not given (§1.4);
    `dp_attention`: the DP-attention size (1: off); `graph_mib`: the prefill (piecewise) CUDA
    graph's reserve (planner.sglang_graphs), before the 10 GiB floor."""
    from autotune.planner.sglang_history import dp_attention_reserve_mib

    reserved = 512 + max(cps, 2048) * 1.5 + max_bs * 2 + tp / 8 * 1024
    reserved += dp_attention_reserve_mib(dp_attention, max_bs) + graph_mib
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    reserved += speculative_reserve_mib(spec, v)
    mfs = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    if vision_factor is not None:
        mfs = round(mfs * vision_factor, 3)
    return mfs


def speculative_reserve_mib(spec: str | None, v: tuple[int, int, int]) -> int:
    """What the heuristic holds back for a draft model and its graphs: 6 GiB for STANDALONE,
    2 GiB (0.5.9) or 4 GiB (0.5.10 .. 0.5.13) for the other draft models, none for NGRAM; from
    0.5.14 nothing, as the draft's weights are loaded before the target profiles and come out
    of the static budget (server_args._handle_gpu_memory_settings; planner.sglang_draft)."""
    if spec is None or spec == "NGRAM" or v >= (0, 5, 14):
        return 0
    if spec == "STANDALONE":
        return 6 * 1024
    return 2 * 1024 if v < (0, 5, 10) else 4 * 1024


def vision_mfs_factor(vit_layers: int, vit_hidden: int) -> float:
    """Multimodal down-scaling of the default mem fraction (§1.4). Qwen3.5 vision configs name
    depth rather than num_hidden_layers, so SGLang reads 24 layers for them."""
    ratio = vit_layers * vit_hidden**2 / (24 * 1024**2)
    return 0.95 * min(max(1 - 0.1 * (ratio - 1), 0.8), 1.05)


def resolve(
    config: dict[str, Any],
    *,
    gpu_mem_mib: int,
    tp: int,
    hybrid: bool,
    version: str,
    context_default: int,
    vision_factor: float | None,
    amd_instinct: bool = False,
    architecture: str = "",
    dsa: bool = False,
    mla: bool = False,
    hip: bool = False,
    kv_heads: int = 0,
    sliding: bool = False,
) -> Resolved:
    """`dsa`: the model has DeepSeek's sparse-attention indexer (NSA in SGLang's terms); `mla`:
    latent attention (SGLang's MLA backend); `hip`: a ROCm device; `kv_heads`: the config's
    num_key_value_heads, which picks an MLA model's ROCm backend (planner.rocm_backend);
    `sliding`: sliding-window layers, which some ROCm backend fills need."""
    v = planning_version(version)
    notes: list[str] = []
    spec = speculative_algorithm(config)
    mrr_user = config.get("max_running_requests")
    mfs_cfg = config.get("mem_fraction_static")
    from autotune.planner.sglang_history import release

    rel = release(version)
    dp = sglang_dp.attention_dp_size(config, tp, rel)
    graph_tokens = 0
    if v < (0, 5, 9):
        cps, max_bs, mfs = _history_memory(
            config, version, gpu_mem_mib, tp, spec, vision_factor, dp
        )
        fixed = _nsa_fixed_mem_fraction(version, architecture, dsa)
        if fixed is not None:
            mfs, mfs_cfg = fixed, fixed
            notes.append(f"0.5.3: DeepSeek NSA model: mem_fraction_static fixed at {fixed}")
    else:
        graph = GraphFacts(architecture, mla, vision_factor is not None, hip, dsa)
        cps, max_bs, mfs = _memory(config, v, gpu_mem_mib, tp, spec, vision_factor, dp, graph)
        graph_tokens = prefill_graph_tokens(config, v, cps, graph)
    steps, topk, draft = speculative_shape(config, spec)
    mixed, overlap, radix, mrr = scheduler_switches(config, spec, mrr_user, v, notes)
    # DP attention's own adjustments, after the memory defaults are set (planner.sglang_dp).
    cps, max_bs, overlap = sglang_dp.adjusted(cps, max_bs, overlap, dp, rel)
    page = int(config.get("page_size") or 1)
    strategy, overlap, radix = mamba_strategy(
        config,
        hybrid=hybrid,
        page=page,
        spec=spec,
        overlap=overlap,
        radix=radix,
        v=v,
        notes=notes,
        architecture=architecture,
    )
    if hybrid and v < (0, 5, 9) and radix:
        from autotune.planner import sglang_history as history

        if history.mamba_radix_forced_off(history.release(version) or history.FIRST):
            radix = False
            notes.append("0.5.2 .. 0.5.3.post1: radix cache off for hybrid models")
    context = int(config.get("context_length") or context_default)
    # An unset backend is aiter only for some models (planner.rocm_backend).
    default_aiter = config.get("attention_backend") is not None or (
        rocm_backend.default_backend_is_aiter(
            architecture=architecture,
            dsa=dsa,
            mla=mla,
            kv_heads=kv_heads,
            tp=tp,
            spec=spec,
            v=v,
            rel=rocm_backend.release_of(version, v),
            sliding=sliding,
        )
    )
    aiter = (
        rocm_backend.aiter_factor(config, version, v, context)
        if amd_instinct and default_aiter
        else None
    )
    if aiter is not None:
        mfs *= aiter
        notes.append(f"aiter attention (ROCm) with context > 8192: mem_fraction_static x{aiter}")
    return Resolved(
        chunked_prefill_size=cps,
        cuda_graph_max_bs=max_bs,
        mem_fraction_static=mfs,
        mfs_was_default=mfs_cfg is None,
        max_running_requests=mrr,
        spec_algorithm=spec,
        spec_steps=steps,
        spec_topk=topk,
        spec_draft_tokens=draft,
        mamba_strategy=strategy,
        radix_cache=radix,
        overlap=overlap,
        mixed_chunk=mixed,
        page_size=page,
        context_len=context,
        notes=tuple(notes),
        dp_attention=dp,
        mamba_full_memory_ratio=_mamba_ratio(version, v),
        prefill_graph_tokens=graph_tokens,
    )


# The architectures 0.5.3's is_deepseek_nsa names (with index_topk in the config: `dsa`).
NSA_ARCHITECTURES = frozenset({"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"})


def _nsa_fixed_mem_fraction(version: str, architecture: str, dsa: bool) -> float | None:
    if not dsa or architecture not in NSA_ARCHITECTURES:
        return None
    from autotune.planner import sglang_history as history

    rel = history.release(version)
    return None if rel is None else history.nsa_fixed_mem_fraction(rel)


def _memory(
    config: dict[str, Any],
    v: tuple[int, int, int],
    gpu_mem_mib: int,
    tp: int,
    spec: str | None,
    vision_factor: float | None,
    dp_attention: int = 1,
    graph: GraphFacts | None = None,
) -> tuple[int, int, float]:
    """(chunked_prefill_size, cuda_graph_max_bs, mem_fraction_static): the user's, else the
    GPU-size defaults and the mem-fraction heuristic (§1.4), with the prefill graph's reserve
    for the model `graph` describes."""
    cps_default, bs_default = gpu_size_defaults(gpu_mem_mib, tp, v)
    cps = int(config.get("chunked_prefill_size") or cps_default)
    max_bs = graph_max_bs(config, bs_default, config.get("max_running_requests"), v)
    mfs_cfg = config.get("mem_fraction_static")
    if mfs_cfg is not None:
        return cps, max_bs, float(mfs_cfg)
    graph_mib = prefill_graph_reserve_mib(config, v, cps, graph or GraphFacts())
    mfs = default_mem_fraction(
        gpu_mem_mib, cps, max_bs, tp, spec, v, vision_factor, dp_attention, graph_mib
    )
    return cps, max_bs, mfs


def _mamba_ratio(version: str, v: tuple[int, int, int]) -> float:
    if v >= (0, 5, 9):
        return 0.9
    from autotune.planner import sglang_history as history

    return history.mamba_full_memory_ratio(history.release(version) or history.FIRST)


def _history_memory(
    config: dict[str, Any],
    version: str,
    gpu_mem_mib: int,
    tp: int,
    spec: str | None,
    vision_factor: float | None,
    dp_attention: int = 1,
) -> tuple[int, int, float]:
    """(chunked_prefill_size, cuda_graph_max_bs, mem_fraction_static) as a release before
    0.5.9 resolves them (planner.sglang_history)."""
    from autotune.planner import sglang_history as history

    rel = history.release(version) or history.FIRST
    cps_default, bs_default = history.gpu_size_defaults(rel, gpu_mem_mib, tp)
    cps = int(config.get("chunked_prefill_size") or cps_default)
    max_bs = int(config.get("cuda_graph_max_bs") or bs_default)
    mfs_cfg = config.get("mem_fraction_static")
    if mfs_cfg is None:
        mfs = history.default_mem_fraction(rel, gpu_mem_mib, tp, cps, max_bs, spec, dp_attention)
    else:
        mfs = float(mfs_cfg)
    if vision_factor is not None:
        factor = history.vision_factor(rel, mfs_cfg is not None, vision_factor)
        mfs = mfs * factor if factor is not None else mfs
    return cps, max_bs, mfs


def graph_max_bs(
    config: dict[str, Any], bs_default: int, mrr_user: Any, v: tuple[int, int, int]
) -> int:
    """The largest CUDA-graph batch size: the largest of a given list (SGLang overwrites
    max_bs with it in every release), the user's, else the GPU-size default (§1.4)."""
    sizes = config.get("cuda_graph_bs_decode") or config.get("cuda_graph_bs")
    if isinstance(sizes, list | tuple) and sizes:
        return int(max(sizes))
    max_bs = config.get("cuda_graph_max_bs_decode") or config.get("cuda_graph_max_bs")
    if max_bs is None:
        max_bs = bs_default
        if v >= (0, 5, 20) and mrr_user:
            max_bs = min(max_bs, int(mrr_user))  # 0.5.2x caps graph bs to mrr
    return int(max_bs)


def speculative_algorithm(config: dict[str, Any]) -> str | None:
    """The speculative algorithm in upper case, None for none."""
    spec = config.get("speculative_algorithm")
    return str(spec).upper() if spec not in (None, "", "none", "None") else None


def speculative_shape(config: dict[str, Any], spec: str | None) -> tuple[int, int, int]:
    """(num_steps, eagle_topk, num_draft_tokens) SGLang runs `spec` with."""
    steps = config.get("speculative_num_steps")
    topk = config.get("speculative_eagle_topk")
    draft = config.get("speculative_num_draft_tokens")
    if spec is None:
        steps, topk, draft = 0, 0, 0
    elif spec in ("DFLASH", "DSPARK"):
        steps, topk = 1, 1
        draft = int(draft or 16)
    else:
        steps, topk = int(steps or 3), int(topk or 1)
        draft = steps + 1 if topk == 1 and spec != "NGRAM" else int(draft or steps + 1)
    return int(steps), int(topk), int(draft)


def scheduler_switches(
    config: dict[str, Any],
    spec: str | None,
    mrr_user: Any,
    v: tuple[int, int, int],
    notes: list[str],
) -> tuple[bool, bool, bool, int | None]:
    """(mixed_chunk, overlap, radix_cache, max_running_requests) after speculative decoding's
    adjustments (noted in `notes`)."""
    mixed = bool(config.get("enable_mixed_chunk") or False)
    overlap = not bool(config.get("disable_overlap_schedule") or False)
    radix = not bool(config.get("disable_radix_cache") or False)
    mrr = int(mrr_user) if mrr_user is not None else None
    if spec is not None:
        if mrr is None:
            mrr = 48
            notes.append("speculative decoding: max_running_requests reset to 48")
        if mixed:
            notes.append("speculative decoding: mixed chunked prefill switched off by SGLang")
        mixed = False
        if spec == "NGRAM" or v < (0, 5, 16):
            overlap = False
    return mixed, overlap, radix, mrr


def mamba_strategy(
    config: dict[str, Any],
    *,
    hybrid: bool,
    page: int,
    spec: str | None,
    overlap: bool,
    radix: bool,
    v: tuple[int, int, int],
    notes: list[str],
    architecture: str = "",
) -> tuple[str, bool, bool]:
    """(mamba strategy, overlap, radix_cache): `auto` resolved by generation (module docstring),
    and what no_buffer switches off (noted in `notes`); "n/a" for a model without mamba layers."""
    strategy = str(
        config.get("mamba_radix_cache_strategy")
        or config.get("mamba_scheduler_strategy")
        or "auto"
    )
    if hybrid:
        # the buffered strategies need the Triton GDN kernels (supports_mamba_cache_extra_buffer)
        triton_gdn = config.get("linear_attn_backend") in (None, "triton")
        if strategy == "auto" and not triton_gdn:
            strategy = "no_buffer"
        if strategy == "auto":
            # 0.5.14+: buffered when overlap or paging is wanted on an architecture SGLang
            # buffers. Pages > 1 on 0.5.13, or on an architecture outside its radix-cache
            # resolution, are kept buffered as before (K5 ran page 64 with `auto` on 0.5.18).
            buffers = v >= (0, 5, 14) and architecture in extra_buffer_archs(v)
            if (buffers and overlap) or (page > 1 and v >= (0, 5, 13)):
                strategy = "extra_buffer"
            else:
                strategy = "no_buffer"
        if strategy == "no_buffer":
            if radix and spec is None and overlap:
                overlap = False
                notes.append("mamba no_buffer: overlap schedule disabled")
            if spec is not None and radix and v < (0, 5, 16):
                radix = False
                notes.append("0.5.9-era: radix cache disabled for speculative hybrid model")
    else:
        strategy = "n/a"
    return strategy, overlap, radix


def slots_per_request(r: Resolved, v: tuple[int, int, int]) -> int:
    """Mamba state slots a running request needs: the cap is N // ratio (§2.3)."""
    if not r.radix_cache:
        return 1
    if r.mamba_strategy == "no_buffer":
        return 3
    if r.mamba_strategy == "extra_buffer_lazy":
        return 4
    if v < (0, 5, 16):
        return 4 if r.spec_algorithm else 5
    return 3 + (2 if r.overlap else 1)
