"""A ModelCard from config.json values alone, for models whose weights are not on this machine.

The architecture comes from the config as `card_from_dir` reads it; the bytes per component are
counted from the shapes (the parameters each engine builds) times the bytes per parameter of the
checkpoint's quantization, layer by layer and part by part (attention, GDN, dense MLP, shared
expert, routed experts: `layer_params`, with the config facts the card does not hold in
`Extras`): a compressed-tensors or modelopt pack says per module what it quantizes and how (its
`ignore` / `exclude_modules` lists and config groups), an MXFP4 pack (gpt-oss) quantizes the
routed experts only, the other schemes every projection. Embeddings, LM head,
norms, routers, biases and GDN gates stay at the model's dtype. A checkpoint's own size, where a
card states it, replaces the count (`loaded_bytes`).

Architecture facts beyond the plain decoder: Mixtral / Llama 4 / gpt-oss experts
(`num_local_experts`), Llama 4's shared expert, interleaved MoE layers and chunked local
attention, sliding-window layers (`layer_types`; MiMo-V2's `hybrid_layer_pattern` with their own
head shape), gpt-oss attention sinks and biases, Mllama cross-attention layers and its vision
tower's global layers, Gemma 4's full-attention layers with their own head width and KV heads
(`global_head_dim`, `num_global_key_value_heads`, `attention_k_eq_v`), its dense MLP beside the
experts (`enable_moe_block`, `top_k_experts`) and its vision tower; GraniteMoeHybrid's Mamba-2
layers (`layer_types` mamba, Nemotron-H's mixer) beside a shared MLP, and LFM2's short
convolution layers (`conv`, or the attention ids in `full_attn_idxs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotune.errors import ModelLoadError
from autotune.models.card import (
    Experts,
    GlobalAttention,
    LatentAttention,
    LocalAttention,
    ModelCard,
    Quantization,
    WeightBytes,
    mtp_config_key,
)
from autotune.models.hf.fields import (
    ConfigFields,
    block_pattern,
    config_dtype,
    dense_intermediate,
    full_attention_layers,
    linear_attention,
    rope_scaling,
    rotary_dim,
)
from autotune.models.hf.layer_params import Extras, weight_bytes
from autotune.models.hf.nemotron_h import shared_intermediate
from autotune.models.hf.quantization import quantization_from_config
from autotune.models.hf.vision_config import vision_from_config


def _text_config(config: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    text = config.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" in text:
        return text, "text_config."
    return config, ""


def _latent(f: ConfigFields) -> LatentAttention | None:
    if f.data.get("kv_lora_rank") is None:
        return None
    return LatentAttention(
        kv_lora_rank=f.get_int("kv_lora_rank"),
        qk_rope_head_dim=f.get_int("qk_rope_head_dim"),
        qk_nope_head_dim=f.get_int("qk_nope_head_dim"),
        q_lora_rank=f.opt_int("q_lora_rank"),
        index_head_dim=f.opt_int("index_head_dim"),
        index_n_heads=f.opt_int("index_n_heads"),
    )


def _is_llama4(architecture: str) -> bool:
    return architecture.startswith("Llama4")


def moe_layer_ids(f: ConfigFields, num_layers: int) -> tuple[int, ...]:
    """Decoder layers with an expert MLP: after `first_k_dense_replace`, every
    `decoder_sparse_step` / `interleave_moe_layer_step`-th layer, minus `mlp_only_layers`."""
    if not _num_experts(f):
        return ()
    freq = f.data.get("moe_layer_freq")
    if isinstance(freq, list):  # MiMo-V2: one 0/1 flag per layer
        if len(freq) != num_layers:
            raise f.error("moe_layer_freq", f"must be an integer or {num_layers} 0/1 flags")
        return tuple(i for i, flag in enumerate(freq) if flag)
    pattern = block_pattern(f.data, f.source, f.prefix)
    if pattern is not None:  # Nemotron-H: its E blocks
        return tuple(i for i, c in enumerate(pattern) if c == "E")
    dense = f.opt_int("first_k_dense_replace", minimum=0) or 0
    step = f.opt_int("decoder_sparse_step") or f.opt_int("interleave_moe_layer_step") or 1
    only = f.data.get("mlp_only_layers") or []
    skip = set(only) if isinstance(only, list) else set()
    return tuple(
        i for i in range(num_layers) if i >= dense and (i + 1) % step == 0 and i not in skip
    )


def _num_experts(f: ConfigFields) -> int | None:
    # GraniteMoeHybrid's dense checkpoints state num_local_experts 0
    local = f.opt_int("num_local_experts", minimum=0)
    return f.opt_int("n_routed_experts") or local or f.opt_int("num_experts")


def _experts(f: ConfigFields, moe_layers: int, architecture: str) -> Experts | None:
    n = _num_experts(f)
    if not n:
        return None
    inter = (
        f.opt_int("moe_intermediate_size")
        or f.opt_int("expert_intermediate_size")  # Gemma 4's other name (vLLM gemma4.py)
        or f.get_int("intermediate_size")
    )
    shared = f.opt_int("shared_expert_intermediate_size", minimum=0) or 0
    shared += (f.opt_int("n_shared_experts", minimum=0) or 0) * inter
    nemotron_shared = shared_intermediate(f.data)
    if nemotron_shared is not None:  # Nemotron-H names its own width
        shared = nemotron_shared
    if _is_llama4(architecture):  # every Llama 4 MoE layer adds one shared expert
        shared += inter
    per_token = (
        f.opt_int("num_experts_per_tok")
        or f.opt_int("top_k_experts")  # Gemma 4
        or f.get_int("experts_per_token", 1)
    )
    return Experts(
        num_experts=n,
        experts_per_token=per_token,
        moe_intermediate_size=inter,
        shared_intermediate_size=shared,
        moe_layers=moe_layers,
        bias=architecture == "GptOssForCausalLM",
        # Gemma 4: a MoE block beside the dense MLP (vLLM reads either name)
        dense_mlp=f.get_bool("enable_moe_block", False)
        or f.get_bool("use_second_mlp_block", False),
        latent_size=f.opt_int("moe_latent_size"),  # Nemotron 3 Super's LatentMoE
    )


def _local_attention(f: ConfigFields, num_layers: int) -> LocalAttention | None:
    """Sliding-window layers from `layer_types`; Llama 4's chunked layers are those with RoPE
    (`no_rope_layers[i] == 1`; transformers' default: all but every 4th layer)."""
    types = f.data.get("layer_types")
    if isinstance(types, list):
        sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
        if sliding:
            window = f.get_int("sliding_window")
            return LocalAttention(kind="sliding", window=window, layers=sliding)
    pattern = f.data.get("hybrid_layer_pattern")
    if isinstance(pattern, list):  # MiMo-V2: 1 marks a sliding-window layer with its own shape
        if len(pattern) != num_layers:
            raise f.error("hybrid_layer_pattern", f"must list {num_layers} 0/1 flags")
        window = f.opt_int("sliding_window_size") or f.get_int("sliding_window")
        return LocalAttention(
            kind="sliding",
            window=window,
            layers=tuple(i for i, p in enumerate(pattern) if p == 1),
            num_kv_heads=f.opt_int("swa_num_key_value_heads"),
            head_dim=f.opt_int("swa_head_dim"),
            v_head_dim=f.opt_int("swa_v_head_dim"),
        )
    chunk = f.opt_int("attention_chunk_size")
    if chunk is None:
        return None
    rope = f.data.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(num_layers)]
    if not isinstance(rope, list) or len(rope) != num_layers:
        raise f.error("no_rope_layers", f"must be a list of {num_layers} 0/1 flags, got {rope!r}")
    return LocalAttention(
        kind="chunked", window=chunk, layers=tuple(i for i, r in enumerate(rope) if r)
    )


