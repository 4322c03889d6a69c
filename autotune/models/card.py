"""The ModelCard: what the planner, the simulator and the kernel tuner know about a model.

A card holds facts, not arithmetic: layer types, head counts and dims, linear-attention
(Gated DeltaNet, "mamba" in SGLang) state shapes and dtypes, weight bytes as loaded per
component, the quantization scheme. The planner turns these into bytes per token and per slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MtpConfigKey = Literal["", "num_nextn_predict_layers", "mtp_num_hidden_layers"]

DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
    "int4": 0.5,
    "fp4": 0.5,
}

QuantScheme = Literal[
    "none",  # bf16/fp16 weights
    "awq",  # int4 W4A16, AWQ packing (AutoAWQ or compressed-tensors pack-quantized)
    "gptq",  # int4 W4A16, GPTQ packing (GPTQ / AutoRound)
    "fp8_block",  # fp8 e4m3 W8A8 with [128,128] weight blocks
    "fp8",  # fp8 e4m3 with per-tensor or per-channel weight scales
    "int8",  # int8 weights (W8A16 / W8A8)
    "nvfp4",  # NVIDIA fp4 (modelopt), needs Blackwell
    "mxfp4",  # OCP MX fp4 experts (gpt-oss), attention left bf16
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Quantization(_Frozen):
    scheme: QuantScheme = "none"
    bits: int = 16
    group_size: int | None = None
    block_shape: tuple[int, int] | None = None
    zero_point: bool = False
    checkpoint_format: str | None = Field(
        default=None,
        description="quant_method in config.json (awq, gptq, compressed-tensors, ...)",
    )
    sglang_quantization: str | None = Field(
        default=None, description="value SGLang's --quantization takes for it, when it must be set"
    )
    kv_cache_dtype: Literal["fp8", "nvfp4"] | None = Field(
        default=None,
        description="KV cache dtype the checkpoint declares, with its k/v scales: "
        "compressed-tensors kv_cache_scheme, modelopt kv_cache_quant_algo (or kv_cache_scheme)",
    )


class LinearAttention(_Frozen):
    """Linear-attention state shapes: Gated DeltaNet (Qwen3-Next / Qwen3.5 config field names)
    or Mamba-2 (Nemotron-H), whose fields map onto the same shape: `num_key_heads` = n_groups,
    `key_head_dim` = ssm_state_size, `num_value_heads` = mamba_num_heads, `value_head_dim` =
    mamba_head_dim. Both then keep a conv window of (2 * key + value width) channels and an SSM
    state of value heads x value dim x key dim (vLLM's MambaStateShapeCalculator
    .gated_delta_net_state_shape and .mamba2_state_shape). LFM2's short convolution
    (`short_conv`) is the shape SGLang's Lfm2Config.mamba2_cache_params gives it: one group of
    state size 0 and one head of hidden_size, so a conv window of hidden_size channels and no
    SSM state."""

    kind: Literal["gated_delta_net", "mamba2", "short_conv"] = "gated_delta_net"
    num_key_heads: int
    num_value_heads: int
    key_head_dim: int = Field(ge=0)
    value_head_dim: int
    conv_kernel: int
    ssm_dtype: str = "float32"
    conv_dtype: str = "bfloat16"


class LatentAttention(_Frozen):
    """Multi-head latent attention (DeepSeek V2/V3, Kimi K2 config field names): the KV cache
    holds one compressed latent plus the rope key per token and layer, on every TP rank."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    q_lora_rank: int | None = None
    index_head_dim: int | None = Field(
        default=None,
        description="DSA lightning indexer (GLM-5, DeepSeek V3.2): its key width; engines keep "
        "one indexer key per token and layer beside the latent",
    )
    index_n_heads: int | None = Field(default=None, description="DSA indexer query heads")


class LocalAttention(_Frozen):
    """Attention layers that see a bounded span of tokens: a sliding window (gpt-oss, Gemma,
    Laguna `sliding_attention` layers) or fixed chunks (Llama 4 chunked local attention). They
    keep a KV cache and stay in `full_attention_layers`; an engine with a windowed pool may hold
    at most `window` tokens of them per request."""

    kind: Literal["sliding", "chunked"]
    window: int = Field(gt=0, description="sliding_window or attention_chunk_size, in tokens")
    layers: tuple[int, ...]
    num_kv_heads: int | None = Field(
        default=None,
        description="the window layers' own KV heads (MiMo-V2 swa_num_key_value_heads); None: "
        "the same as the full-attention layers",
    )
    head_dim: int | None = Field(default=None, description="their key head dim (swa_head_dim)")
    v_head_dim: int | None = Field(default=None, description="their value head dim")

    @property
    def own_shape(self) -> bool:
        """Whether the window layers have their own head count or dims (SGLang sizes a second
        KV pool for them)."""
        return self.num_kv_heads is not None or self.head_dim is not None


