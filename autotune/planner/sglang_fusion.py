"""SGLang's shared-experts fusion for DeepSeek V3/R1 in 0.4.4.post4 .. 0.4.6.post5
(models/deepseek_v2.py, DeepseekV2MoE and DeepseekV2ForCausalLM): with `n_share_experts_fusion`
= n > 0 the MoE layer's FusedMoE holds n_routed_experts + n experts, each split over the TP ranks
like the routed ones, the shared expert's weights loaded into every extra slot, and no separate
shared-expert MLP is built. n must equal the TP size (asserted), so a rank holds the whole shared
expert instead of 1 / TP of it.

When it is on:
- 0.4.4.post4 .. 0.4.5.post1: only when --n-share-experts-fusion is given (its default 0 never
  reaches the `is None` branch that would pick the TP size);
- 0.4.5.post2 .. 0.4.6.post5: also by default (`determine_n_share_experts_fusion`) for a
  DeepseekV3ForCausalLM with 256 routed experts on a device of compute capability >= 9.0, without
  DeepEP MoE; from 0.4.6.post4 on NVIDIA only (`_is_cuda`; ROCm's gfx942 reports 9.4 before);
- 0.4.7 replaced it with `num_fused_shared_experts` = config.n_shared_experts: one copy, split
  over the ranks as the separate MLP was, so no change to a rank's weights.
"""

from __future__ import annotations

from typing import Any

from autotune.hardware.gpu_spec import device_capability
from autotune.hardware.gpus import GPUSpec
from autotune.models.card import ModelCard
from autotune.models.hf.layer_params import card_part_bytes

FUSION_FROM = (4, 4, 4)  # --n-share-experts-fusion (0.4.4.post4)
DEFAULT_FROM = (4, 5, 2)  # on by default on capability >= 9.0
CUDA_ONLY_FROM = (4, 6, 4)  # the default and the flag refused off NVIDIA
LAST = (4, 6, 5)  # 0.4.7: num_fused_shared_experts, one copy
ARCHITECTURE = "DeepseekV3ForCausalLM"
ROUTED = 256


def fused_copies(
    card: ModelCard, gpu: GPUSpec, cfg: dict[str, Any], tp: int, rel: tuple[int, int, int] | None
) -> int:
    """n_share_experts_fusion as the release resolves it for this launch (0: off)."""
    e = card.experts
    if (
        rel is None
        or not FUSION_FROM <= rel <= LAST
        or e is None
        or not e.shared_intermediate_size
    ):
        return 0
    if card.architecture != ARCHITECTURE or e.num_experts != ROUTED:
        return 0
    if rel >= CUDA_ONLY_FROM and gpu.vendor != "nvidia":
        return 0
    given = int(cfg.get("n_share_experts_fusion") or 0)
    if given > 0:
        return given
    cc = device_capability(gpu.arch)
    auto = rel >= DEFAULT_FROM and cc is not None and cc >= (9, 0)
    return tp if auto and not cfg.get("enable_deepep_moe") else 0


def fusion_extra_bytes(
    card: ModelCard,
    gpu: GPUSpec,
    cfg: dict[str, Any],
    tp: int,
    rel: tuple[int, int, int] | None,
    assumptions: list[str] | None = None,
) -> int:
    """What the fusion adds to a rank's weights: n copies of the shared expert split over the TP
    ranks in place of one (module docstring), in every MoE layer; 0 when it is off."""
    n = fused_copies(card, gpu, cfg, tp, rel)
    e = card.experts
    if n <= 1 or e is None:
        return 0
    shared = 3 * card.hidden_size * e.shared_intermediate_size * card_part_bytes(card, "shared")
    extra = int(e.moe_layers * (n - 1) * shared / tp)
    if assumptions is not None:
        assumptions.append(
            f"shared-experts fusion: {n} copies of the shared expert among the routed ones, "
            f"+{extra / 2**30:.2f} GiB a rank"
        )
    return extra
