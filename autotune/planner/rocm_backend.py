"""The attention backend SGLang runs on ROCm when --attention-backend is unset, which decides
whether the aiter scaling of mem_fraction_static applies (planner.rules), and that scaling.

Read from the releases (tests/planner/test_sglang_rocm_wheels.py checks each wheel): the default
is picked in model_runner (0.4.7 .. 0.5.4), ServerArgs._handle_attention_backend_compatibility
(0.5.4.post1 .. 0.5.9), ServerArgs._get_default_attn_backend (0.5.10 .. 0.5.18) and
arg_groups/model_override_base.get_default_attn_backend (0.5.19 ..): is_hip() gives an MHA model
aiter, and an MLA model aiter only when its KV heads per rank (get_num_kv_heads(tp_size):
max(1, num_key_value_heads // tp)) are 16 or 128 ("current aiter only support head number 16 or
128"), else triton; up to 0.5.3rc0 the MLA case also needs no speculative algorithm. Some
architectures get their own backend first (DSA models; NOT_AITER_FILLS)."""

from __future__ import annotations

from typing import Any

from autotune.models.card import ModelCard
from autotune.planner.sglang_release import Release

Version = tuple[int, int, int]

# The per-rank KV head counts for which an MLA model defaults to aiter (every release).
AITER_MLA_HEADS = frozenset({16, 128})
# The first release whose MLA default ignores the speculative algorithm (0.5.3rc0 still checks).
MLA_SPEC_IGNORED_FROM: Release = (5, 3, 0)


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


# Architectures whose model-specific adjustments give an unset backend something other than aiter
# on ROCm (triton; the fills run before the aiter check), over releases [first, end), end None:
# through 0.5.23. GptOssForCausalLM (the model arrived in 0.5.0): triton until its fill gains an
# is_hip() -> aiter branch in 0.5.10. Olmo2ForCausalLM: triton off CUDA from 0.5.4. Gemma 4:
# "trtllm_mha" if is_sm100_supported() else "triton" (server_args 0.5.11 .. 0.5.14, then the
# override registry), Gemma4ForConditionalGeneration from 0.5.11, the text-only and unified
# architectures from 0.5.13. FalconH1, LFM2, NemotronH, GraniteMoeHybrid and Jet-Nemotron fill
# only on sm100, so ROCm keeps aiter (tests/planner/test_sglang_rocm_wheels.py).
NOT_AITER_FILLS: dict[str, tuple[Release, Release | None]] = {
    "GptOssForCausalLM": ((0, 0, 0), (5, 10, 0)),
    "Olmo2ForCausalLM": ((5, 4, 0), None),
    "Gemma4ForConditionalGeneration": ((5, 11, 0), None),
    "Gemma4ForCausalLM": ((5, 13, 0), None),
    "Gemma4UnifiedForConditionalGeneration": ((5, 13, 0), None),
}
# Fills that apply only to a model with sliding-window layers (hf_config.sliding_window_pattern
# set): EXAONE 4 / EXAONE MoE get triton off CUDA from 0.5.22 (arg_groups/model_overrides/
# exaone.py); before it no fill, and an unset backend fails its assertion (EXAONE_CHECKED).
SLIDING_FILLS: dict[str, tuple[Release, Release | None]] = {
    "Exaone4ForCausalLM": ((5, 22, 0), None),
    "ExaoneMoEForCausalLM": ((5, 22, 0), None),
    "ExaoneMoeForCausalLM": ((5, 22, 0), None),
}


# EXAONE 4 / EXAONE MoE with sliding-window layers: the model-specific adjustments
# (ServerArgs._handle_model_specific_adjustments 0.5.9 .. 0.5.18, arg_groups/model_hook.py from
# 0.5.19) assert the attention backend is one of EXAONE_BACKENDS. They run before the default
# backend is filled (_handle_attention_backend_compatibility), so an unset backend is None there
# and the launch fails on any device until 0.5.22's fill (SLIDING_FILLS) sets one first. The
# first release that checks each architecture:
EXAONE_BACKENDS = ("fa3", "triton", "trtllm_mha")
EXAONE_CHECKED: dict[str, Release] = {
    "Exaone4ForCausalLM": (5, 9, 0),
    "ExaoneMoEForCausalLM": (5, 9, 0),
    "ExaoneMoeForCausalLM": (5, 22, 0),
}


