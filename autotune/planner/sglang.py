"""Predict what an SGLang launch gets on one GPU, and whether it fits (sglang-internals §2).

Mirrors the engine's own accounting per rank:

    pre   = free GiB before weights (capacity - reserve, or --gpu-free-gib)
    rest  = pre * mem_fraction_static - weights          # static budget after weights
    mamba = (N + 1) * per_slot  [+ speculative intermediate state]
    kv    = floor((rest - mamba) / cell / page) * page
    slack = pre * (1 - mem_fraction_static)  must hold activations, CUDA graphs, draft model

Calibrated against FIELD-NOTES C1 (tests/planner/test_sglang.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from autotune.hardware.gpus import GPUSpec
from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner import rules
from autotune.sources import cite

GIB = 2**30
MIB = 2**20

# Free memory before weights = capacity - reserve. 760 MiB is the CUDA context, cuBLAS/NCCL
# workspaces and torch's allocator at init; GeForce cards add the desktop's share (F3: ~80 MB).
# FIELD-NOTES C1 implies 0.82 GiB in total on the 4080 SUPER (760 + 80 MiB = 0.82 GiB).
DEFAULT_RESERVE_MIB = 760
# SGLang refuses a HiCache host pool above available host RAM - 10 GiB (P3).
HOST_RAM_MARGIN_GIB = 10.0
# Activation workspace per prefill token, in units of the widest per-token tensors (gate_up out,
# hidden, qkv/qkvz), x2 for the temporaries held beside them; and CUDA graph memory per captured
# batch size. Together ~0.9 GiB for C1 (peak 31,114 of 32,760 MiB at mfs 0.92).
ACT_TENSORS_FACTOR = 2.0
GRAPH_BASE_MIB = 256
GRAPH_PER_BS_MIB = 2.0

KV_DTYPE_BYTES = {
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "mxfp8": 1 + 1 / 32,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp4_e2m1": 0.5 + 1 / 16,
    "nvfp4": 0.5 + 1 / 16,
    "fp4_mx_block16": 0.5 + 1 / 16,
}


class Plan(BaseModel):
    """`autotune plan --json`: the contract fields first, then the working."""

    weights_gib: float
    kv_cell_bytes: int
    kv_pool_tokens: int
    mamba_slots: int
    mamba_pool_gib: float
    max_running_requests: int
    fits: bool
    reasons: list[str]
    host_pool_tokens: int | None = None
    # working
    engine: str = "sglang"
    engine_version: str
    model: str
    gpu: str
    tp: int
    kv_dtype: str
    pre_weights_free_gib: float
    mem_fraction_static: float
    static_budget_gib: float = Field(description="rest_memory: pre*mfs - weights")
    kv_pool_gib: float
    mamba_conv_gib: float
    mamba_ssm_gib: float
    mamba_spec_gib: float
    mamba_slot_mib: float
    slack_gib: float = Field(description="pre*(1-mfs): activations, graphs, draft model")
    slack_needed_gib: float
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    context_len: int
    mamba_strategy: str
    slots_per_request: int
    radix_cache: bool
    overlap_schedule: bool
    mixed_chunk: bool
    speculative: dict[str, Any]
    host_pool_gb: float | None = None
    host_mamba_gb: float | None = None
    host_available_gib: float | None = None
    bound_by: str = Field(description="what caps concurrency: kv_tokens, mamba_slots or user")
    assumptions: list[str]
    perf: dict[str, Any] | None = None


def _kv_dtype(card: ModelCard, value: Any) -> str:
    if value in (None, "auto"):
        return "bf16" if card.dtype in ("bfloat16", "bf16") else card.dtype
    name = str(value)
    if name not in KV_DTYPE_BYTES:
        from autotune.errors import ConfigError

        raise ConfigError(
            f"unknown kv_cache_dtype {name!r}; valid: auto, {', '.join(KV_DTYPE_BYTES)}",
            field="kv_cache_dtype",
        )
    return name


def kv_cell_bytes(card: ModelCard, kv_dtype: str, tp: int) -> int:
    """Per-token KV bytes on one rank: only full-attention layers count for hybrids (§2.2)."""
    heads = max(1, card.num_kv_heads // tp)
    per = heads * (card.head_dim + card.value_head_dim) * len(card.full_attention_layers)
    return int(per * KV_DTYPE_BYTES[kv_dtype])


def mamba_slot_bytes(card: ModelCard, tp: int, ssm_dtype: str | None = None) -> tuple[int, int]:
    """(conv, ssm) bytes of one Gated DeltaNet state slot on one rank (§2.3, F1)."""
    la = card.linear_attention
    if la is None:
        return 0, 0
    n = len(card.linear_layers)
    conv_dim = la.num_value_heads * la.value_head_dim + 2 * la.num_key_heads * la.key_head_dim
    conv = conv_dim // tp * (la.conv_kernel - 1) * int(DTYPE_BYTES[la.conv_dtype]) * n
    ssm_b = DTYPE_BYTES[ssm_dtype or la.ssm_dtype]
    ssm = int(la.num_value_heads // tp * la.value_head_dim * la.key_head_dim * ssm_b) * n
    return conv, ssm


def weights_per_rank(card: ModelCard, tp: int, load_mtp: bool) -> int:
    """Weights on one rank: sharded parts / TP; the vision tower is replicated."""
    w = card.weights
    sharded = w.embed_tokens + w.lm_head + w.decoder + (w.mtp if load_mtp else 0)
    return (sharded + w.load_overhead) // tp + w.vision


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


def plan_sglang(
    card: ModelCard,
    gpu: GPUSpec,
    config: dict[str, Any] | None = None,
    *,
    version: str = "0.5.17",
    tp: int = 1,
    gpu_free_gib: float | None = None,
    host_free_gib: float | None = None,
) -> Plan:
    """Plan one launch. `config` holds SGLang field names; missing keys mean "engine decides"."""
    cfg = dict(config or {})
    v = rules.parse_version(version)
    assumptions: list[str] = []
    reasons: list[str] = []
    vf = rules.vision_mfs_factor(24, card.vision.hidden_size) if card.vision else None
    r = rules.resolve(
        cfg,
        gpu_mem_mib=gpu.memory_mib,
        tp=tp,
        hybrid=card.is_hybrid,
        version=version,
        context_default=card.max_position_embeddings,
        vision_factor=vf,
    )
    assumptions += list(r.notes)
    if r.mfs_was_default:
        assumptions.append(
            f"mem_fraction_static not set: SGLang's heuristic gives {r.mem_fraction_static}"
        )

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

    spec = r.spec_algorithm
    eagle = spec in rules.SPEC_EAGLE_FAMILY
    if eagle and not card.has_mtp and not cfg.get("speculative_draft_model_path"):
        reasons.append(
            f"speculative_algorithm={spec} needs MTP weights, and {card.name} has none "
            f"({cite('P6')})"
        )
    weights = weights_per_rank(card, tp, load_mtp=False)
    draft_weights = card.weights.mtp // tp if eagle else 0
    weights_gib = weights / GIB

    mfs = r.mem_fraction_static
    rest = pre * mfs - weights_gib
    kv_dtype = _kv_dtype(card, cfg.get("kv_cache_dtype"))
    cell = kv_cell_bytes(card, kv_dtype, tp)
    if eagle and v >= (0, 5, 20) and card.mtp_layers:
        # 0.5.2x budgets the draft KV inside the cell: x(1 + draft_layers/num_layers) (§6).
        cell = int(cell * (1 + card.mtp_layers / len(card.full_attention_layers)))
        assumptions.append("0.5.20+: draft (MTP) KV budgeted in the cell")

    conv_b, ssm_b = mamba_slot_bytes(card, tp, cfg.get("mamba_ssm_dtype"))
    per_slot = conv_b + ssm_b
    slots_per_req = rules.slots_per_request(r, v) if card.is_hybrid else 0
    n_slots = 0
    spec_bytes = 0
    rest_b = rest * GIB
    if card.is_hybrid:
        d = r.spec_draft_tokens if spec else 0
        explicit = cfg.get("max_mamba_cache_size")
        ratio = float(cfg.get("mamba_full_memory_ratio") or 0.9)
        if explicit is not None:
            n_slots = int(explicit)
        elif not r.radix_cache and r.max_running_requests is not None:
            n_slots = r.max_running_requests
        else:
            budget = max(rest_b, 0) * ratio / (1 + ratio)
            if v < (0, 5, 16):
                if d:
                    budget -= ssm_b * (r.max_running_requests or 48) * d
                n_slots = int(budget // per_slot)
            elif d:
                # joint solve for slots and the intermediate state of N // ratio requests
                n_slots = int(
                    (budget - per_slot * (1 + d)) // (per_slot * (1 + d / slots_per_req))
                )
            else:
                n_slots = int((budget - per_slot) // per_slot)
            assumptions.append(
                f"max_mamba_cache_size from the ratio rule (mamba_full_memory_ratio {ratio})"
            )
        if d:
            mrr_for_spec = r.max_running_requests or 48
            if v >= (0, 5, 16):
                mrr_for_spec = min(mrr_for_spec, max(n_slots // max(slots_per_req, 1), 0))
            spec_bytes = ssm_b * (mrr_for_spec + 1) * d
        if rest <= 0:
            pass  # reported below as weights leaving no memory
        elif n_slots <= 0:
            reasons.append(
                "Not enough GPU memory for hybrid (mamba/linear-attention) state cache: "
                f"computed max_mamba_cache_size={n_slots}"
            )
        elif n_slots // max(slots_per_req, 1) <= 0:
            reasons.append(
                f"Hybrid state cache is too small to serve any requests: {n_slots} slots, "
                f"{slots_per_req} per request ({r.mamba_strategy}); use at least {slots_per_req}"
            )
    mamba_bytes = (max(n_slots, 0) + 1) * per_slot if card.is_hybrid else 0
    if card.is_hybrid and r.radix_cache and r.page_size > 1:
        if r.mamba_strategy == "no_buffer":
            reasons.append(
                f"page_size {r.page_size} with the mamba no_buffer radix cache: SGLang asserts "
                "page_size == 1 there (MambaRadixCache); use page_size 1 or extra_buffer"
            )
        elif 256 % r.page_size:
            reasons.append(
                f"extra_buffer needs mamba_track_interval (256) % page_size == 0; page_size "
                f"{r.page_size} does not divide it"
            )

    kv_rest = rest_b - mamba_bytes - spec_bytes
    kv_tokens = int(kv_rest // cell) if kv_rest > 0 else 0
    max_total = cfg.get("max_total_tokens")
    if max_total is not None and kv_tokens > int(max_total):
        kv_tokens = int(max_total)
    kv_tokens = kv_tokens // r.page_size * r.page_size
    if rest <= 0:
        reasons.append(
            f"weights ({weights_gib:.2f} GiB) leave no GPU memory for the KV cache under "
            f"mem_fraction_static={mfs}: raise it above {weights_gib / pre:.3f}"
        )
    elif kv_tokens <= 0:
        reasons.append(
            "Not enough memory for the KV cache after the mamba pool: raise mem_fraction_static "
            f"(now {mfs}) or lower max_mamba_cache_size (now {n_slots})"
        )

    # max running requests (§2.3)
    if r.max_running_requests is not None:
        mrr = r.max_running_requests
        bound = "user"
    else:
        mrr = min(max(int(kv_tokens / r.context_len * 512), 2048), 4096)
        bound = "default"
    if kv_tokens // 2 < mrr:
        mrr, bound = kv_tokens // 2, "kv_tokens"
    if card.is_hybrid and slots_per_req and n_slots // slots_per_req < mrr:
        mrr, bound = n_slots // slots_per_req, "mamba_slots"
    mrr = max(mrr, 0)

    slack = pre * (1 - mfs)
    need = slack_needed_bytes(card, r) + draft_weights
    if eagle and v < (0, 5, 20) and card.mtp_layers:
        # 0.5.9-era: the draft KV pool (as many tokens as the target's) comes from the slack.
        need += int(kv_tokens * cell * card.mtp_layers / len(card.full_attention_layers))
    if need > slack * GIB:
        reasons.append(
            f"non-static slack {slack:.2f} GiB (pre*(1-mem_fraction_static)) cannot hold "
            f"activations and CUDA graphs ({need / GIB:.2f} GiB for chunked_prefill_size "
            f"{r.chunked_prefill_size}, graph bs {r.cuda_graph_max_bs}); lower "
            "mem_fraction_static or chunked_prefill_size"
        )
    if r.context_len > card.max_position_embeddings:
        assumptions.append(
            f"context_length {r.context_len} exceeds the model's {card.max_position_embeddings}"
        )

    host_tokens = host_gb = host_mamba_gb = None
    if cfg.get("enable_hierarchical_cache"):
        if host_free_gib is None:
            import psutil

            host_free_gib = psutil.virtual_memory().available / GIB
            assumptions.append(
                f"host RAM available read from this machine: {host_free_gib:.1f} GiB"
            )
        host_tokens, host_gb, host_mamba_gb = _hicache(
            cfg, card, v, kv_tokens, cell, n_slots, per_slot, r.page_size, reasons
        )
        requested = (host_gb or 0) + (host_mamba_gb or 0)
        limit = (host_free_gib - HOST_RAM_MARGIN_GIB) * GIB / 1e9
        if requested > limit:
            reasons.append(
                f"Not enough host memory available. Requesting {requested:.2f} GB but only have "
                f"{max(limit, 0):.2f} GB free (available - 10 GiB, sglang#8102); lower "
                "hicache_size/ratio"
            )

    return Plan(
        weights_gib=round(weights_gib, 3),
        kv_cell_bytes=cell,
        kv_pool_tokens=max(kv_tokens, 0),
        mamba_slots=max(n_slots, 0),
        mamba_pool_gib=round(mamba_bytes / GIB, 3),
        max_running_requests=mrr,
        fits=not reasons,
        reasons=reasons,
        host_pool_tokens=host_tokens,
        engine_version=version,
        model=card.name,
        gpu=gpu.name,
        tp=tp,
        kv_dtype=kv_dtype,
        pre_weights_free_gib=round(pre, 3),
        mem_fraction_static=mfs,
        static_budget_gib=round(rest, 3),
        kv_pool_gib=round(max(kv_tokens, 0) * cell / GIB, 3),
        mamba_conv_gib=round((n_slots + 1) * conv_b / GIB, 2) if card.is_hybrid else 0.0,
        mamba_ssm_gib=round((n_slots + 1) * ssm_b / GIB, 2) if card.is_hybrid else 0.0,
        mamba_spec_gib=round(spec_bytes / GIB, 3),
        mamba_slot_mib=round(per_slot / MIB, 2),
        slack_gib=round(slack, 3),
        slack_needed_gib=round(need / GIB, 3),
        chunked_prefill_size=r.chunked_prefill_size,
        cuda_graph_max_bs=r.cuda_graph_max_bs,
        context_len=r.context_len,
        mamba_strategy=r.mamba_strategy,
        slots_per_request=slots_per_req,
        radix_cache=r.radix_cache,
        overlap_schedule=r.overlap,
        mixed_chunk=r.mixed_chunk,
        speculative={
            "algorithm": spec,
            "num_steps": r.spec_steps,
            "eagle_topk": r.spec_topk,
            "num_draft_tokens": r.spec_draft_tokens,
        },
        host_pool_gb=None if host_gb is None else round(host_gb, 2),
        host_mamba_gb=None if host_mamba_gb is None else round(host_mamba_gb, 2),
        host_available_gib=None if host_free_gib is None else round(host_free_gib, 1),
        bound_by=bound,
        assumptions=assumptions,
    )


def _hicache(
    cfg: dict[str, Any],
    card: ModelCard,
    v: tuple[int, int, int],
    kv_tokens: int,
    cell: int,
    n_slots: int,
    per_slot: int,
    page: int,
    reasons: list[str],
) -> tuple[int, float, float]:
    """Host pool tokens and bytes (decimal GB) for KV and mamba (§2.5, P3)."""
    if card.is_hybrid and v < (0, 5, 16):
        reasons.append(
            "HiCache with a hybrid (mamba) model is unsupported before 0.5.16: 0.5.9 has no mamba "
            "host pool (sglang-internals §2.5)"
        )
    size_gb = float(cfg.get("hicache_size") or 0)
    ratio = float(cfg.get("hicache_ratio") or 2.0)
    dev_kv = kv_tokens * cell
    dev_mamba = (n_slots + 1) * per_slot if card.is_hybrid else 0
    if size_gb > 0:
        # --hicache-size covers KV and mamba host pools together, split by device bytes (P3).
        kv_share = dev_kv / (dev_kv + dev_mamba) if dev_kv + dev_mamba else 1.0
        kv_gb = size_gb * kv_share
        tokens = int(kv_gb * 1e9 // cell) if cell else 0
        mamba_gb = size_gb - kv_gb
    else:
        tokens = int(kv_tokens * ratio)
        mamba_gb = dev_mamba * ratio / 1e9
    tokens = (tokens // page + 1) * page
    kv_gb = tokens * cell / 1e9
    if tokens <= kv_tokens and v < (0, 5, 16):
        reasons.append(
            f"HiCache host pool ({tokens} tokens) must be larger than the device pool "
            f"({kv_tokens}); raise hicache_size or hicache_ratio"
        )
    return tokens, kv_gb, mamba_gb
