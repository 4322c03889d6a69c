"""What SGLang's default mem_fraction_static holds back for the prefill (piecewise) CUDA graph,
0.5.10 .. 0.5.14.

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

From 0.5.15 the prefill graph's default backend on CUDA is `breakable`, with its own rules:
not modelled here (no reserve).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FIRST = (0, 5, 10)
LAST = (0, 5, 14)
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
# Switches that turn the graph off when set (truthy), and the first release that reads them.
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


def prefill_graph_reserve_mib(
    config: dict[str, Any], v: tuple[int, int, int], cps: int, model: GraphFacts
) -> float:
    """MiB the release's mem-fraction heuristic reserves for the piecewise (prefill) CUDA graph
    of `model` with chunked prefill `cps` (0 outside 0.5.10 .. 0.5.14 or where it is off)."""
    if not FIRST <= v <= LAST:
        return 0.0
    on = _user_choice(config, v)
    if on is None:
        on = _compatible(config, v, model)
    if not on:
        return 0.0
    if model.mla:
        return MLA_RESERVE_MIB
    sizes_key = "piecewise_cuda_graph_tokens" if v < LAST else "cuda_graph_bs_prefill"
    sizes = config.get(sizes_key)
    if isinstance(sizes, list | tuple) and sizes:
        return float(len(sizes) * PER_SIZE_MIB)
    max_key = "piecewise_cuda_graph_max_tokens" if v < LAST else "cuda_graph_max_bs_prefill"
    top = config.get(max_key)
    if top is None:
        top = cps
        if config.get("max_total_tokens") is not None:
            top = min(top, int(config["max_total_tokens"]))
    top = int(top)
    if v >= (0, 5, 13) and config.get("context_length") is not None:
        top = min(top, int(config["context_length"]))
    return float(len(capture_sizes(top)) * PER_SIZE_MIB)
