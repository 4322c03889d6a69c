"""SGLang's `--cpu-offload-gb` (0.4.0+): `make_layers` passes every decoder layer it builds, in
order, to the offloader (utils.maybe_offload_to_cpu to 0.5.0, offloader.OffloaderV1 from 0.5.1),
which moves that layer's parameters one by one to pinned host memory while the bytes moved so
far stay below cpu_offload_gb * 1024**3; the embedding and the LM head are built outside
`make_layers` and stay on the GPU. Each rank offloads its own shards against the full budget, so
a rank's GPU keeps its decoder share less up to cpu_offload_gb GiB (the last parameter moved may
overshoot the budget by its own size). The `--offload-group-size` path (V2) refuses a nonzero
cpu_offload_gb, so the budget always means V1."""

from __future__ import annotations

from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.common import GIB

OFFLOAD_SINCE = (0, 4, 0)


def host_budget_bytes(cfg: dict[str, Any], v: tuple[int, int, int]) -> int:
    """Each rank's `--cpu-offload-gb` budget in bytes (cpu_offload_gb * 1024**3); 0 without the
    flag or before the release."""
    budget = float(cfg.get("cpu_offload_gb") or 0)
    return int(budget * GIB) if budget > 0 and v >= OFFLOAD_SINCE else 0


def offload_card(
    card: ModelCard, cfg: dict[str, Any], v: tuple[int, int, int], tp: int, assumptions: list[str]
) -> ModelCard:
    """`card` with the decoder weights `--cpu-offload-gb` moves to the host taken off its GPU
    weights (module docstring); unchanged without the flag or before the release."""
    budget = float(cfg.get("cpu_offload_gb") or 0) * GIB
    if budget <= 0 or v < OFFLOAD_SINCE:
        return card
    w = card.weights
    off = min(w.decoder, int(budget) * max(tp, 1))
    assumptions.append(
        f"--cpu-offload-gb {cfg['cpu_offload_gb']}: {off / max(tp, 1) / GIB:.2f} GiB of each "
        "rank's decoder layers in host memory (to within one parameter)"
    )
    return card.model_copy(update={"weights": w.model_copy(update={"decoder": w.decoder - off})})
