"""What SGLang's default mem_fraction_static holds back for the prefill (piecewise) CUDA graph,
from 0.5.10.

0.5.10 turned the piecewise CUDA graph on by default (`--disable-piecewise-cuda-graph`, default
False; 0.5.9 had `--enable-piecewise-cuda-graph`, default False), and the heuristic of
`_handle_gpu_memory_settings` reserves for it before its 10 GiB floor:

    reserved_mem += len(piecewise_cuda_graph_tokens) * 8     # MiB, a non-MLA model
    reserved_mem += 1.5 * 1024                               # an MLA model

The captured token counts come from `_generate_piecewise_cuda_graph_tokens` (4..32 by 4,
48..256 by 16, 288..512 by 32, 576..1024 by 64, 1280..4096 by 256, then by 512) up to
`piecewise_cuda_graph_max_tokens`: the chunked prefill size (2048 for MLA), capped by
`--max-total-tokens` and, from 0.5.13, by an explicit `--context-length`. 0.5.14 renamed it the
prefill CUDA graph (`cuda_graph_config.prefill`, backend tc_piecewise by default; the sizes
`_generate_prefill_cuda_graph_batch_sizes`, the same list) with the same reserve.

`_handle_piecewise_cuda_graph` (0.5.10 .. 0.5.13) and `_disable_tc_piecewise_cudagraph_if_
incompatible` (0.5.14) turn it off, before the heuristic runs, for the architectures listed in
model_config (`piecewise_cuda_graph_disabled_model_archs`, and DeepSeek NSA models in 0.5.10 ..
0.5.12), speculative decoding (0.5.10 only), DP attention, torch.compile, pipeline parallelism,
non-CUDA devices (ROCm), an MoE all-to-all backend, LoRA, multimodal models (0.5.14: unless
listed as supported), GGUF, diffusion LLMs, CPU offload or the hierarchical cache,
deterministic inference, PD disaggregation, symmetric memory, the expert distribution
recorder, context parallelism, graph debugging (0.5.11+) and DSA prefill context parallelism
(0.5.13+). `--enforce-piecewise-cuda-graph` (0.5.10 .. 0.5.13) or an explicit prefill backend
(0.5.14) skips those rules.

From 0.5.15 the prefill graph's default backend on CUDA is `breakable` (elsewhere tc_piecewise,
which ROCm turns off, or from 0.5.22 none), with the same reserve and sizes but its own
auto-disable rules (`_disable_breakable_cudagraph_if_incompatible`, from 0.5.19
arg_groups/cuda_graph_hook.py; the reserve moved to memory_hook.reserve_for_graph_mb): MLA
(0.5.15 .. 0.5.16; 0.5.17 unless DSA), NemotronH (0.5.17), DeepSeek V4, KDA linear attention
(0.5.20+; Kimi Linear here), context and decode-context parallelism, two-batch overlap
(0.5.17+), LoRA and DP attention (0.5.15 .. 0.5.16), an MoE all-to-all backend (0.5.15 ..
0.5.16; from 0.5.17 one other than deepep, megamoe or flashinfer), multimodal models (from
0.5.16 unless listed as breakable-safe). 0.5.17 adds 1 GiB with DeepEP; 0.5.19 counts no
prefill graph on a PD decode server. The context-length cap holds in 0.5.13 .. 0.5.16. Not
modelled: pipeline parallelism's smaller default (0.5.19+), model-specific defaults (Inkling,
MuseGlimmer), post-capture KV sizing (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING), and 0.5.20 ..
0.5.21's switch to tc_piecewise (with its rules) for a multimodal model listed as piecewise- but
not breakable-safe (MiniMaxM3Sparse).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FIRST = (0, 5, 10)
LAST = (0, 5, 14)  # the last release of tc_piecewise by default on CUDA
BREAKABLE = (0, 5, 15)
MLA_RESERVE_MIB = 1.5 * 1024
PER_SIZE_MIB = 8
_BASE_ARCHS = frozenset({"Qwen3NextForCausalLM", "BailingMoeV2_5ForCausalLM", "LLaDAModelLM"})
_V4_ARCHS = frozenset({"DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN"})
_DSA_ARCHS = frozenset({"DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"})
# model_config.piecewise_cuda_graph_disabled_model_archs, by the release that changed it.
DISABLED_ARCHS: dict[tuple[int, int, int], frozenset[str]] = {
    (0, 5, 10): _BASE_ARCHS | _DSA_ARCHS,
    (0, 5, 12): _BASE_ARCHS | _DSA_ARCHS | _V4_ARCHS,
    (0, 5, 13): _BASE_ARCHS | _V4_ARCHS,
}
# 0.5.14: multimodal architectures that keep the prefill graph.
MULTIMODAL_SUPPORTED = frozenset(
    {
        "Cohere2VisionForConditionalGeneration",
        "MiniMaxM3SparseForCausalLM",
        "MiniMaxM3SparseForConditionalGeneration",
    }
)
_QWEN35_VL = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
_MM_18 = _QWEN35_VL | {
    "InternS2MobiusForConditionalGeneration",
    "KimiK25ForConditionalGeneration",
    "KimiK3ForConditionalGeneration",
    "MuseGlimmerForConditionalGeneration",
}
_MM_19 = _MM_18 | {"Cohere2VisionForConditionalGeneration", "PaddleOCRVLForConditionalGeneration"}
_MM_20 = _MM_19 | {"Glm5NextForConditionalGeneration"}
_MM_22 = _MM_20 | {
    "MiniMaxM3SparseForCausalLM",
    "MiniMaxM3SparseForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration",
}
# model_config.multimodal_breakable_cuda_graph_supported_model_archs, by release (none in 0.5.15).
MULTIMODAL_BREAKABLE: dict[tuple[int, int, int], frozenset[str]] = {
    (0, 5, 15): frozenset(),
    (0, 5, 16): _QWEN35_VL,
    (0, 5, 18): frozenset(_MM_18),
    (0, 5, 19): frozenset(_MM_19),
    (0, 5, 20): frozenset(_MM_20),
    (0, 5, 22): frozenset(_MM_22),
    (0, 5, 23): frozenset(_MM_22 | {"MuseSparkForConditionalGeneration"}),
}
# Speculative algorithms whose target prefill keeps every position's hidden state for the draft:
# SpeculativeAlgorithm.is_eagle()'s, NEXTN being EAGLE under another name.
_EAGLE_FULL_TARGET = frozenset({"EAGLE", "EAGLE3", "NEXTN"})
NEMOTRON_H = frozenset({"NemotronHForCausalLM", "NemotronHPuzzleForCausalLM"})
DEEPSEEK_V4 = _V4_ARCHS | {"DeepseekV4ForCausalLMDSpark"}
_A2A_OK = frozenset({"none", "deepep", "megamoe", "flashinfer"})
# The tc_piecewise rules' switches that turn the graph off when set (truthy), and the first
# release that reads them. Only _compatible reads them, so only for 0.5.10 .. 0.5.14, whose
# default backend that is; from 0.5.15 the breakable rules (_breakable_ok) decide, and 0.5.22
# drops the tc_piecewise rules (DP attention is then no switch, nor --attn-dp-size).
_OFF_SWITCHES: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("enable_dp_attention", FIRST),
    ("enable_torch_compile", FIRST),
    ("lora_paths", FIRST),
    ("enable_lora", FIRST),
    ("dllm_algorithm", FIRST),
    ("enable_hierarchical_cache", FIRST),
    ("enable_deterministic_inference", FIRST),
    ("enable_symm_mem", FIRST),
    ("enable_eplb", FIRST),
    ("expert_distribution_recorder_mode", FIRST),
    ("debug_cuda_graph", (0, 5, 11)),
    ("enable_dsa_prefill_context_parallel", (0, 5, 13)),
)


@dataclass(frozen=True)
class GraphFacts:
    """What the auto-disable rules read of the model and device: the architecture, latent
    attention (SGLang's MLA backend), a vision tower, a ROCm device, the DSA indexer."""

    architecture: str = ""
    mla: bool = False
    multimodal: bool = False
    hip: bool = False
    dsa: bool = False


def capture_sizes(max_tokens: int) -> list[int]:
    """The token counts the piecewise (prefill) graph captures up to `max_tokens`."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_tokens + 1, 512))
    )
    return [s for s in sizes if s <= max_tokens]


def disabled_archs(v: tuple[int, int, int]) -> frozenset[str]:
    """The architectures the release keeps off the piecewise graph."""
    since = max((k for k in DISABLED_ARCHS if k <= v), default=FIRST)
    return DISABLED_ARCHS[since]


def _table(
    table: dict[tuple[int, int, int], frozenset[str]], v: tuple[int, int, int]
) -> frozenset[str]:
    return table[max(k for k in table if k <= v)]


def _breakable_ok(config: dict[str, Any], v: tuple[int, int, int], m: GraphFacts) -> bool:
    """Whether 0.5.15+'s breakable-graph rules leave it on (module docstring)."""
    old = v < (0, 5, 17)
    if m.mla and (old or (v == (0, 5, 17) and not m.dsa)):
        return False
    if (v == (0, 5, 17) and m.architecture in NEMOTRON_H) or m.architecture in DEEPSEEK_V4:
        return False
    if v >= (0, 5, 20) and m.architecture == "KimiLinearForCausalLM":
        return False
    if m.multimodal and m.architecture not in _table(MULTIMODAL_BREAKABLE, v):
        return False
    switches = ["lora_paths", "enable_lora", "enable_dp_attention"] if old else []
    if v >= (0, 5, 17):
        switches.append("enable_two_batch_overlap")
    if any(config.get(k) for k in switches):
        return False
    if int(config.get("attn_cp_size") or 1) > 1 or int(config.get("dcp_size") or 1) > 1:
        return False
    a2a = str(config.get("moe_a2a_backend") or "none")
    return a2a == "none" if old else a2a in _A2A_OK


def _user_choice(config: dict[str, Any], v: tuple[int, int, int]) -> bool | None:
    """On/off as the user's flags fix it, skipping the compatibility rules; None: not fixed."""
    if v < LAST:
        if config.get("enforce_piecewise_cuda_graph"):
            return True
        return False if config.get("disable_piecewise_cuda_graph") else None
    backend = config.get("cuda_graph_backend_prefill")
    if backend is not None:
        return str(backend) != "disabled"
    if config.get("disable_cuda_graph") or config.get("disable_prefill_cuda_graph"):
        return False
    return None


def _compatible(
    config: dict[str, Any],
    v: tuple[int, int, int],
    m: GraphFacts,
) -> bool:
    """Whether the release's auto-disable rules leave the graph on (module docstring)."""
    if m.architecture in disabled_archs(v) or (m.dsa and v < (0, 5, 13)):
        return False
    if m.multimodal and not (v >= LAST and m.architecture in MULTIMODAL_SUPPORTED):
        return False
    if m.hip or (v == FIRST and config.get("speculative_algorithm")):
        return False
    if any(config.get(key) for key, since in _OFF_SWITCHES if v >= since):
        return False
    if str(config.get("load_format") or "") == "gguf" or config.get("quantization") == "gguf":
        return False
    if int(config.get("pp_size") or 1) > 1 or int(config.get("attn_cp_size") or 1) > 1:
        return False
    if float(config.get("cpu_offload_gb") or 0) > 0:
        return False
    if str(config.get("disaggregation_mode") or "null") != "null":
        return False
    return str(config.get("moe_a2a_backend") or "none") == "none"


def _graph_on(config: dict[str, Any], v: tuple[int, int, int], model: GraphFacts) -> bool:
    """Whether the release runs the piecewise (prefill) CUDA graph for this launch."""
    if v < FIRST or (v >= (0, 5, 19) and config.get("disaggregation_mode") == "decode"):
        return False
    on = _user_choice(config, v)
    if on is None and v >= BREAKABLE:
        on = not model.hip and _breakable_ok(config, v, model)
    elif on is None:
        on = _compatible(config, v, model)
    return bool(on)


def _sizes(config: dict[str, Any], v: tuple[int, int, int], cps: int) -> list[int]:
    """The token counts the launch captures: the user's list, else capture_sizes up to its cap."""
    sizes_key = "piecewise_cuda_graph_tokens" if v < LAST else "cuda_graph_bs_prefill"
    sizes = config.get(sizes_key)
    if isinstance(sizes, list | tuple) and sizes:
        return sorted(int(s) for s in sizes)
    max_key = "piecewise_cuda_graph_max_tokens" if v < LAST else "cuda_graph_max_bs_prefill"
    top = config.get(max_key)
    if top is None:
        top = cps
        if config.get("max_total_tokens") is not None:
            top = min(top, int(config["max_total_tokens"]))
    top = int(top)
    if (0, 5, 13) <= v <= (0, 5, 16) and config.get("context_length") is not None:
        top = min(top, int(config["context_length"]))
    return capture_sizes(top)


def _eagle_on_tc_piecewise(config: dict[str, Any], v: tuple[int, int, int]) -> bool:
    """Whether an EAGLE-family target's prefill graph is one it never replays: the target's
    extend asks for every position's hidden state (CaptureHiddenMode.FULL, eagle_worker(_v2);
    STANDALONE's too in 0.5.11 only) and tc_piecewise captures none (NULL) unless the server
    returns hidden states. 0.5.11 .. 0.5.13 capture it and can_run rejects the mismatch; from
    0.5.14 the target is routed to the eager runner (sglang#28386): off any backend but
    breakable through 0.5.18, off tc_piecewise alone from 0.5.19 (the full prefill graph then
    captures FULL too). The breakable graph (0.5.15's default on CUDA, 0.5.14 by choice)
    captures FULL for it. The reserve is the mem-fraction heuristic's either way."""
    spec = str(config.get("speculative_algorithm") or "").upper()
    full = spec in _EAGLE_FULL_TARGET or (spec == "STANDALONE" and v < (0, 5, 12))
    returns_all = config.get("enable_return_hidden_states") or (
        v >= (0, 5, 17) and config.get("return_hidden_states_mode") == "full"
    )
    if not full or returns_all:
        return False
    backend = str(config.get("cuda_graph_backend_prefill") or "")
    if v < BREAKABLE:
        return not (v >= LAST and backend == "breakable")
    if v < (0, 5, 19):
        return backend in ("tc_piecewise", "full")
    return backend == "tc_piecewise"


def prefill_graph_tokens(
    config: dict[str, Any], v: tuple[int, int, int], cps: int, model: GraphFacts
) -> int:
    """The largest prefill forward (in tokens) the launch replays from its prefill CUDA graph;
    0 where the graph is off or never replayed, so every prefill forward runs eagerly."""
    if not _graph_on(config, v, model) or _eagle_on_tc_piecewise(config, v):
        return 0
    return max(_sizes(config, v, cps), default=0)


def prefill_graph_reserve_mib(
    config: dict[str, Any], v: tuple[int, int, int], cps: int, model: GraphFacts
) -> float:
    """MiB the release's mem-fraction heuristic reserves for the piecewise (prefill) CUDA graph
    of `model` with chunked prefill `cps` (0 before 0.5.10 or where it is off)."""
    if not _graph_on(config, v, model):
        return 0.0
    deepep = 1024.0 if v >= (0, 5, 17) and config.get("moe_a2a_backend") == "deepep" else 0.0
    if model.mla:
        return MLA_RESERVE_MIB + deepep
    return float(len(_sizes(config, v, cps)) * PER_SIZE_MIB) + deepep
