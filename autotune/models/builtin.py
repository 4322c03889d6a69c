"""Built-in model cards: Qwen3.8-27B in the three packs people run (FIELD-NOTES F1, F2) and a
tiny dense model for tests."""

from __future__ import annotations

from autotune.models.card import (
    LinearAttention,
    ModelCard,
    Quantization,
    VisionTower,
    WeightBytes,
)
from autotune.models.layout import Projection, conv_state_params, projections

GIB = 2**30

# F1: Qwen3.8-27B = Qwen3.5/3.6-27B text architecture.
_QWEN38_ARCH = dict(
    architecture="Qwen3_5ForCausalLM",
    num_layers=64,
    hidden_size=5120,
    intermediate_size=17408,
    vocab_size=248320,
    num_attention_heads=24,
    num_kv_heads=4,
    head_dim=256,
    attn_output_gate=True,
    full_attention_layers=tuple(range(3, 64, 4)),  # full_attention_interval 4
    linear_attention=LinearAttention(
        num_key_heads=16, num_value_heads=48, key_head_dim=128, value_head_dim=128, conv_kernel=4
    ),
    max_position_embeddings=262144,
)
# Qwen3.5 vision tower (27 layers x 1152 wide, about 0.43 B params).
_QWEN38_VISION = VisionTower(layers=27, hidden_size=1152)
_VISION_BYTES_BF16 = int(27 * 12 * 1152**2 * 2)


def _skeleton(name: str) -> ModelCard:
    return ModelCard(
        name=name, weights=WeightBytes(embed_tokens=0, lm_head=0, decoder=0), **_QWEN38_ARCH
    )


def _decoder_bytes(projs: list[Projection], card: ModelCard, bytes_per_param: float) -> int:
    """Quantized projections at `bytes_per_param`; unquantizable ones, conv and norms in bf16."""
    q = sum(p.params for p in projs if p.quantizable)
    bf16 = sum(p.params for p in projs if not p.quantizable) + conv_state_params(card)
    norms = card.num_layers * 2 * card.hidden_size
    return int(q * bytes_per_param) + 2 * (bf16 + norms)


def _mtp_params(card: ModelCard) -> int:
    """One MTP layer: a full-attention decoder layer, its MLP and the 2h->h fusion projection."""
    per = {p.name: p.n * p.k for p in projections(card)}
    return (
        per["qkv_proj"]
        + per["o_proj"]
        + per["gate_up_proj"]
        + per["down_proj"]
        + (2 * card.hidden_size * card.hidden_size)
    )


# int4 group-128 with zero points: 0.5 B packed + bf16 scale/128 + int4 zero/128 per param.
_W4_G128 = 0.5 + 2 / 128 + 0.5 / 128
# FIELD-NOTES C1 implies 16.80 GiB "mem usage" after load for the community AWQ pack whose file is
# 16.44 GiB: the ~0.25 GiB above the tensor bytes are buffers the W4A16 (Marlin) path allocates at
# load. Kept as a separate term: allocated, but not read per decoded token.
_AWQ_LOAD_OVERHEAD = int(0.247 * GIB)
# The W4A16 AutoRound GPTQ pack (MTP kept bf16) on two RX 7900 XTX at TP 2, SGLang's gfx1100 fork
# (github.com/unknownue/server-forge, nodes/ubuntu-server-node-2/bench/results/sglang-tp2-
# reproduction.txt, 2026-09-19): "[TP0] Load weight end. mem usage=9.12 GB", the target's load
# (its MTP draft head loads apart: 2.78 GiB a rank in the same notes). SGLang writes GiB as "GB".
_GPTQ_LOADED_TP2 = 9.12 * GIB


def _qwen38_awq() -> ModelCard:
    base = _skeleton("qwen3.8-27b-awq-int4")
    emb = base.vocab_size * base.hidden_size * 2
    dec = _decoder_bytes(projections(base), base, _W4_G128)
    return base.model_copy(
        update=dict(
            quantization=Quantization(
                scheme="awq",
                bits=4,
                group_size=128,
                zero_point=True,
                checkpoint_format="compressed-tensors",
            ),
            weights=WeightBytes(
                embed_tokens=emb, lm_head=emb, decoder=dec, load_overhead=_AWQ_LOAD_OVERHEAD
            ),
            mtp_layers=0,
            notes="Community AWQ-INT4 pack (compressed-tensors W4A16, no MTP, text only), "
            "16.44 GiB file; weights as loaded calibrated to 16.80 GiB on SGLang 0.5.17.",
        )
    )


def _qwen38_nvfp4() -> ModelCard:
    base = _skeleton("qwen3.8-27b-nvfp4")
    emb = base.vocab_size * base.hidden_size * 2
    mtp = _mtp_params(base) * 2
    total = int(20.14 * GIB)  # F2: 20.14 GiB loaded
    dec = total - 2 * emb - mtp - _VISION_BYTES_BF16
    return base.model_copy(
        update=dict(
            architecture="Qwen3_5ForConditionalGeneration",
            quantization=Quantization(
                scheme="nvfp4",
                bits=4,
                group_size=16,
                checkpoint_format="modelopt",
                sglang_quantization="modelopt_fp4",
            ),
            weights=WeightBytes(
                embed_tokens=emb, lm_head=emb, decoder=dec, mtp=mtp, vision=_VISION_BYTES_BF16
            ),
            mtp_layers=1,
            mtp_config_key="mtp_num_hidden_layers",  # F1: the Qwen3.5 text config
            vision=_QWEN38_VISION,
            notes="RadixArk NVFP4 (modelopt; attention fp8, MTP and vision bf16); needs Blackwell. "
            "20.14 GiB loaded.",
        )
    )