class GlobalAttention(_Frozen):
    """The geometry of the full (global) attention layers where it differs from the sliding
    ones (Gemma 4: `global_head_dim`, `num_global_key_value_heads`, `attention_k_eq_v`). The
    layers are `full_attention_layers` less `local_attention.layers`."""

    head_dim: int
    num_kv_heads: int
    k_eq_v: bool = Field(
        default=False,
        description="keys double as values in the checkpoint (no v_proj); engines still hold "
        "a V slot in the projection and the KV cache",
    )


class Experts(_Frozen):
    """Mixture-of-experts MLP shape; dense layers keep `intermediate_size`."""

    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    shared_intermediate_size: int = 0
    moe_layers: int = Field(description="decoder layers with an expert MLP")
    bias: bool = Field(
        default=False,
        description="every expert's gate_up and down projections and the router carry biases "
        "(gpt-oss gate_up_proj_bias, down_proj_bias, router.bias); kept at the model's dtype "
        "under a quantized pack",
    )
    dense_mlp: bool = Field(
        default=False,
        description="a gated dense MLP of the card's intermediate_size beside the routed "
        "experts in every MoE layer (Gemma 4 enable_moe_block), with the block's router scale, "
        "per-expert scales and three extra norms",
    )
    latent_size: int | None = Field(
        default=None,
        gt=0,
        description="the routed experts work at this width, not hidden_size, between a "
        "hidden -> latent and a latent -> hidden projection held whole on every TP rank "
        "(Nemotron-H LatentMoE moe_latent_size: fc1_latent_proj, fc2_latent_proj)",
    )


class VisionTower(_Frozen):
    layers: int
    hidden_size: int
    # What vLLM's encoder profiling sizes its dummy image by (vllm_encoder.py); 0 / "" where
    # the config does not state it.
    model_type: str = ""
    intermediate_size: int = 0
    image_size: int = 0
    patch_size: int = 0
    tokens_per_image: int = Field(
        default=0, description="config.json's mm_tokens_per_image (Gemma 3's 256)"
    )


class RopeScaling(_Frozen):
    """config.json's `rope_scaling`: engines derive the default context length from it (vLLM
    multiplies max_position_embeddings, or a yarn config's original length, by the factor)."""

    kind: str = Field(description="rope_type (or the older `type` key): linear, yarn, llama3...")
    factor: float = 1.0
    original_max_position_embeddings: int | None = None


class WeightBytes(_Frozen):
    """Bytes of each component as loaded on one GPU at TP 1 (not file sizes)."""

    embed_tokens: int
    lm_head: int
    decoder: int = Field(description="all decoder layers: attention, GDN, MLP, norms")
    mtp: int = 0
    vision: int = 0
    vision_linear: int = Field(
        default=0,
        description="of `vision` (not added to it), the bytes in linear layers: what an engine "
        "that shards the tower across TP ranks splits",
    )
    replicated: int = Field(
        default=0, description="parts every TP rank holds whole (MLA down-projections, routers)"
    )
    attention: int = Field(
        default=0,
        description="of `decoder` (not added to it), the sharded attention projections: what "
        "SGLang's DP attention splits over tp / dp ranks only; 0: not counted",
    )
    experts: int = Field(
        default=0,
        description="of `decoder` (not added to it), the routed experts with their scales as "
        "the pack stores each (its ignore list applied): what a decode step reads only the "
        "routed share of, and KTransformers offloads; 0: not counted",
    )
    load_overhead: int = Field(
        default=0, description="buffers allocated at load that are not weights read per token"
    )

    @property
    def total(self) -> int:
        return (
            self.embed_tokens
            + self.lm_head
            + self.decoder
            + self.mtp
            + self.vision
            + self.replicated
            + self.load_overhead
        )


