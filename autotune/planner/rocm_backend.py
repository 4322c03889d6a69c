"""The attention backend SGLang fills in on ROCm for a DeepSeek sparse-attention (DSA) model,
which decides whether the aiter scaling of mem_fraction_static applies (planner.rules)."""

from __future__ import annotations

Version = tuple[int, int, int]


def dsa_backend_filled(architecture: str, dsa: bool, v: Version) -> bool:
    """Whether SGLang gives a DSA model whose attention backend is unset its own backend (nsa;
    dsa from 0.5.13) in the model-specific adjustments, which run before the aiter check: the
    backend is then not aiter and the x0.85 of mem_fraction_static does not apply. The check names
    the architectures (0.5.3 through is_deepseek_nsa; 0.5.4 .. 0.5.8 DeepseekV3ForCausalLM; 0.5.9
    adds GlmMoeDsaForCausalLM; 0.5.12 DeepseekV32ForCausalLM)."""
    if not dsa or v < (0, 5, 3):
        return False
    if architecture == "DeepseekV3ForCausalLM":
        return True
    if architecture == "GlmMoeDsaForCausalLM":
        return v >= (0, 5, 9)
    if architecture == "DeepseekV32ForCausalLM":
        return v < (0, 5, 4) or v >= (0, 5, 12)
    return False
