"""SGLang's hybrid (mamba/linear-attention) state cache on one rank (sglang-internals §2.3):
its slot size, how many slots the static budget holds, and the page sizes its radix caches
refuse.

The pool holds max_mamba_cache_size + 1 slots (one padding slot); releases before 0.5.17 take
only the max_mamba_cache_size slots out of the KV budget (MambaPool.kv_budget_bytes). Slot
shapes: Gated DeltaNet, Mamba-2 (Nemotron-H, GraniteMoeHybrid) and LFM2's short convolution,
which SGLang prices as a Mamba-2 state of one group of state size 0 (conv window only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.planner import rules
from autotune.planner.common import GIB


def mamba_slot_bytes(card: ModelCard, tp: int, ssm_dtype: str | None = None) -> tuple[int, int]:
    """(conv, ssm) bytes of one Gated DeltaNet or Mamba-2 state slot on one rank (§2.3, F1;
    Mamba-2 widens its groups to TP when they do not divide, as Mamba2StateShape.create does)."""
    la = card.linear_attention
    if la is None:
        return 0, 0
    n = len(card.linear_layers)
    mamba2 = la.kind in ("mamba2", "short_conv")  # Mamba2StateShape.create for both
    groups = tp if mamba2 and la.num_key_heads % tp else la.num_key_heads
    conv_dim = la.num_value_heads * la.value_head_dim + 2 * groups * la.key_head_dim
    conv = conv_dim // tp * (la.conv_kernel - 1) * int(DTYPE_BYTES[la.conv_dtype]) * n
    ssm_b = DTYPE_BYTES[ssm_dtype or la.ssm_dtype]
    ssm = int(la.num_value_heads // tp * la.value_head_dim * la.key_head_dim * ssm_b) * n
    return conv, ssm


@dataclass(frozen=True)
class MambaPool:
    """The hybrid (mamba/linear-attention) state cache on one rank (§2.3); zeros for a dense
    model."""

    conv_bytes: int  # one slot, every linear-attention layer
    ssm_bytes: int
    slots_per_request: int
    slots: int  # max_mamba_cache_size (<= 0 when nothing fits)
    spec_bytes: int  # speculative decoding's intermediate state
    pool_bytes: int  # (slots + 1) slots
    budget_bytes: int = -1  # what the KV budget loses to the pool; -1: pool_bytes

    @property
    def kv_budget_bytes(self) -> int:
        """The bytes SGLang takes out of the KV budget for the pool (module docstring)."""
        return self.pool_bytes if self.budget_bytes < 0 else self.budget_bytes

    @property
    def slot_bytes(self) -> int:
        return self.conv_bytes + self.ssm_bytes


def mamba_pool(
    card: ModelCard,
    cfg: dict[str, Any],
    r: rules.Resolved,
    v: tuple[int, int, int],
    tp: int,
    rest: float,
    reasons: list[str],
    assumptions: list[str],
) -> MambaPool:
    """The hybrid state cache out of `rest` (GiB); a cache that serves no request is a reason."""
    conv_b, ssm_b = mamba_slot_bytes(card, tp, cfg.get("mamba_ssm_dtype"))
    per_slot = conv_b + ssm_b
    slots_per_req = rules.slots_per_request(r, v) if card.is_hybrid else 0
    n_slots = 0
    spec_bytes = 0
    rest_b = rest * GIB
    if card.is_hybrid:
        d = r.spec_draft_tokens if r.spec_algorithm else 0
        n_slots = mamba_slots(
            cfg,
            r,
            v,
            rest_b=rest_b,
            ssm_b=ssm_b,
            per_slot=per_slot,
            slots_per_req=slots_per_req,
            d=d,
            assumptions=assumptions,
            gdn=card.linear_attention is not None
            and card.linear_attention.kind == "gated_delta_net",
        )
        if d:
            # the intermediate state is priced per request as the pool's slot, conv included
            # (mamba2_cache_params.mamba_cache_per_req: conv + temporal, 0.5.9 .. 0.5.23)
            reqs = spec_state_requests(v, n_slots, slots_per_req, spec_requests_per_rank(r, v))
            spec_bytes = per_slot * reqs * d
        if rest <= 0:
            pass  # reported with the KV pool as weights leaving no memory
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
    # Before 0.5.17 handle_max_mamba_cache returns the rest less max_mamba_cache_size slots
    # (0.5.6.post2 model_runner.py, 0.5.8..0.5.13 model_runner_kv_cache_mixin.py, 0.5.16
    # mem_cache/kv_cache_configurator.py): the pool's extra padding slot comes out of the
    # non-static slack, not the KV budget. 0.5.17 adds it ("+1: the pool's padding slot").
    budget = max(n_slots, 0) * per_slot if card.is_hybrid and v < (0, 5, 17) else -1
    return MambaPool(conv_b, ssm_b, slots_per_req, n_slots, spec_bytes, mamba_bytes, budget)


# handle_max_mamba_cache's ratio rule with speculative decoding, by release: 0.5.4.post1 ..
# 0.5.6.post2 divide the mamba share by (1 + D) slots per slot (model_runner.py); 0.5.7 ..
# 0.5.12 take max_running_requests x D slots of intermediate state off the rest before the split
# (model_runner_kv_cache_mixin.py); 0.5.13 solves the slots and the intermediate state of
# N // ratio requests jointly inside the mamba share (0.5.16: mem_cache/kv_cache_configurator.py);
# 0.5.17 first takes one slot and its D states off the share (the pool's padding slot).
RESERVE_BEFORE_SPLIT_SINCE = (0, 5, 7)
JOINT_SOLVE_SINCE = (0, 5, 13)
PADDING_SLOT_SINCE = (0, 5, 17)
# DP attention: each rank's pool holds value // DP size of an explicit max_mamba_cache_size and
# of the max_running_requests (or 512) it falls back to without the radix cache (model_runner.py
# 0.5.2 .. 0.5.3.post1, handle_max_mamba_cache 0.5.4 .. 0.5.6.post2; model_runner_kv_cache_mixin
# .py 0.5.7 .. 0.5.15; mem_cache/kv_cache_configurator.py from 0.5.16, max(1, ...) for
# max_running_requests from 0.5.23). Before 0.5.7 only a Gated DeltaNet model's count is divided
# (`if self.hybrid_gdn_config is not None`), the ratio rule's included (0.5.4 .. 0.5.6.post2).
DP_SPLIT_EVERY_HYBRID_SINCE = (0, 5, 7)
SPEC_DP_SPLIT_SINCE = (0, 5, 8)  # the intermediate-state reserve's requests, per DP rank
# 0.5.4 .. 0.5.6.post2 take an explicit max_mamba_cache_size only without the radix cache (the
# ratio branch overwrites it); 0.5.7 (`or server_args.max_mamba_cache_size is not None`) on
# keep it either way.
EXPLICIT_WITH_RADIX_SINCE = (0, 5, 7)
DP_SPLIT_AT_LEAST_ONE_SINCE = (0, 5, 23)


def ratio_rule_slots(
    v: tuple[int, int, int],
    rest_b: float,
    ratio: float,
    per_slot: int,
    slots_per_req: int,
    d: int,
    mrr: int,
) -> int:
    """max_mamba_cache_size from the mamba_full_memory_ratio split of `rest_b` bytes, `d` draft
    tokens (0: no speculative decoding) and `mrr` max_running_requests."""
    if d and RESERVE_BEFORE_SPLIT_SINCE <= v < JOINT_SOLVE_SINCE:
        rest_b -= per_slot * mrr * d
    budget = max(rest_b, 0) * ratio / (1 + ratio)
    if v >= PADDING_SLOT_SINCE:
        if d:
            return int((budget - per_slot * (1 + d)) // (per_slot * (1 + d / slots_per_req)))
        return int((budget - per_slot) // per_slot)
    if d and v >= JOINT_SOLVE_SINCE:
        return int(budget // (per_slot * (1 + d / slots_per_req)))
    if d and v < RESERVE_BEFORE_SPLIT_SINCE:
        return int(budget // per_slot // (1 + d))
    return int(budget // per_slot)


def spec_requests_per_rank(r: rules.Resolved, v: tuple[int, int, int]) -> int:
    """max_running_requests as the intermediate-state reserve reads it: from 0.5.8 one
    DP-attention rank's share (`// dp_size`, model_runner_kv_cache_mixin.py 0.5.8 .. 0.5.15,
    mem_cache/kv_cache_configurator.py from 0.5.16; at least 1 from 0.5.23); 0.5.7 the whole."""
    mrr = r.max_running_requests or 48
    dp = max(r.dp_attention, 1)
    if dp == 1 or v < SPEC_DP_SPLIT_SINCE:
        return mrr
    return max(1, mrr // dp) if v >= DP_SPLIT_AT_LEAST_ONE_SINCE else mrr // dp


def spec_state_requests(
    v: tuple[int, int, int], n_slots: int, slots_per_req: int, mrr: int
) -> int:
    """The requests whose D intermediate states come off the KV budget: every slot's before
    0.5.7 (the share's (1 + D) divisor), max_running_requests to 0.5.12, capped at N // ratio
    from 0.5.13 (capped_reqs), plus the padding slot's from 0.5.17 ("capped_reqs + 1")."""
    if v < RESERVE_BEFORE_SPLIT_SINCE:
        return max(n_slots, 0)
    if v < JOINT_SOLVE_SINCE:
        return mrr
    capped = min(mrr, max(n_slots // max(slots_per_req, 1), 0))
    return capped + 1 if v >= PADDING_SLOT_SINCE else capped


def mamba_slots(
    cfg: dict[str, Any],
    r: rules.Resolved,
    v: tuple[int, int, int],
    *,
    rest_b: float,
    ssm_b: int,
    per_slot: int,
    slots_per_req: int,
    d: int,
    assumptions: list[str],
    gdn: bool,
) -> int:
    """max_mamba_cache_size on one rank: the user's, max_running_requests without radix cache,
    else the ratio rule over `rest_b` (with `d` draft tokens' intermediate state); a DP-attention
    rank's share of the first two (DP_SPLIT_EVERY_HYBRID_SINCE). `gdn`: a Gated DeltaNet model."""
    explicit = cfg.get("max_mamba_cache_size")
    ratio = float(cfg.get("mamba_full_memory_ratio") or r.mamba_full_memory_ratio)
    dp = max(r.dp_attention, 1) if gdn or v >= DP_SPLIT_EVERY_HYBRID_SINCE else 1
    if explicit is not None and r.radix_cache and v < EXPLICIT_WITH_RADIX_SINCE:
        assumptions.append("max_mamba_cache_size is ignored with the radix cache before 0.5.7")
        explicit = None
    if explicit is not None:
        n_slots = int(explicit) // dp
    elif not r.radix_cache and r.max_running_requests is not None:
        n_slots = r.max_running_requests // dp
        if dp > 1 and v >= DP_SPLIT_AT_LEAST_ONE_SINCE:
            n_slots = max(1, n_slots)
    elif not r.radix_cache and v < (0, 5, 9):
        n_slots = 512 // dp  # releases before 0.5.9 fell back to 512 slots
    else:
        n_slots = ratio_rule_slots(
            v, rest_b, ratio, per_slot, slots_per_req, d, spec_requests_per_rank(r, v)
        )
        if v < DP_SPLIT_EVERY_HYBRID_SINCE:
            n_slots //= dp
        assumptions.append(
            f"max_mamba_cache_size from the ratio rule (mamba_full_memory_ratio {ratio})"
        )
    return n_slots


def mamba_page_size_checks(card: ModelCard, r: rules.Resolved, reasons: list[str]) -> None:
    """The page sizes SGLang's mamba radix caches refuse."""
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
