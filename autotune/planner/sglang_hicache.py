"""SGLang's HiCache host pools (sglang-internals §2.5, FIELD-NOTES P3): their sizes, and the host
RAM SGLang allows them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.common import GIB, host_ram_available_gib
from autotune.planner.sglang_mamba import MambaPool

# SGLang refuses a HiCache host pool above available host RAM - 10 GiB (P3).
HOST_RAM_MARGIN_GIB = 10.0


@dataclass(frozen=True)
class HostPool:
    """HiCache's host pools (§2.5, P3): tokens and decimal GB, None without HiCache; and the host
    RAM available (given, or read from this machine)."""

    available_gib: float | None
    tokens: int | None = None
    kv_gb: float | None = None
    mamba_gb: float | None = None


def host_pool(
    cfg: dict[str, Any],
    card: ModelCard,
    v: tuple[int, int, int],
    kv_tokens: int,
    cell: int,
    mamba: MambaPool,
    page: int,
    host_free_gib: float | None,
    reasons: list[str],
    assumptions: list[str],
    draft_cell: int = 0,
) -> HostPool:
    """HiCache's host pools; more than the host RAM SGLang allows (P3) is a reason. `cell`: the
    target's bytes a host token; `draft_cell`: a separate draft's own host pool's, as many
    tokens (planner.sglang_draft)."""
    host_free_gib = host_ram_available_gib(host_free_gib, assumptions)
    host_tokens, host_gb, host_mamba_gb = _hicache(
        cfg, card, v, kv_tokens, cell, mamba.slots, mamba.slot_bytes, page, reasons
    )
    host_gb += host_tokens * draft_cell / 1e9
    requested = (host_gb or 0) + (host_mamba_gb or 0)
    limit = (host_free_gib - HOST_RAM_MARGIN_GIB) * GIB / 1e9
    if requested > limit:
        reasons.append(
            f"Not enough host memory available. Requesting {requested:.2f} GB but only have "
            f"{max(limit, 0):.2f} GB free (available - 10 GiB, sglang#8102); lower "
            "hicache_size/ratio"
        )
    return HostPool(host_free_gib, host_tokens, host_gb, host_mamba_gb)


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
