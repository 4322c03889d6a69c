"""Typed reads of config.json fields with errors that name the file and field, and the
architecture facts read that way: full-attention layers, the linear-attention (GDN) shape and
the weights' dtype."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.errors import ModelLoadError
from autotune.models.card import LinearAttention, RopeScaling


class ConfigFields:
    """Typed access to a config dict with error messages that name the file and field."""

    def __init__(self, data: Mapping[str, Any], source: Path, prefix: str = ""):
        self.data = data
        self.source = source
        self.prefix = prefix

    def error(self, key: str, msg: str) -> ModelLoadError:
        return ModelLoadError(f"{self.source}: field '{self.prefix}{key}' {msg}")

    def get_int(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        v = self.data.get(key)
        if v is None:
            if default is None:
                raise self.error(key, f"is missing; expected an integer >= {minimum}")
            return default
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise self.error(key, f"must be an integer >= {minimum}, got {v!r}")
        return v

    def opt_int(self, key: str, *, minimum: int = 1) -> int | None:
        return None if self.data.get(key) is None else self.get_int(key, minimum=minimum)

    def get_bool(self, key: str, default: bool) -> bool:
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.error(key, f"must be true or false, got {v!r}")
        return v

    def get_str(self, key: str, default: str | None = None) -> str | None:
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            raise self.error(key, f"must be a string, got {v!r}")
        return v


def rope_scaling(f: ConfigFields) -> RopeScaling | None:
    """`rope_scaling` as the config states it (`rope_type`, or the older `type` key; a
    `default` type or no mapping: None)."""
    rs = f.data.get("rope_scaling")
    if not isinstance(rs, Mapping):
        return None
    kind = rs.get("rope_type", rs.get("type"))
    if not isinstance(kind, str) or kind == "default":
        return None
    factor = rs.get("factor", 1.0)
    original = rs.get("original_max_position_embeddings")
    if isinstance(factor, bool) or not isinstance(factor, int | float) or factor <= 0:
        raise f.error("rope_scaling", f"has factor {factor!r}; expected a positive number")
    if original is not None and (isinstance(original, bool) or not isinstance(original, int)):
        raise f.error("rope_scaling", f"has original_max_position_embeddings {original!r}")
    return RopeScaling(kind=kind, factor=float(factor), original_max_position_embeddings=original)


# Nemotron-H's `layers_block_type` words as `hybrid_override_pattern` letters.
_BLOCK_LETTERS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def block_pattern(text: Mapping[str, Any], source: Path, prefix: str = "") -> str | None:
    """Nemotron-H's layer plan as `hybrid_override_pattern` letters (M Mamba-2, * attention,
    - MLP, E MoE), from that field or its list spelling `layers_block_type`; None for other
    models."""
    f = ConfigFields(text, source, prefix)
    pattern = f.get_str("hybrid_override_pattern")
    words = text.get("layers_block_type")
    if pattern is None and isinstance(words, list):
        bad = [w for w in words if w not in _BLOCK_LETTERS]
        if bad:
            raise f.error("layers_block_type", f"holds unknown block types {bad}")
        pattern = "".join(_BLOCK_LETTERS[w] for w in words)
    if pattern is None:
        return None
    if set(pattern) - set("M*-E"):
        raise f.error("hybrid_override_pattern", f"must hold only M * - E, got {pattern!r}")
    n = f.get_int("num_hidden_layers", len(pattern))
    if n != len(pattern):
        raise f.error("num_hidden_layers", f"is {n} but the layer pattern holds {len(pattern)}")
    return pattern


# layer_types words for layers with a recurrent state rather than KV: Qwen3-Next/3.5 GDN,
# GraniteMoeHybrid's Mamba-2 and LFM2's short convolution (SGLang's Lfm2Config.linear_layer_ids
# takes "conv" and "short_conv").
STATE_LAYER_TYPES = frozenset({"linear_attention", "mamba", "conv", "short_conv"})


def full_attention_layers(
    text: Mapping[str, Any], source: Path, prefix: str = ""
) -> tuple[int, ...]:
    """Full-attention layer ids, as SGLang derives them (sglang-internals §6): from
    `full_attention_interval` when present, else from `layer_types`, else every layer;
    Nemotron-H: its pattern's '*' blocks."""
    f = ConfigFields(text, source, prefix)
    pattern = block_pattern(text, source, prefix)
    if pattern is not None:
        return tuple(i for i, c in enumerate(pattern) if c == "*")
    n = f.get_int("num_hidden_layers")
    interval = f.opt_int("full_attention_interval")
    if interval is not None:
        return tuple(i for i in range(n) if (i + 1) % interval == 0)
    types = text.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n:
            raise f.error("layer_types", f"must be a list of {n} layer types, got {types!r}")
        # Sliding-window attention is still attention; linear_attention (GDN), mamba
        # (GraniteMoeHybrid) and conv (LFM2) layers keep a state instead of KV.
        return tuple(i for i, t in enumerate(types) if t not in STATE_LAYER_TYPES)
    idxs = text.get("full_attn_idxs")  # LFM2 configs that predate layer_types
    if idxs is not None:
        if not isinstance(idxs, list) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n for i in idxs
        ):
            raise f.error("full_attn_idxs", f"must list layer ids below {n}, got {idxs!r}")
        return tuple(sorted(idxs))
    if text.get("linear_num_value_heads") is not None:
        raise f.error(
            "full_attention_interval",
            "is missing, and so is layer_types: a hybrid (linear-attention) config needs one "
            "of them to say which layers are full attention",
        )
    return tuple(range(n))


