"""KTransformers expert offload on SGLang (`--kt-weight-path`, layers/moe/kt_ep_wrapper.py from
0.5.6): every MoE layer builds GPU weights for experts 0 .. kt_num_gpu_experts - 1 only
(KTEPWrapperMethod.create_weights passes num_experts=self.num_gpu_experts to the wrapped GPU
method); the rest run on the CPU from the KT weight folder, outside the GPU's budget. The layer
is wrapped only when --kt-weight-path is set (create_kt_config_from_server_args). --kt-method
(AMXINT4, AMXINT8, LLAMAFILE's GGUF experts, ...) only picks kt-kernel's CPU backend
(KTMoEWrapper's method, 0.5.10.post1), so the GPU's share is the same for every method."""

from __future__ import annotations

from typing import Any

from autotune.models.card import ModelCard
from autotune.models.hf.layer_params import expert_bytes

KT_SINCE = (0, 5, 6)


def routed_expert_bytes(card: ModelCard) -> int:
    """The routed experts' weights as loaded (every expert of every MoE layer) with their
    scales: as the card's own count stored them (WeightBytes.experts, the pack's ignore list
    applied), else at the bytes per weight its scheme gives the experts (layer_params.
    part_bytes: an MXFP4 pack's 0.53, NVFP4's 0.5625); never more than the decoder holds.
    Their scales move with them: counted at 4 bits, gpt-oss-120b's 3.6 GB of expert scales
    were read by every decode step."""
    if card.experts is None:
        return 0
    routed = card.weights.experts or expert_bytes(card)
    return int(min(routed, card.weights.decoder))


def kt_card(
    card: ModelCard,
    cfg: dict[str, Any],
    v: tuple[int, int, int],
    reasons: list[str],
    assumptions: list[str],
) -> ModelCard:
    """`card` with only the GPU's share of the routed experts in its decoder when the launch
    offloads experts to KTransformers (module docstring); unchanged otherwise."""
    if not cfg.get("kt_weight_path") or card.experts is None or v < KT_SINCE:
        return card
    gpu_experts = cfg.get("kt_num_gpu_experts")
    if gpu_experts is None:
        reasons.append(
            "--kt-weight-path without --kt-num-gpu-experts: SGLang needs the number of experts "
            "each MoE layer keeps on the GPU"
        )
        return card
    e = card.experts
    on_gpu = min(max(int(gpu_experts), 0), e.num_experts)
    off = routed_expert_bytes(card) * (e.num_experts - on_gpu) // e.num_experts
    assumptions.append(
        f"KTransformers: {on_gpu} of {e.num_experts} routed experts per MoE layer on the GPU, "
        f"{off / 2**30:.2f} GiB of expert weights on the CPU"
    )
    w = card.weights
    return card.model_copy(
        update={
            "weights": w.model_copy(
                update={
                    "decoder": max(w.decoder - off, 0),
                    "experts": max(w.experts - off, 0) if w.experts else 0,
                }
            )
        }
    )