def _global_attention(f: ConfigFields) -> GlobalAttention | None:
    """Gemma 4's full-attention geometry: `global_head_dim` wide heads; with
    `attention_k_eq_v` they have `num_global_key_value_heads` KV heads (vLLM's gemma4.py
    Gemma4DecoderLayer takes that count only for k_eq_v layers), else the sliding count."""
    if f.data.get("global_head_dim") is None:
        return None
    heads = f.get_int("num_attention_heads")
    head_dim = f.get_int("head_dim", f.get_int("hidden_size") // heads)
    kv = f.get_int("num_key_value_heads", heads)
    k_eq_v = f.get_bool("attention_k_eq_v", False)
    global_dim = f.get_int("global_head_dim")
    global_kv = f.opt_int("num_global_key_value_heads") if k_eq_v else None
    if global_dim == head_dim and global_kv in (None, kv):
        return None
    return GlobalAttention(head_dim=global_dim, num_kv_heads=global_kv or kv, k_eq_v=k_eq_v)


def card_from_config(
    config: Mapping[str, Any],
    *,
    name: str,
    source: str,
    loaded_bytes: Mapping[str, int] | None = None,
) -> ModelCard:
    """Build a ModelCard from a config.json mapping. `loaded_bytes` (component -> bytes, the
    WeightBytes field names) replaces counted sizes with a checkpoint's stated ones."""
    where = Path(source)
    text, prefix = _text_config(config)
    f = ConfigFields(text, where, prefix)
    archs = config.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else "unknown"
    q = config.get("quantization_config", text.get("quantization_config"))
    try:
        card = _skeleton(config, text, f, name=name, source=source, architecture=arch)
        card = card.model_copy(update={"quantization": _quantization(q, where)})
        vision, vision_params, vision_linear = vision_from_config(config, card.hidden_size)
        ex = Extras(
            moe_layers=moe_layer_ids(f, card.num_layers),
            vision_params=vision_params,
            vision_linear_params=vision_linear,
            conv_bias=f.get_bool("conv_bias", False),
            quant=q if isinstance(q, dict) else None,
            source=source,
            mtp_pattern=f.get_str("mtp_hybrid_override_pattern") or "",
        )
        counted = weight_bytes(card, ex)
        if loaded_bytes:
            counted = counted.model_copy(update=dict(loaded_bytes))
        return card.model_copy(update={"weights": counted, "vision": vision})
    except ValidationError as exc:
        raise ModelLoadError(f"{source}: inconsistent config: {exc}") from exc


def _skeleton(
    config: Mapping[str, Any],
    text: Mapping[str, Any],
    f: ConfigFields,
    *,
    name: str,
    source: str,
    architecture: str,
) -> ModelCard:
    """The card's architecture facts (weights still zero)."""
    pattern = block_pattern(text, f.source, f.prefix)
    # Nemotron-H's plan is the layer count (Ultra's config leaves num_hidden_layers null)
    num_layers = f.get_int("num_hidden_layers", len(pattern) if pattern else None)
    hidden = f.get_int("hidden_size")
    heads = f.get_int("num_attention_heads")
    latent = _latent(f)
    full = full_attention_layers(text, f.source, f.prefix)
    hybrid = len(full) < num_layers
    linear = (
        linear_attention(text, f.source, f.prefix, config_dtype(config, text)) if hybrid else None
    )
    dtype = config_dtype(config, text)
    mtp = f.opt_int("num_nextn_predict_layers", minimum=0) or f.opt_int(
        "mtp_num_hidden_layers", minimum=0
    )
    cross = text.get("cross_attention_layers") or []
    tie = config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    head_dim = (
        f.get_int("head_dim", hidden // heads)
        if latent is None
        else latent.qk_nope_head_dim + latent.qk_rope_head_dim
    )
    return ModelCard(
        name=name,
        source=source,
        architecture=architecture,
        dtype=dtype,
        num_layers=num_layers,
        hidden_size=hidden,
        intermediate_size=dense_intermediate(f, architecture, bool(_num_experts(f))),
        vocab_size=f.get_int("vocab_size"),
        num_attention_heads=heads,
        num_kv_heads=f.get_int("num_key_value_heads", heads),
        head_dim=head_dim,
        v_head_dim=f.opt_int("v_head_dim"),
        # Qwen3-Next/3.5 gate attention output; Mamba-2 and short-conv hybrids do not
        attn_output_gate=f.get_bool(
            "attn_output_gate", linear is not None and linear.kind == "gated_delta_net"
        ),
        block_pattern=pattern,
        full_attention_layers=full,
        linear_attention=linear,
        latent_attention=latent,
        local_attention=_local_attention(f, num_layers),
        global_attention=_global_attention(f),
        mm_prefix_lm=f.get_str("use_bidirectional_attention") == "vision",
        attention_sinks=architecture == "GptOssForCausalLM",
        # MLA and Nemotron-H attention are built without biases whatever the config says
        attention_bias=latent is None and pattern is None and f.get_bool("attention_bias", False),
        cross_attention_layers=tuple(cross) if isinstance(cross, list) else (),
        experts=_experts(f, len(moe_layer_ids(f, num_layers)), architecture),
        max_position_embeddings=f.get_int("max_position_embeddings", 262144),
        rope_scaling=rope_scaling(f),
        rotary_dim=rotary_dim(f, architecture, head_dim),
        tie_word_embeddings=bool(tie),
        mtp_layers=mtp or 0,
        mtp_config_key=mtp_config_key(f.data),
        weights=WeightBytes(embed_tokens=0, lm_head=0, decoder=0),
        notes=f"config values from {source}; weights counted from the shapes",
    )


def _quantization(q: object, where: Path) -> Quantization:
    if isinstance(q, dict) and str(q.get("quant_method", "")).lower() == "mxfp4":
        return Quantization(scheme="mxfp4", bits=4, group_size=32, checkpoint_format="mxfp4")
    if isinstance(q, dict) and str(q.get("quant_algo", "")).upper() == "MIXED_PRECISION":
        # A modelopt pack naming each module's algorithm: the card states its 4-bit scheme when
        # any module has one (the per-module bytes come from `quantized_layers`).
        per = q.get("quantized_layers")
        specs = per.values() if isinstance(per, dict) else []
        algos = {str(v.get("quant_algo", "")).upper() for v in specs if isinstance(v, dict)}
        algo = "NVFP4" if any("NVFP4" in a for a in algos) else "FP8"
        q = {**q, "quant_algo": algo}
    return quantization_from_config(q if isinstance(q, dict) else None, where)