# vLLM's NemotronHForCausalLMConfig.verify_and_update_config: an `auto` SSM cache dtype takes
# config.json's mamba_ssm_cache_dtype, float16 when the config has none. (SGLang 0.5.23's
# mamba2_state_dtype reads mamba_ssm_dtype instead, float32 without it: the two differ only
# for a config that states neither.)
NEMOTRON_H_SSM_DEFAULT = "float16"


def linear_attention(
    text: Mapping[str, Any], source: Path, prefix: str, conv_dtype: str
) -> LinearAttention:
    f = ConfigFields(text, source, prefix)
    if text.get("mamba_n_heads") is not None:
        # GraniteMoeHybrid (SGLang's GraniteMoeHybridConfig.mamba2_cache_params): its own field
        # names; the state dtype is mamba2_state_dtype's default, float32, unless stated.
        return LinearAttention(
            kind="mamba2",
            num_key_heads=f.get_int("mamba_n_groups", 1),
            key_head_dim=f.get_int("mamba_d_state", 128),
            num_value_heads=f.get_int("mamba_n_heads"),
            value_head_dim=f.get_int("mamba_d_head", 64),
            conv_kernel=f.get_int("mamba_d_conv", 4),
            ssm_dtype=f.get_str("mamba_ssm_dtype") or "float32",
            conv_dtype=conv_dtype,
        )
    if text.get("conv_L_cache") is not None:
        # LFM2's short convolution as SGLang's Lfm2Config.mamba2_cache_params shapes it
        return LinearAttention(
            kind="short_conv",
            num_key_heads=1,
            key_head_dim=0,
            num_value_heads=1,
            value_head_dim=f.get_int("hidden_size"),
            conv_kernel=f.get_int("conv_L_cache"),
            conv_dtype=conv_dtype,
        )
    if block_pattern(text, source, prefix) is not None:
        # Mamba-2 onto the shared shape (card.LinearAttention): groups x state size are the
        # "keys", heads x head dim the "values".
        return LinearAttention(
            kind="mamba2",
            num_key_heads=f.get_int("n_groups"),
            key_head_dim=f.get_int("ssm_state_size"),
            num_value_heads=f.get_int("mamba_num_heads"),
            value_head_dim=f.get_int("mamba_head_dim"),
            conv_kernel=f.get_int("conv_kernel"),
            ssm_dtype=f.get_str("mamba_ssm_cache_dtype") or NEMOTRON_H_SSM_DEFAULT,
            conv_dtype=conv_dtype,
        )
    return LinearAttention(
        num_key_heads=f.get_int("linear_num_key_heads"),
        num_value_heads=f.get_int("linear_num_value_heads"),
        key_head_dim=f.get_int("linear_key_head_dim"),
        value_head_dim=f.get_int("linear_value_head_dim"),
        conv_kernel=f.get_int("linear_conv_kernel_dim"),
        ssm_dtype=f.get_str("mamba_ssm_dtype") or "float32",
        conv_dtype=conv_dtype,
    )


