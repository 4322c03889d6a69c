"""vLLM's releases as the planner knows them (0.4.0 .. 0.34.x), and the rules of the releases
before the current model (0.4.0 .. 0.9.2: the V0 engine, and the early V1 engine of 0.8.0 ..
0.9.0), each as the release ships it (read from the PyPI wheels of 0.4.0.post1 .. 0.4.3 and
0.5.0 .. 0.9.2: engine/arg_utils.py, config.py, worker/, v1/worker/, platforms/cuda.py):

- which engine a launch runs (VLLM_USE_V1 defaults to 1 from 0.8.0, and
  EngineArgs._is_v1_supported_oracle falls back to V0);
- the scheduler defaults (max_num_seqs, max_num_batched_tokens, chunked prefill);
- the KV cache geometry (CacheEngine.get_cache_block_size for V0, AttentionSpec.page_size_bytes
  for V1), including DeepSeek's head size and MLA by release;
- the CUDA-graph capture sizes (graphs are captured after the KV cache in all these releases).

The memory accounting of those releases is in vllm_legacy.py. The flag catalog (autotune.engines.
vllm.flags) keeps its own range (0.10.0 .. 0.34.0) for launching; `planner_version` is the
planner's own parse so that older logs and launches can be planned.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Literal

from autotune.errors import ConfigError
from autotune.hardware.gpu_spec import device_capability
from autotune.hardware.gpus import GPUSpec
from autotune.models.card import DTYPE_BYTES, ModelCard
from autotune.versions import Version, try_version

Engine = Literal["v0", "v1"]
FIRST_RELEASE = "0.4.0"
# From here the planner's current model (vllm.py, vllm_memory.py, vllm_kv.py) applies to V1
# launches: memory_profiling from an initial snapshot, the startup free-memory check.
CURRENT_MODEL_SINCE = "0.9.1"
V1_DEFAULT_SINCE = "0.8.0"  # vllm/envs.py: VLLM_USE_V1 defaults to "1"
# From 0.11.0 vllm/engine/llm_engine.py is V1's engine under the old name (the 0.11.0 wheel: a
# 212-byte alias; 0.10.2 still ships V0's LLMEngine): no launch falls back to V0.
V0_REMOVED_SINCE = "0.11.0"
# First release whose model registry (model_executor/models/__init__.py, later registry.py)
# has the architecture, read from the wheels; Glm4Moe is in none up to 0.9.2.
ARCHITECTURE_SINCE_HISTORY = {
    "DeepseekV2ForCausalLM": "0.5.1",
    "MllamaForConditionalGeneration": "0.6.2",
    "DeepseekV3ForCausalLM": "0.6.6",
    "Gemma3ForCausalLM": "0.8.0",
    "Gemma3ForConditionalGeneration": "0.8.0",
    "Llama4ForConditionalGeneration": "0.8.3",
    "Qwen3ForCausalLM": "0.8.4",
    "Qwen3MoeForCausalLM": "0.8.4",
    "Glm4MoeForCausalLM": "0.10.0",
}
# ModelConfig.is_v1_compatible is False for these (encoder-decoder, Mamba): V0 in 0.8 .. 0.9.
_V0_ONLY_ARCHITECTURES = {
    "MllamaForConditionalGeneration",
    "WhisperForConditionalGeneration",
    "BartForConditionalGeneration",
    "Florence2ForConditionalGeneration",
    "JambaForCausalLM",
    "MambaForCausalLM",
    "Mamba2ForCausalLM",
    "FalconMambaForCausalLM",
    "BambaForCausalLM",
    "Zamba2ForCausalLM",
    "NemotronHForCausalLM",
}
# Speculative methods V1 runs, by first release (the oracle's is_ngram/is_eagle_enabled).
_V1_SPEC_METHODS = (
    ("0.9.0", {"ngram", "[ngram]", "medusa", "eagle", "eagle3", "deepseek_mtp"}),
    ("0.8.5", {"ngram", "[ngram]", "eagle", "eagle3"}),
    ("0.8.0", {"ngram", "[ngram]"}),
)


@functools.cache
def planner_version(version: str) -> str:
    """The release the planner plans `version` as: from 0.10.0 the catalogued release it builds
    on (`0.11.0.post2`, `0.20.2rc1.dev9+g01d4d1ad3` and `0.34.1` use 0.11.0, 0.20.2 and 0.34.0),
    before that its base release (`0.6.4.post1` -> 0.6.4, `0.6.3.dev114+g4f95ffee` -> 0.6.3: a
    development build is planned as the release it leads to).

    Raises:
        ConfigError: not a version, or outside 0.4.0 .. 0.34.x, naming --engine-version.
    """
    from autotune.engines.vllm.flags import supported_versions

    catalogued = supported_versions()
    parsed = try_version(version) if isinstance(version, str) else None
    base = Version(parsed.base_version) if parsed is not None and not parsed.epoch else None
    last = Version(catalogued[-1])
    if base is None or base < Version(FIRST_RELEASE) or base.release[:2] > last.release[:2]:
        raise ConfigError(
            f"unsupported vLLM version {version!r}; the planner plans the releases "
            f"{FIRST_RELEASE} to {last.major}.{last.minor}.x (launching needs a catalogued "
            f"release, {catalogued[0]} to {catalogued[-1]})",
            field="--engine-version",
        )
    if base < Version(catalogued[0]):
        return str(base)
    return [v for v in catalogued if Version(v) <= base][-1]


def at_least(version: str, first: str) -> bool:
    """Whether `version` is the release `first` or newer (for catalogued releases the same
    answer as the flag catalog's at_least)."""
    return Version(planner_version(version)) >= Version(first)


def compute_capability(gpu: GPUSpec) -> tuple[int, int] | None:
    """(major, minor) of an NVIDIA GPU (`sm_89` -> (8, 9)); None for AMD."""
    return device_capability(gpu.arch) if gpu.vendor == "nvidia" else None


def check_version_for_model(card: ModelCard, version: str) -> None:
    """Refuse a hybrid (linear-attention) model before 0.10.0: neither V0's MambaCacheManager
    state nor 0.9.2's MambaSpec layout is modelled here.

    Raises:
        ConfigError: naming --engine-version.
    """
    if card.is_hybrid and not at_least(version, "0.10.0"):
        raise ConfigError(
            f"vLLM {version} predates the hybrid KV cache the planner models for "
            f"{card.architecture} (linear-attention layers): plan it on 0.10.0 or later",
            field="--engine-version",
        )


def check_history_architecture(card: ModelCard, version: str, reasons: list[str]) -> None:
    """An architecture newer than an old release's model registry is a reason."""
    since = ARCHITECTURE_SINCE_HISTORY.get(card.architecture)
    if since is not None and not at_least(version, since):
        reasons.append(
            f"{card.architecture} is not in vLLM {version}'s model registry (first in {since})"
        )


def json_mapping(value: object) -> dict[str, Any]:
    """A dict-valued flag as a config holds it: a dict, or its JSON text (--flag '{...}');
    anything unreadable counts as empty (the planner predicts from the engine's defaults)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, dict) else {}


def speculative_settings(cfg: dict[str, Any]) -> tuple[dict[str, Any], str | None, int]:
    """(speculative_config object, method or draft model, num_speculative_tokens) as given:
    the pseudo fields, a speculative_config object or its JSON text, or V0's
    --speculative-model; unreadable JSON counts as none."""
    spec = json_mapping(cfg.get("speculative_config"))
    found = (
        cfg.get("speculative_method")
        or spec.get("method")
        or cfg.get("speculative_model")
        or spec.get("model")
    )
    num = int(cfg.get("num_speculative_tokens") or spec.get("num_speculative_tokens") or 0)
    return spec, (str(found) if found else None), (num if found else 0)


def v0_fallback(card: ModelCard, gpu: GPUSpec, cfg: dict[str, Any], version: str) -> str | None:
    """Why a 0.8 .. 0.9 launch runs on V0 (EngineArgs._is_v1_supported_oracle), or None."""
    cc = compute_capability(gpu)
    kv_dtype = str(cfg.get("kv_cache_dtype") or "auto")
    fa3_fp8 = at_least(version, "0.8.2") and kv_dtype.startswith("fp8") and cc == (9, 0)
    method = speculative_settings(cfg)[1]
    allowed = next((m for first, m in _V1_SPEC_METHODS if at_least(version, first)), set())
    pp = int(cfg.get("pipeline_parallel_size") or 1)
    checks = (
        (cc is not None and cc[0] < 8, "compute capability < 8.0"),
        (kv_dtype != "auto" and not fa3_fp8, f"--kv-cache-dtype {kv_dtype}"),
        (str(cfg.get("dtype") or card.dtype) in ("float32", "float"), "--dtype float32"),
        (str(cfg.get("quantization") or "") == "gguf", "--quantization gguf"),
        (card.architecture in _V0_ONLY_ARCHITECTURES, card.architecture),
        (int(cfg.get("num_scheduler_steps") or 1) > 1, "--num-scheduler-steps"),
        (method is not None and method not in allowed, f"speculative method {method}"),
        (pp > 1 and cfg.get("distributed_executor_backend") != "ray", "PP without Ray"),
        (bool(cfg.get("enable_lora")) and not at_least(version, "0.8.1"), "LoRA"),
        (gpu.vendor != "nvidia", f"{gpu.vendor.upper()} GPU (not CUDA)"),
    )
    return next((why for hit, why in checks if hit), None)


def engine_of(
    card: ModelCard, gpu: GPUSpec, cfg: dict[str, Any], version: str, assumptions: list[str]
) -> Engine:
    """The engine a launch of `version` runs: V0 before 0.8.0 (V1 only opted in with
    vllm_use_v1, from 0.6.5 here), V1 from 0.8.0 unless the oracle falls back or
    vllm_use_v1 (VLLM_USE_V1) is false, V1 always from 0.11.0 (V0_REMOVED_SINCE)."""
    if at_least(version, V0_REMOVED_SINCE):
        return "v1"
    opt = cfg.get("vllm_use_v1")
    if not at_least(version, V1_DEFAULT_SINCE):
        if opt and at_least(version, "0.6.5"):
            assumptions.append(f"VLLM_USE_V1=1: the V1 engine of vLLM {version}")
            return "v1"
        return "v0"
    if opt is not None and not opt:
        assumptions.append("VLLM_USE_V1=0: the V0 engine")
        return "v0"
    why = v0_fallback(card, gpu, cfg, version)
    if why is None:
        return "v1"
    assumptions.append(f"vLLM {version} falls back to the V0 engine: {why}")
    return "v0"


def auto_chunked_prefill(
    card: ModelCard, gpu: GPUSpec, cfg: dict[str, Any], version: str, max_len: int
) -> bool:
    """V0's default for enable_chunked_prefill (EngineArgs.create_engine_config, from 0.8.0
    _set_default_args_v0): on above 32K context from 0.5.3 unless an exclusion applies."""
    if max_len <= 32768 or not at_least(version, "0.5.3"):
        return False
    local = card.local_attention
    excluded = (
        local is not None and local.kind == "sliding",  # get_sliding_window() is not None
        speculative_settings(cfg)[1] is not None,
        bool(cfg.get("enable_lora")),
        bool(cfg.get("enable_prefix_caching")) and not at_least(version, "0.6.1"),
        card.is_multimodal and at_least(version, "0.6.1"),
        card.latent_attention is not None and at_least(version, "0.8.0"),
        gpu.vendor != "nvidia" and at_least(version, "0.6.5"),  # is_rocm / not is_cuda
    )
    return not any(excluded)


# Rope types whose factor _get_and_verify_max_len (config.py) leaves out of the derived length:
# none in 0.4.1 (it multiplies every config's factor), "su" in 0.5.0, and "su", "longrope",
# "llama3" in 0.6.3.post1 .. 0.6.6.post1 (the wheels read; releases between take the rule of the
# last one read before them). No release before 0.5.3 runs a llama3 config (its rope type is
# unknown to them), so "llama3" is left out everywhere.
_UNSCALED_ROPE = (("0.6.3", {"su", "longrope", "llama3"}), ("0.5.0", {"su", "llama3"}))


def derived_max_model_len(card: ModelCard, version: str) -> int:
    """The default max_model_len a V0-era release derives from the config: max_position_
    embeddings (a yarn config's original_max_position_embeddings) times the rope-scaling
    factor, unless the release leaves the type out (_UNSCALED_ROPE). deepseek-coder's linear
    factor 4 makes its 16K config a 64K default."""
    rs = card.rope_scaling
    left_out = next((k for first, k in _UNSCALED_ROPE if at_least(version, first)), {"llama3"})
    if rs is None or rs.kind in left_out:
        return card.max_position_embeddings
    base = card.max_position_embeddings
    if rs.kind == "yarn" and rs.original_max_position_embeddings:
        base = rs.original_max_position_embeddings
    return int(base * rs.factor)


def v0_batched_tokens(
    card: ModelCard, cfg: dict[str, Any], version: str, chunked: bool, limits: tuple[int, int]
) -> int:
    """V0's default max_num_batched_tokens (SchedulerConfig) for (max_num_seqs, max_len):
    max(max_len, 2048), or with chunked prefill 768 (0.4.1), 512 (0.4.2 .. 0.6.4), 2048 (0.6.5+;
    multi-step scheduling keeps max(max_len, 2048) from 0.6.3)."""
    max_num_seqs, max_len = limits
    steps = int(cfg.get("num_scheduler_steps") or 1)
    tokens = max(max_len, 2048)
    if chunked and not (steps > 1 and at_least(version, "0.6.3")):
        chunks = (("0.6.5", 2048), ("0.4.2", 512), ("0.4.1", 768), ("0.4.0", tokens))
        tokens = next(n for first, n in chunks if at_least(version, first))
    if card.is_multimodal and at_least(version, "0.6.0"):
        tokens = max(tokens, 5120 if at_least(version, "0.6.3") else 4096)
    if at_least(version, "0.9.0"):
        tokens = min(tokens, max_num_seqs * max_len)
    return tokens


def v1_defaults(gpu: GPUSpec, version: str) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of an early V1 `vllm serve`
    (EngineArgs._set_default_args_v1, 0.8.0 .. 0.9.0; opt-in V1 before): 8192 tokens on H100 /
    H200 (0.7.0 .. 0.8.4), on 70 GiB+ cards (0.8.5), not A100 (0.9.0); 1024 sequences up to
    0.8.3, then with the 8192-token pair (0.8.4 included: its wheel ties both to H100 / H200)."""
    name = " ".join((gpu.name, gpu.label, gpu.cuda_name or "")).lower()
    hopper = "h100" in name or "h200" in name
    big = gpu.memory_mib >= 70 * 1024
    if at_least(version, "0.9.0"):
        large = big and "a100" not in name
    elif at_least(version, "0.8.5"):
        large = big
    else:
        large = hopper
    tokens = 8192 if large else 2048
    if not at_least(version, "0.7.0"):
        tokens = 2048
    if at_least(version, "0.8.4"):
        return (1024 if large else 256), tokens
    return 1024, tokens


def mla_active(card: ModelCard, version: str) -> bool:
    """DeepSeek MLA caches the latent from 0.7.1 (ModelConfig.use_mla)."""
    return card.latent_attention is not None and at_least(version, "0.7.1")


def history_block_size(card: ModelCard, gpu: GPUSpec, cfg: dict[str, Any], version: str) -> int:
    """The KV block size: 16, or 64 for MLA with FlashMLA (Hopper) from 0.8.0 (platforms/
    cuda.py forces it over any --block-size)."""
    flashmla = mla_active(card, version) and compute_capability(gpu) == (9, 0)
    if flashmla and at_least(version, "0.8.0"):
        return 64
    return int(cfg.get("block_size") or 16)


def kv_dtype_bytes(card: ModelCard, cfg: dict[str, Any], kv_dtype: str) -> float:
    """Bytes per KV element: the model dtype with kv_cache_dtype auto, else the fp8 byte."""
    if kv_dtype == "auto":
        dtype = str(cfg.get("dtype") or "auto")
        return DTYPE_BYTES.get(dtype, DTYPE_BYTES.get(card.dtype, 2.0))
    if kv_dtype.startswith("fp8"):
        return 1.0
    raise ConfigError(
        f"unknown kv_cache_dtype {kv_dtype!r} for vLLM before 0.9.1; valid: auto, fp8, "
        "fp8_e4m3, fp8_e5m2",
        field="kv_cache_dtype",
    )


def history_bytes_per_token(
    card: ModelCard, cfg: dict[str, Any], version: str, engine: Engine, tp: int
) -> int:
    """KV bytes of one token in one attention layer on one rank, as the release sizes it
    (CacheEngine.get_cache_block_size / AttentionSpec.page_size_bytes, divided by block_size)."""
    b = kv_dtype_bytes(card, cfg, str(cfg.get("kv_cache_dtype") or "auto"))
    mla = card.latent_attention
    if mla is not None and mla_active(card, version):
        k = (mla.kv_lora_rank + mla.qk_rope_head_dim) * b  # one latent + rope key, V = 0
        aligned = engine == "v0" and not at_least(version, "0.8.0") and at_least(version, "0.7.2")
        return int(-(-k // 256) * 256 if aligned else k)  # VLLM_CUDA_MEM_ALIGN_KV_CACHE
    if mla is not None:  # DeepSeek before MLA: every query head has a K and a V
        if at_least(version, "0.7.0"):
            head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        elif at_least(version, "0.5.1"):
            head = 256  # 192 padded to a FlashAttention head size
        else:
            head = card.hidden_size // card.num_attention_heads
        heads = card.num_attention_heads if at_least(version, "0.5.1") else card.num_kv_heads
        return int(2 * max(1, heads // tp) * head * b)
    return int(2 * max(1, card.num_kv_heads // tp) * card.head_dim * b)


def history_capture_sizes(
    engine: Engine, version: str, max_num_seqs: int, max_num_batched_tokens: int
) -> list[int]:
    """Default CUDA-graph capture sizes: V0 decode batches up to the smallest size that holds
    max_num_seqs (at most 256 before 0.6.0); V1 [1, 2, 4] + 8 .. 512 by 8 (67 graphs; from 0.8.0 at most
    max_num_batched_tokens)."""
    if engine == "v1":
        sizes = [1, 2, 4, *range(8, 513, 8)]
        if at_least(version, "0.8.0"):
            sizes = [s for s in sizes if s <= max_num_batched_tokens]
        return sizes
    top = 256 if not at_least(version, "0.6.0") else 8192
    sizes = [1, 2, 4, *range(8, top + 1, 8)]
    cap = next((s for s in sizes if s >= max_num_seqs), top)  # the smallest that holds all
    return [s for s in sizes if s <= cap]