def exaone_backend_reason(
    architecture: str, sliding: bool, config: dict[str, Any], rel: Release, hip: bool
) -> str | None:
    """Why the release refuses a sliding-window EXAONE launch's attention backend (None: it
    does not); `sliding`: the model has sliding-window layers."""
    since = EXAONE_CHECKED.get(architecture)
    if not sliding or since is None or rel < since:
        return None
    backend = config.get("attention_backend")
    if backend is None and _within(SLIDING_FILLS.get(architecture), rel):
        return None  # filled before the check
    if backend in EXAONE_BACKENDS:
        return None
    got = "none set" if backend is None else str(backend)
    pick = "triton" if hip else "fa3, triton or trtllm_mha"
    return (
        f"{architecture} with sliding-window layers: SGLang asserts the attention backend is "
        f"fa3, triton or trtllm_mha (got {got}), so the launch fails; set --attention-backend "
        f"{pick}"
    )


def exaone_backend_check(
    card: ModelCard, config: dict[str, Any], rel: Release, hip: bool, reasons: list[str]
) -> None:
    """exaone_backend_reason for `card` (sliding-window layers from its card), into `reasons`."""
    sliding = card.local_attention is not None and card.local_attention.kind == "sliding"
    reason = exaone_backend_reason(card.architecture, sliding, config, rel, hip)
    if reason is not None:
        reasons.append(reason)


def _within(span: tuple[Release, Release | None] | None, rel: Release) -> bool:
    return span is not None and span[0] <= rel and (span[1] is None or rel < span[1])


def fill_not_aiter(architecture: str, rel: Release, sliding: bool = False) -> bool:
    """Whether the release's model-specific adjustments fill a non-aiter backend on ROCm;
    `sliding`: the model has sliding-window layers."""
    if _within(NOT_AITER_FILLS.get(architecture), rel):
        return True
    return sliding and _within(SLIDING_FILLS.get(architecture), rel)


def mla_default_is_aiter(kv_heads: int, tp: int, spec: str | None, rel: Release) -> bool:
    """Whether an MLA model with no --attention-backend gets aiter on ROCm (else triton):
    `kv_heads` is the config's num_key_value_heads (num_attention_heads without it)."""
    if max(1, kv_heads // tp) not in AITER_MLA_HEADS:
        return False
    return spec is None or rel >= MLA_SPEC_IGNORED_FROM


def default_backend_is_aiter(
    *,
    architecture: str,
    dsa: bool,
    mla: bool,
    kv_heads: int,
    tp: int,
    spec: str | None,
    v: Version,
    rel: Release,
    sliding: bool = False,
) -> bool:
    """Whether the backend SGLang fills in for an unset --attention-backend on ROCm is aiter."""
    if dsa_backend_filled(architecture, dsa, v) or fill_not_aiter(architecture, rel, sliding):
        return False
    return not mla or mla_default_is_aiter(kv_heads, tp, spec, rel)


def aiter_factor(config: dict[str, Any], version: str, v: Version, context: int) -> float | None:
    """With the aiter backend and a context over 8192 SGLang scales mem_fraction_static, a
    user-set value included: x0.85 from 0.4.7 (model_runner), x0.90 in 0.5.4.post1 only, x0.85
    again from 0.5.4.post2 (server_args). None where it does not apply."""
    backend = config.get("attention_backend")
    if backend not in (None, "aiter") or context <= 8192 or v < (0, 4, 7):
        return None
    return 0.90 if release_of(version, v) == (5, 4, 1) else 0.85


def release_of(version: str, v: Version) -> Release:
    """sglang_history.release of `version`, else the planning version's (minor, patch, 0)."""
    from autotune.planner import sglang_history as history

    return history.release(version) or (v[1], v[2], 0)