def _qwen38_fp8() -> ModelCard:
    base = _skeleton("qwen3.8-27b-fp8")
    emb = base.vocab_size * base.hidden_size * 2
    # fp8 e4m3 weights + one fp32 scale per [128,128] block.
    per_param = 1 + 4 / (128 * 128)
    dec = _decoder_bytes(projections(base), base, per_param)
    mtp = int(_mtp_params(base) * per_param)
    return base.model_copy(
        update=dict(
            architecture="Qwen3_5ForConditionalGeneration",
            quantization=Quantization(
                scheme="fp8_block",
                bits=8,
                block_shape=(128, 128),
                checkpoint_format="fp8",
                sglang_quantization="fp8",
            ),
            weights=WeightBytes(
                embed_tokens=emb, lm_head=emb, decoder=dec, mtp=mtp, vision=_VISION_BYTES_BF16
            ),
            mtp_layers=1,
            mtp_config_key="mtp_num_hidden_layers",  # F1: the Qwen3.5 text config
            vision=_QWEN38_VISION,
            notes="Official FP8 block-wise pack with vision tower and MTP (28.5 to 29 GiB).",
        )
    )


def _qwen38_gptq() -> ModelCard:
    """A W4A16 GPTQ pack with the MTP layer kept bf16 (F2: "about 19 GB"), counted from its
    tensors: the text-only architecture, every projection int4 group 128 but in_proj_ba (P10),
    embeddings and MTP bf16, 18.6 GB. No Marlin repack buffers. What the C5 pack holds beyond
    that as loaded is _qwen38_autoround_gptq's."""
    base = _skeleton("qwen3.8-27b-gptq-int4")
    emb = base.vocab_size * base.hidden_size * 2
    dec = _decoder_bytes(projections(base), base, _W4_G128)
    mtp = _mtp_params(base) * 2
    return base.model_copy(
        update=dict(
            quantization=Quantization(
                scheme="gptq", bits=4, group_size=128, zero_point=True, sglang_quantization="gptq"
            ),
            weights=WeightBytes(embed_tokens=emb, lm_head=emb, decoder=dec, mtp=mtp),
            mtp_layers=1,
            mtp_config_key="mtp_num_hidden_layers",  # F1: the Qwen3.5 text config
            notes="A W4A16 GPTQ pack with its MTP layer kept bf16, counted from its tensors "
            "(text only, 18.6 GB); for the two-RX-7900-XTX pack as loaded see "
            "qwen3.8-27b-autoround-gptq-int4.",
        )
    )


def _qwen38_autoround_gptq() -> ModelCard:
    """The W4A16 AutoRound GPTQ pack of FIELD-NOTES F2/C5 as its target loads: the tensors of
    qwen3.8-27b-gptq-int4 and what the public log shows held beyond them (_GPTQ_LOADED_TP2)."""
    card = _qwen38_gptq()
    w = card.weights
    # Which parts hold it (kept unquantized, a vision tower, the kernel's buffers) is not
    # stated, so it is split over the ranks like the rest. vLLM launches of another AutoRound
    # int4 pack of this architecture (Qwen3.6-27B on RTX 3090s, the calibration records) hold
    # no such extra: it is this pack's, or this build's.
    held = int(_GPTQ_LOADED_TP2 * 2) - (w.embed_tokens + w.lm_head + w.decoder)
    return card.model_copy(
        update=dict(
            name="qwen3.8-27b-autoround-gptq-int4",
            weights=w.model_copy(update={"load_overhead": held}),
            notes="W4A16 AutoRound GPTQ pack with its MTP layer kept bf16, as loaded on two "
            "RX 7900 XTX by SGLang's gfx1100 fork: 9.12 GiB a rank at TP 2 (github.com/"
            "unknownue/server-forge: 'Load weight end. mem usage=9.12 GB'), 1.68 GiB above its "
            "tensors as counted, held at load (which parts is not stated).",
        )
    )


def _tiny_dense() -> ModelCard:
    card = ModelCard(
        name="tiny-dense",
        architecture="LlamaForCausalLM",
        num_layers=4,
        hidden_size=256,
        intermediate_size=512,
        vocab_size=4096,
        num_attention_heads=4,
        num_kv_heads=2,
        head_dim=64,
        full_attention_layers=tuple(range(4)),
        max_position_embeddings=8192,
        weights=WeightBytes(embed_tokens=0, lm_head=0, decoder=0),
        notes="Tiny dense test model (random weights); used by tests and CPU demos.",
    )
    emb = card.vocab_size * card.hidden_size * 2
    return card.model_copy(
        update=dict(
            weights=WeightBytes(
                embed_tokens=emb, lm_head=emb, decoder=_decoder_bytes(projections(card), card, 2)
            )
        )
    )


BUILTIN_CARDS: dict[str, ModelCard] = {
    c.name: c
    for c in (
        _qwen38_awq(),
        _qwen38_nvfp4(),
        _qwen38_fp8(),
        _qwen38_gptq(),
        _qwen38_autoround_gptq(),
        _tiny_dense(),
    )
}