class ModelCard(_Frozen):
    name: str
    source: str = Field(default="builtin", description="builtin, or the model folder it came from")
    architecture: str
    dtype: str = "bfloat16"
    num_layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int | None = None
    attn_output_gate: bool = Field(
        default=False, description="Qwen3.5 q_proj also produces a gate (doubles q width)"
    )
    full_attention_layers: tuple[int, ...] = Field(
        description="layer ids with full attention; the rest are linear attention"
    )
    linear_attention: LinearAttention | None = None
    latent_attention: LatentAttention | None = None
    local_attention: LocalAttention | None = None
    global_attention: GlobalAttention | None = None
    attention_sinks: bool = Field(
        default=False, description="one learned sink logit per head and layer (gpt-oss)"
    )
    attention_bias: bool = Field(
        default=False,
        description="q, k, v and o projections carry biases (config attention_bias; gpt-oss)",
    )
    cross_attention_layers: tuple[int, ...] = Field(
        default=(), description="layers attending to the vision encoder's states (Mllama)"
    )
    block_pattern: str | None = Field(
        default=None,
        description="Nemotron-H hybrid_override_pattern, one block per layer: M Mamba-2, * "
        "attention, - MLP, E MoE; a '-' or 'E' block has no mixer (no KV, no state)",
    )
    experts: Experts | None = None
    max_position_embeddings: int = 262144
    rope_scaling: RopeScaling | None = None
    rotary_dim: int | None = Field(
        default=None,
        description="rotated dims per head (head_dim x partial_rotary_factor; MLA: the rope "
        "key); None where the config does not state it",
    )
    tie_word_embeddings: bool = False
    mtp_layers: int = Field(default=0, description="MTP layers present in the checkpoint")
    mtp_config_key: MtpConfigKey = Field(
        default="",
        description="the config.json key that declares the MTP layers ('' where unknown): SGLang "
        "reads only num_nextn_predict_layers off a target's own config",
    )
    vision: VisionTower | None = None
    mm_prefix_lm: bool = Field(
        default=False,
        description="image tokens attend bidirectionally (Gemma 4 use_bidirectional_attention "
        "'vision'): vLLM then fits one whole multimodal item in a batch",
    )
    quantization: Quantization = Quantization()
    weights: WeightBytes
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> ModelCard:
        bad = [i for i in self.full_attention_layers if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(f"full_attention_layers {bad} outside 0..{self.num_layers - 1}")
        if self.linear_layers and self.linear_attention is None:
            raise ValueError("linear-attention layers present but linear_attention is not set")
        local = self.local_attention.layers if self.local_attention else ()
        outside = sorted(set(local) - set(self.full_attention_layers))
        if outside:
            raise ValueError(f"local_attention layers {outside} are not attention layers")
        bad = [i for i in self.cross_attention_layers if not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(f"cross_attention_layers {bad} outside 0..{self.num_layers - 1}")
        if self.block_pattern is not None:
            if len(self.block_pattern) != self.num_layers or set(self.block_pattern) - set("M*-E"):
                raise ValueError(
                    f"block_pattern {self.block_pattern!r} must hold {self.num_layers} of M * - E"
                )
            said = tuple(i for i, c in enumerate(self.block_pattern) if c == "*")
            if said != self.full_attention_layers:
                raise ValueError("block_pattern's '*' layers are not full_attention_layers")
        self._check_experts()
        self._check_attention_bias()
        return self

    def _check_experts(self) -> None:
        e = self.experts
        if e is None:
            return
        # Each field is counted by one layer builder only: latent experts by the Nemotron-H
        # blocks (nemotron_h.py), biases and the dense MLP beside by the others.
        if e.latent_size is not None and self.block_pattern is None:
            raise ValueError(
                "experts.latent_size (LatentMoE) is modelled for Nemotron-H layer plans only "
                "(block_pattern); this card has none"
            )
        if self.block_pattern is not None and (e.bias or e.dense_mlp):
            raise ValueError("Nemotron-H MoE blocks have no expert biases and no dense MLP beside")
        if e.dense_mlp and self.intermediate_size <= 0:
            raise ValueError("experts.dense_mlp needs the dense MLP's intermediate_size above 0")

    def _check_attention_bias(self) -> None:
        if self.attention_bias and self.latent_attention is not None:
            raise ValueError("attention_bias is not modelled for latent attention (MLA)")
        if self.attention_bias and self.block_pattern is not None:
            raise ValueError("Nemotron-H attention blocks have no biases (bias=False)")

    @property
    def is_hybrid(self) -> bool:
        return bool(self.linear_layers)

    @property
    def linear_layers(self) -> tuple[int, ...]:
        """Layers with a linear-attention (GDN / Mamba-2) state: every layer that is not full
        attention, less Nemotron-H's MLP and MoE blocks."""
        if self.block_pattern is not None:
            return tuple(i for i, c in enumerate(self.block_pattern) if c == "M")
        full = set(self.full_attention_layers)
        return tuple(i for i in range(self.num_layers) if i not in full)

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def global_layers(self) -> tuple[int, ...]:
        """Attention layers that see every token (full attention less the local layers)."""
        local = set(self.local_attention.layers) if self.local_attention else set()
        return tuple(i for i in self.full_attention_layers if i not in local)

    @property
    def has_mtp(self) -> bool:
        return self.mtp_layers > 0

    @property
    def is_multimodal(self) -> bool:
        return self.vision is not None

    def summary(self) -> dict[str, object]:
        return {
            "name": self.name,
            "architecture": self.architecture,
            "layers": self.num_layers,
            "full_attention_layers": len(self.full_attention_layers),
            "linear_attention_layers": len(self.linear_layers),
            "quantization": self.quantization.scheme,
            "weights_gib": round(self.weights.total / 2**30, 2),
            "mtp": self.has_mtp,
            "vision": self.is_multimodal,
        }


def mtp_config_key(text_config: Mapping[str, object]) -> MtpConfigKey:
    """The key a (text) config.json declares its MTP layers under, '' when neither is positive."""
    keys: tuple[MtpConfigKey, ...] = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
    for key in keys:
        n = text_config.get(key)
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return key
    return ""
