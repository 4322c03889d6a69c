"""Predict what an SGLang launch gets on one GPU, and whether it fits (sglang-internals §2).

Mirrors the engine's own accounting per rank:

    pre   = free GiB before weights (capacity - reserve, or --gpu-free-gib)
    rest  = pre * mem_fraction_static - weights          # static budget after weights
    mamba = (N + 1) * per_slot  [+ speculative intermediate state]
    kv    = floor((rest - mamba) / cell / page) * page
    slack = pre * (1 - mem_fraction_static)  must hold activations, CUDA graphs, draft model

Calibrated against FIELD-NOTES C1 (tests/planner/test_sglang.py).

Here: the budget, the KV pool, concurrency and the slack. Beside it: the mamba state cache
(sglang_mamba; mamba_slot_bytes importable from here too), the HiCache host pools
(sglang_hicache), SGLang's own adjustments of the config (rules), and what the planners share
(common: the Plan contract, GIB, MIB and weights_per_rank, importable from here too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.engines.sglang.flags import followed_release
from autotune.hardware.gpus import GPUSpec
from autotune.models.card import ModelCard
from autotune.models.config_cards import card_with_overrides
from autotune.planner import rules, sglang_draft, sglang_dtype, sglang_early, sglang_history
from autotune.planner.common import (
    GIB,
    MIB,
    Plan,
    PlanWorking,
    weights_per_rank,
)
from autotune.planner.rocm_backend import exaone_backend_check, release_of
from autotune.planner.sglang_alloc import load_overhead_bytes
from autotune.planner.sglang_comm import comm_split
from autotune.planner.sglang_dp import attention_dp_size, dp_attention_weights, per_rank_requests
from autotune.planner.sglang_fusion import fusion_extra_bytes
from autotune.planner.sglang_hicache import HostPool, host_pool
from autotune.planner.sglang_kt import kt_card
from autotune.planner.sglang_kv import (
    KV_DTYPE_BYTES,
    kv_cell_bytes,
    pool_cell_bytes,
    resolve_kv_dtype,
)
from autotune.planner.sglang_mamba import (
    MambaPool,
    mamba_page_size_checks,
    mamba_pool,
    mamba_slot_bytes,
)
from autotune.planner.sglang_mla import absorbed_bytes
from autotune.planner.sglang_offload import host_budget_bytes, offload_card
from autotune.planner.sglang_requests import pool_estimate, user_requests
from autotune.planner.sglang_swa import check_global_attention, hybrid_by_architecture, swa_pools
from autotune.planner.sglang_vision import vision_split_saving
from autotune.sources import cite

__all__ = [
    "ACT_TENSORS_FACTOR",
    "DEFAULT_RESERVE_MIB",
    "GIB",
    "GRAPH_BASE_MIB",
    "GRAPH_PER_BS_MIB",
    "KV_DTYPE_BYTES",
    "MIB",
    "Plan",
    "StaticBudget",
    "kv_cell_bytes",
    "pool_cell_bytes",
    "mamba_slot_bytes",
    "plan_sglang",
    "slack_needed_bytes",
    "weights_per_rank",
]

# Free memory before weights = capacity - reserve. 760 MiB is the CUDA context, cuBLAS/NCCL
# workspaces and torch's allocator at init; GeForce cards add the desktop's share (F3: ~80 MB).
# FIELD-NOTES C1 implies 0.82 GiB in total on the 4080 SUPER (760 + 80 MiB = 0.82 GiB).
DEFAULT_RESERVE_MIB = 760
# Activation workspace per prefill token, in units of the widest per-token tensors (gate_up out,
# hidden, qkv/qkvz), x2 for the temporaries held beside them; and CUDA graph memory per captured
# batch size. Together ~0.9 GiB for C1 (peak 31,114 of 32,760 MiB at mfs 0.92).
ACT_TENSORS_FACTOR = 2.0
GRAPH_BASE_MIB = 256
GRAPH_PER_BS_MIB = 2.0


def slack_needed_bytes(card: ModelCard, r: rules.Resolved) -> int:
    la = card.linear_attention
    widths = 2 * card.intermediate_size + 2 * card.hidden_size
    if la is not None:
        widths += (
            2 * la.num_key_heads * la.key_head_dim + 2 * la.num_value_heads * la.value_head_dim
        )
    act = int(max(r.chunked_prefill_size, 1) * widths * 2 * ACT_TENSORS_FACTOR)
    graphs = int((GRAPH_BASE_MIB + GRAPH_PER_BS_MIB * r.cuda_graph_max_bs) * MIB)
    return act + graphs


@dataclass(frozen=True)
class StaticBudget:
    """One rank's memory as mem_fraction_static splits it (module docstring): `pre` before
    weights, `rest` left of the static part after weights, `slack` outside the static part."""

    pre_gib: float
    weights_gib: float
    mem_fraction_static: float
    comm_gib: float = 0.0  # NCCL memory set up after SGLang's free-memory reading (sglang_comm)
    draft_gib: float = 0.0  # a separate draft's weights, loaded before the target profiles
    transient_gib: float = 0.0  # held while the target profiles, freed before the graphs
    others_gib: float = 0.0  # taken by other processes from a unified pool while weights load

    @property
    def rest_gib(self) -> float:
        static = self.pre_gib * self.mem_fraction_static
        taken = self.weights_gib + self.comm_gib + self.draft_gib + self.transient_gib
        return static - taken - self.others_gib

    @property
    def slack_gib(self) -> float:
        return self.pre_gib * (1 - self.mem_fraction_static) + self.transient_gib


def _catalogued_build(version: str, v: tuple[int, int, int]) -> str:
    """A release candidate or a nightly of a catalogued 0.5.N is planned as that release, as its
    flags are (autotune.engines.builds); releases, post releases and the planner's older
    releases keep their own version."""
    if v < (0, 5, 9):
        return version
    followed = followed_release(version)
    return version if followed.exact else followed.release


def plan_sglang(
    card: ModelCard,
    gpu: GPUSpec,
    config: dict[str, Any] | None = None,
    *,
    version: str = "0.5.17",
    tp: int = 1,
    gpu_free_gib: float | None = None,
    host_free_gib: float | None = None,
    gpu_free_after_weights_gib: float | None = None,
) -> Plan:
    """Plan one launch. `config` holds SGLang field names; missing keys mean "engine decides".
    `gpu_free_gib`: the free memory SGLang reads before weights, where known (else capacity less
    the reserve); `gpu_free_after_weights_gib`: its reading after them, on a GPU whose memory the
    host shares (what the box took meanwhile leaves the KV budget; ignored on a discrete GPU).

    Raises:
        ConfigError: a model whose global attention layers have their own geometry (Gemma 4)
            where the release gives it one pool (before 0.5.11, or hybrid SWA memory off); config
            overrides (json_model_override_args) for a card without a committed config.
    """
    cfg = dict(config or {})
    # --json-model-override-args: SGLang builds the model from the config with them merged.
    card = card_with_overrides(card, cfg.get("json_model_override_args"))
    v = rules.planning_version(version)
    version = _catalogued_build(version, v)
    by_arch = hybrid_by_architecture(card, v, cfg, gpu.arch)
    check_global_attention(card, by_arch)
    assumptions: list[str] = []
    reasons: list[str] = []
    card = sglang_dtype.launch_card(card, cfg, version, assumptions)
    card = sglang_early.mha_card(card, sglang_history.release(version), cfg, assumptions)
    card = kt_card(card, cfg, v, reasons, assumptions)
    exaone_backend_check(card, cfg, release_of(version, v), gpu.vendor == "amd", reasons)
    card = offload_card(card, cfg, v, tp, assumptions)
    draft = sglang_draft.dflash_draft(cfg, v, assumptions)
    r = _resolve_launch(card, gpu, cfg, version, tp, assumptions)
    pre = _free_before_weights_gib(gpu, gpu_free_gib, assumptions)
    logged = gpu_free_gib is not None
    comm = comm_split(
        gpu, tp, version, pre_logged=logged, mem_fraction_static=r.mem_fraction_static
    )
    if comm.before_reading_gib:
        pre -= comm.before_reading_gib
        assumptions.append(
            f"NCCL at TP {tp} takes {comm.before_reading_gib:.2f} GiB before weights"
        )
    eagle = _eagle_draft(card, cfg, r, reasons)
    # DP attention splits the attention heads over tp / dp ranks (get_attention_tp_size).
    rel = sglang_history.release(version)
    attn_tp = max(tp // attention_dp_size(cfg, tp, rel), 1)
    weights = weights_per_rank(card, tp, load_mtp=False)
    weights += load_overhead_bytes(card, tp, gpu.vendor, v, host_budget_bytes(cfg, v))
    dp_head = bool(cfg.get("enable_dp_lm_head"))
    weights += dp_attention_weights(card, tp, attn_tp, rel, dp_lm_head=dp_head)
    weights -= vision_split_saving(card, cfg, rel, attn_tp)
    weights += absorbed_bytes(card, attn_tp, gpu.vendor, rel)
    weights += fusion_extra_bytes(card, gpu, cfg, tp, rel, assumptions)
    head = sglang_draft.eagle_draft(card, cfg, eagle, assumptions)  # a separate EAGLE head
    sep = draft or head
    # the draft's weights: a separate model (DFLASH, EAGLE), or the MTP head an EAGLE draft loads
    draft_bytes = sep.weights_per_rank(tp) if sep else card.weights.mtp // tp if eagle else 0
    static_draft = draft_bytes if sglang_draft.draft_weights_static(v) else 0
    held = sglang_draft.mtp_own_head_bytes(card, cfg, eagle, tp, v, head)
    if held:
        assumptions.append(
            f"the draft's own embedding and LM head ({held / GIB:.2f} GiB a rank) are "
            "held while the target sizes its KV pool, then freed"
        )
    budget = StaticBudget(
        pre,
        weights / GIB,
        r.mem_fraction_static,
        comm.after_reading_gib,
        static_draft / GIB,
        held / GIB,
        # a draft loaded before the pool reads after its own weights and held heads
        _others_gib(
            gpu,
            pre,
            (weights + static_draft + held) / GIB,
            gpu_free_after_weights_gib,
            assumptions,
        ),
    )
    kv_dtype = resolve_kv_dtype(card, cfg.get("kv_cache_dtype"), gpu, v)
    # The DSA indexer key joined the cell SGLang divides its budget by in 0.5.3.post1 (sglang
    # PR #11309); before, the pool held it beyond the budget.
    indexer_in_cell = rel is None or rel >= (5, 3, 1)
    mtp_in_cell = eagle and sglang_draft.mtp_kv_in_cell(card, cfg, v, assumptions)
    v_head = v >= (0, 5, 7)
    target_cell = kv_cell_bytes(card, kv_dtype, attn_tp, v_head=v_head, indexer=indexer_in_cell)
    cell = sglang_draft.mtp_cell(target_cell, card, mtp_in_cell, assumptions, head)
    host_cell = sglang_draft.mtp_host_cell(target_cell, card, cfg, eagle, v)
    swa = swa_pools(
        card,
        KV_DTYPE_BYTES[kv_dtype],
        attn_tp,
        v,
        cfg.get("swa_full_tokens_ratio"),
        by_architecture=by_arch,
    )
    if swa is not None:  # window layers with their own shape: SGLang's two pools
        cell = host_cell = swa.cell
    draft_b = sglang_draft.draft_kv_bytes(cfg, KV_DTYPE_BYTES[kv_dtype], v, KV_DTYPE_BYTES)
    own_cell = sglang_draft.own_draft_cell(sep, card, eagle, target_cell, attn_tp, draft_b)
    # a separate draft's pool the slack pays, per full-pool token: an EAGLE head's off the cell
    slack_draft_cell = own_cell if head is not None and not mtp_in_cell else 0
    if draft is not None:  # the host pool stays on the target's cell (sglang_draft)
        if swa is not None:
            swa, slack_draft_cell = sglang_draft.dflash_swa(swa, draft, attn_tp, draft_b, v)
            cell = swa.cell
        else:
            cell = sglang_draft.dflash_cell(cell, card, draft, attn_tp, draft_b, v)
    over = pool_cell_bytes(card, kv_dtype, attn_tp, v_head=v_head) - kv_cell_bytes(
        card, kv_dtype, attn_tp, v_head=v_head, indexer=indexer_in_cell
    )
    mamba = mamba_pool(card, cfg, r, v, tp, budget.rest_gib, reasons, assumptions)
    mamba_page_size_checks(card, r, reasons)
    kv_tokens = _kv_pool_tokens(cfg, r, budget, mamba, cell, reasons)
    if swa is not None:
        kv_tokens = swa.full_tokens(kv_tokens, r.page_size)
    kv_tokens += _history_extra_tokens(version, r, kv_tokens)
    mrr, bound = _max_running_requests(card, r, kv_tokens, mamba, version, cfg.get("max_num_reqs"))
    from_slack = draft_bytes - static_draft + kv_tokens * slack_draft_cell
    mtp_slack = eagle and not mtp_in_cell
    need = _slack_needed(card, r, mtp_slack, kv_tokens, cell, budget, reasons, over, from_slack)
    if r.context_len > card.max_position_embeddings:
        assumptions.append(
            f"context_length {r.context_len} exceeds the model's {card.max_position_embeddings}"
        )
    host = HostPool(host_free_gib)
    if cfg.get("enable_hierarchical_cache"):
        host = host_pool(
            cfg,
            card,
            v,
            kv_tokens,
            host_cell,
            mamba,
            r.page_size,
            host_free_gib,
            reasons,
            assumptions,
            sglang_draft.host_draft_cell(
                cfg, v, sep, own_cell, target_cell, swa is not None, (reasons, assumptions)
            ),
        )
    return Plan(
        weights_gib=round(budget.weights_gib, 3),
        kv_cell_bytes=cell,
        kv_pool_tokens=max(kv_tokens, 0),
        mamba_slots=max(mamba.slots, 0),
        mamba_pool_gib=round(mamba.pool_bytes / GIB, 3),
        max_running_requests=mrr,
        fits=not reasons,
        reasons=reasons,
        host_pool_tokens=host.tokens,
        engine_version=version,
        model=card.name,
        gpu=gpu.name,
        tp=tp,
        kv_dtype=kv_dtype,
        bound_by=bound,
        assumptions=assumptions,
        **_working_fields(card, r, budget, cell + over, kv_tokens, mamba, need, host),
    )


def _resolve_launch(
    card: ModelCard,
    gpu: GPUSpec,
    cfg: dict[str, Any],
    version: str,
    tp: int,
    assumptions: list[str],
) -> rules.Resolved:
    """The values SGLang runs `cfg` with on this card and GPU (rules.resolve), its adjustments
    noted in `assumptions`."""
    vf = rules.vision_mfs_factor(24, card.vision.hidden_size) if card.vision else None
    r = rules.resolve(
        cfg,
        gpu_mem_mib=gpu.memory_mib,
        tp=tp,
        hybrid=card.is_hybrid,
        version=version,
        context_default=card.max_position_embeddings,
        vision_factor=vf,
        amd_instinct=gpu.vendor == "amd" and gpu.arch.startswith("gfx9"),
        architecture=card.architecture,
        dsa=card.latent_attention is not None and card.latent_attention.index_head_dim is not None,
        mla=card.latent_attention is not None,
        hip=gpu.vendor == "amd",
        kv_heads=card.num_kv_heads,
        sliding=card.local_attention is not None and card.local_attention.kind == "sliding",
    )
    assumptions += list(r.notes)
    if r.mfs_was_default:
        assumptions.append(
            f"mem_fraction_static not set: SGLang's heuristic gives {r.mem_fraction_static}"
        )
    return r


def _free_before_weights_gib(
    gpu: GPUSpec, gpu_free_gib: float | None, assumptions: list[str]
) -> float:
    """`pre`: the given free memory, else capacity - reserve (module constants)."""
    if gpu_free_gib is not None:
        pre = float(gpu_free_gib)
        assumptions.append(f"free memory before weights given: {pre:.2f} GiB")
    else:
        reserve = DEFAULT_RESERVE_MIB + gpu.desktop_reserve_mib
        pre = (gpu.memory_mib - reserve) / 1024
        assumptions.append(
            f"free memory before weights = capacity {gpu.memory_mib} MiB - reserve {reserve} MiB "
            f"(CUDA context {DEFAULT_RESERVE_MIB} MiB + desktop {gpu.desktop_reserve_mib} MiB)"
        )
    return pre


def _eagle_draft(
    card: ModelCard, cfg: dict[str, Any], r: rules.Resolved, reasons: list[str]
) -> bool:
    """Whether the draft is an EAGLE-family head (its weights and KV are budgeted); one that
    needs MTP weights the card lacks is a reason."""
    spec = r.spec_algorithm
    eagle = spec in rules.SPEC_EAGLE_FAMILY
    if eagle and not card.has_mtp and not cfg.get("speculative_draft_model_path"):
        reasons.append(
            f"speculative_algorithm={spec} needs MTP weights, and {card.name} has none "
            f"({cite('P6')})"
        )
    return eagle


def _kv_pool_tokens(
    cfg: dict[str, Any],
    r: rules.Resolved,
    budget: StaticBudget,
    mamba: MambaPool,
    cell: int,
    reasons: list[str],
) -> int:
    """KV pool tokens: what `rest` holds after the mamba pool, in whole pages; no pool (weights
    or the mamba pool taking it all) is a reason."""
    rest, weights_gib = budget.rest_gib, budget.weights_gib + budget.draft_gib
    kv_rest = rest * GIB - mamba.kv_budget_bytes - mamba.spec_bytes
    kv_tokens = int(kv_rest // cell) if kv_rest > 0 else 0
    max_total = cfg.get("max_total_tokens")
    if max_total is not None and kv_tokens > int(max_total):
        kv_tokens = int(max_total)
    kv_tokens = kv_tokens // r.page_size * r.page_size
    if rest <= 0:
        reasons.append(
            f"weights ({weights_gib:.2f} GiB) leave no GPU memory for the KV cache under "
            f"mem_fraction_static={budget.mem_fraction_static}: raise it above "
            f"{weights_gib / budget.pre_gib:.3f}"
        )
    elif kv_tokens <= 0:
        reasons.append(
            "Not enough memory for the KV cache after the mamba pool: raise mem_fraction_static "
            f"(now {budget.mem_fraction_static}) or lower max_mamba_cache_size (now {mamba.slots})"
        )
    return kv_tokens


def _history_extra_tokens(version: str, r: rules.Resolved, kv_tokens: int) -> int:
    """Tokens an EAGLE-family target of 0.4.3.post3 .. 0.5.6.post2 logs beyond its profile."""
    rel = sglang_history.release(version)
    if rel is None or kv_tokens <= 0:
        return 0
    return sglang_history.speculative_extra_tokens(
        rel,
        r.spec_algorithm,
        r.max_running_requests or 0,
        r.spec_steps,
        r.spec_topk,
        r.spec_draft_tokens,
    )


def _max_running_requests(
    card: ModelCard, r: rules.Resolved, kv_tokens: int, mamba: MambaPool, version: str, reqs: Any
) -> tuple[int, str]:
    """(max running requests, what bounds it) (§2.3); `reqs`: --max-num-reqs (0.2.6 .. 0.3.0)."""
    user = per_rank_requests(
        r.max_running_requests, r.dp_attention, sglang_history.release(version)
    )
    if sglang_history.is_history(version):
        rel = sglang_history.release(version) or sglang_history.FIRST
        pool = None if reqs is None else int(reqs)
        mrr = sglang_history.max_running_requests(rel, kv_tokens, r.context_len, user, pool)
        bound = "user" if user is not None else "default"
        if mrr == kv_tokens // 2:
            bound = "kv_tokens"
    elif user is not None:
        mrr, bound = user_requests(user, sglang_history.release(version), kv_tokens, r.context_len)
    else:
        mrr, bound = pool_estimate(kv_tokens, r.context_len), "default"
        if kv_tokens // 2 < mrr:
            mrr, bound = kv_tokens // 2, "kv_tokens"
    slots_per_req = mamba.slots_per_request
    if card.is_hybrid and slots_per_req and mamba.slots // slots_per_req < mrr:
        mrr, bound = mamba.slots // slots_per_req, "mamba_slots"
    return max(mrr, 0), bound


def _slack_needed(
    card: ModelCard,
    r: rules.Resolved,
    mtp_from_slack: bool,
    kv_tokens: int,
    cell: int,
    budget: StaticBudget,
    reasons: list[str],
    pool_over: int = 0,
    draft_weights: int = 0,
) -> int:
    """Bytes the non-static slack must hold: activations, CUDA graphs, a draft model loaded
    after the target's pool (`draft_weights`: before 0.5.14) and what the pool allocates
    beyond its cell (`pool_over` per token); more than the slack is a reason."""
    need = slack_needed_bytes(card, r) + draft_weights + kv_tokens * pool_over
    if mtp_from_slack and card.mtp_layers:
        # the draft's own KV pool (as many tokens as the target's) comes from the slack
        need += int(kv_tokens * cell * card.mtp_layers / len(card.full_attention_layers))
    slack = budget.slack_gib
    if need > slack * GIB:
        reasons.append(
            f"non-static slack {slack:.2f} GiB (pre*(1-mem_fraction_static)) cannot hold "
            f"activations and CUDA graphs ({need / GIB:.2f} GiB for chunked_prefill_size "
            f"{r.chunked_prefill_size}, graph bs {r.cuda_graph_max_bs}); lower "
            "mem_fraction_static or chunked_prefill_size"
        )
    return need


class SGLangWorking(PlanWorking):
    """The Plan's working fields as SGLang fills them: the common ones and the HiCache host
    pools."""

    host_pool_gb: float | None
    host_mamba_gb: float | None
    host_available_gib: float | None
    prefill_graph_tokens: int


def _working_fields(
    card: ModelCard,
    r: rules.Resolved,
    budget: StaticBudget,
    cell: int,
    kv_tokens: int,
    mamba: MambaPool,
    need: int,
    host: HostPool,
) -> SGLangWorking:
    """The Plan's working fields (after the contract's)."""
    n_slots = mamba.slots
    return SGLangWorking(
        pre_weights_free_gib=round(budget.pre_gib, 3),
        mem_fraction_static=budget.mem_fraction_static,
        static_budget_gib=round(budget.rest_gib, 3),
        kv_pool_gib=round(max(kv_tokens, 0) * cell / GIB, 3),
        mamba_conv_gib=round((n_slots + 1) * mamba.conv_bytes / GIB, 2) if card.is_hybrid else 0.0,
        mamba_ssm_gib=round((n_slots + 1) * mamba.ssm_bytes / GIB, 2) if card.is_hybrid else 0.0,
        mamba_spec_gib=round(mamba.spec_bytes / GIB, 3),
        mamba_slot_mib=round(mamba.slot_bytes / MIB, 2),
        slack_gib=round(budget.slack_gib, 3),
        slack_needed_gib=round(need / GIB, 3),
        chunked_prefill_size=r.chunked_prefill_size,
        cuda_graph_max_bs=r.cuda_graph_max_bs,
        context_len=r.context_len,
        mamba_strategy=r.mamba_strategy,
        slots_per_request=mamba.slots_per_request,
        radix_cache=r.radix_cache,
        overlap_schedule=r.overlap,
        mixed_chunk=r.mixed_chunk,
        speculative={
            "algorithm": r.spec_algorithm,
            "num_steps": r.spec_steps,
            "eagle_topk": r.spec_topk,
            "num_draft_tokens": r.spec_draft_tokens,
        },
        host_pool_gb=None if host.kv_gb is None else round(host.kv_gb, 2),
        host_mamba_gb=None if host.mamba_gb is None else round(host.mamba_gb, 2),
        host_available_gib=None if host.available_gib is None else round(host.available_gib, 1),
        prefill_graph_tokens=r.prefill_graph_tokens,
    )


def _others_gib(
    gpu: GPUSpec, pre: float, weights: float, after: float | None, assumptions: list[str]
) -> float:
    """What other processes took from a unified pool (GB10, Jetson) while the weights loaded.
    SGLang reads free memory on an integrated GPU as the host's available memory
    (utils get_available_gpu_memory), so its second reading, the one its KV budget comes from,
    loses whatever anything on the box allocated meanwhile: the measured free memory after
    weights (`Load weight end`) less what the planned weights leave. Discrete GPUs: 0."""
    if after is None or not gpu.unified_memory:
        return 0.0
    others = pre - weights - after
    assumptions.append(
        f"free memory after weights given: {after:.2f} GiB (unified memory: {others:+.2f} GiB "
        "against the planned weights, taken or freed by other processes)"
    )
    return others