def dense_intermediate(f: ConfigFields, architecture: str, experts: bool) -> int:
    """The dense MLP width: Llama 4 names it `intermediate_size_mlp` (its `intermediate_size`
    is the expert width); a GraniteMoeHybrid without experts runs its shared MLP alone
    (shared_intermediate_size); LFM2 as SGLang's Lfm2MLP sizes it (lfm2_ff)."""
    if architecture == "GraniteMoeHybridForCausalLM" and not experts:
        return f.get_int("shared_intermediate_size")
    if architecture == "Lfm2ForCausalLM":
        return lfm2_ff(f)
    return f.opt_int("intermediate_size_mlp") or f.get_int("intermediate_size", 0, minimum=0)


def lfm2_ff(f: ConfigFields) -> int:
    """SGLang's Lfm2MLP width: the config's intermediate_size (block_ff_dim in configs that
    predate the rename), with block_auto_adjust_ff_dim taken to 2/3, times
    block_ffn_dim_multiplier, rounded up to block_multiple_of."""
    ff = f.opt_int("intermediate_size") or f.get_int("block_ff_dim")
    if f.get_bool("block_auto_adjust_ff_dim", False):
        ff = int(2 * ff / 3)
        mult = f.data.get("block_ffn_dim_multiplier")
        if isinstance(mult, int | float) and not isinstance(mult, bool):
            ff = int(mult * ff)
        step = f.get_int("block_multiple_of", 256)
        ff = step * ((ff + step - 1) // step)
    return ff


def config_dtype(cfg: Mapping[str, Any], text: Mapping[str, Any]) -> str:
    for c in (text, cfg):
        for key in ("torch_dtype", "dtype"):
            v = c.get(key)
            if isinstance(v, str):
                return v.removeprefix("torch.")
    return "bfloat16"


# Architectures whose attention rotates the whole head when the config states no
# partial_rotary_factor (transformers' Llama, Mllama, Llama 4, Mistral, Mixtral, Qwen2 and Qwen3
# configs have no such field). Others may default to a fraction (Qwen3-Next 0.25, GLM-4.5 0.5):
# their rotary width stays unstated unless the config gives the factor.
_FULL_ROTARY = frozenset(
    {
        # Gemma 1-3: vLLM's gemma*.py rotate the whole head (get_rope(head_dim, ...))
        "GemmaForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "LlamaForCausalLM",
        "Llama4ForConditionalGeneration",
        "MllamaForConditionalGeneration",
        "MistralForCausalLM",
        "Mistral3ForConditionalGeneration",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
    }
)


def rotary_dim(f: ConfigFields, architecture: str, head_dim: int) -> int | None:
    """Rotated dims per head: MLA's rope key, head_dim x a stated partial_rotary_factor, or the
    whole head for `_FULL_ROTARY`; None when the config leaves it to a default we do not know."""
    rope = f.opt_int("qk_rope_head_dim")
    if rope is not None:
        return rope
    factor = f.data.get("partial_rotary_factor")
    if isinstance(factor, int | float) and not isinstance(factor, bool) and 0 < factor <= 1:
        return int(head_dim * factor)
    return head_dim if architecture in _FULL_ROTARY else None


# Architectures whose dense MLP is two matrices, up and down with no gate: vLLM's phi.py PhiMLP
# (fc1 / fc2 around a GELU), and the XLM-RoBERTa encoder SGLang's roberta.py builds on bert.py's
# BertEncoder (BertIntermediate up, BertOutput down). Every other architecture here runs a gated
# (SwiGLU-style) MLP.
UNGATED_MLP = frozenset({"PhiForCausalLM", "XLMRobertaModel"})


def mlp_matrices(architecture: str) -> int:
    """Weight matrices of one dense MLP: 2 for `UNGATED_MLP`, else 3 (gate, up, down)."""
    return 2 if architecture in UNGATED_MLP else 3
