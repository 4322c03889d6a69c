"""Tiny safetensors packs with the real tensor naming of Qwen3.5 and Llama checkpoints.

Dims are small (hidden 128, 4 layers, full_attention_interval 4 -> 3 Gated DeltaNet + 1 full
attention) so a pack is a few hundred KiB and writes in milliseconds. numpy has no bfloat16, so
"bf16" tensors are float16 (same size); the loader counts any dtype by its size.

Each writer returns a Pack holding the arrays it wrote, so tests can compute expected byte
counts from the arrays themselves instead of from the code under test.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

F16 = np.float16  # stands in for bf16 (numpy has no bfloat16; same 2 bytes)


@dataclass
class Pack:
    path: Path
    config: dict[str, Any]
    tensors: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def shards(self) -> list[Path]:
        return sorted(self.path.glob("*.safetensors"))


@dataclass(frozen=True)
class Dims:
    hidden: int = 128
    layers: int = 4
    interval: int = 4
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    lin_k_heads: int = 16
    lin_v_heads: int = 48  # in_proj_a / in_proj_b are 48 wide, as in Qwen3.5-27B (P10)
    lin_k_dim: int = 16
    lin_v_dim: int = 16
    conv: int = 4
    intermediate: int = 256
    vocab: int = 512

    def is_full(self, i: int) -> bool:
        return (i + 1) % self.interval == 0


class _Writer:
    def __init__(self, quantize: bool, group: int, bits: int = 4):
        self.tensors: dict[str, np.ndarray] = {}
        self.quantize = quantize
        self.group = group
        self.bits = bits

    def add(self, name: str, shape: tuple[int, ...], dtype: Any = F16) -> None:
        assert name not in self.tensors, name
        self.tensors[name] = np.zeros(shape, dtype=dtype)

    def linear(self, name: str, n: int, k: int, *, quantize: bool | None = None) -> None:
        """compressed-tensors pack-quantized W4A16: weight_packed int32 [N, K/8] (8 int4 per
        int32 along K), weight_scale [N, K/group], weight_shape int64 [2]."""
        if self.quantize if quantize is None else quantize:
            pack = 32 // self.bits
            self.add(f"{name}.weight_packed", (n, k // pack), np.int32)
            self.add(f"{name}.weight_scale", (n, -(-k // self.group)))
            self.tensors[f"{name}.weight_shape"] = np.array([n, k], dtype=np.int64)
        else:
            self.add(f"{name}.weight", (n, k))


def _ct_config(group: int, ignore: list[str]) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 4,
                    "type": "int",
                    "symmetric": True,
                    "group_size": group,
                    "strategy": "group",
                    "dynamic": False,
                },
                "input_activations": None,
                "output_activations": None,
            }
        },
        "ignore": ignore,
    }


def _save(path: Path, tensors: dict[str, np.ndarray], config: dict[str, Any], shards: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    names = list(tensors)
    if shards == 1:
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
        return
    per = -(-len(names) // shards)
    weight_map: dict[str, str] = {}
    for s in range(shards):
        part = names[s * per : (s + 1) * per]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, str(path / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, fname))
    index = {
        "metadata": {"total_size": sum(a.nbytes for a in tensors.values())},
        "weight_map": weight_map,
    }
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


def write_qwen35_pack(
    path: Path,
    *,
    dims: Dims = Dims(),
    quantize: bool = True,
    group: int = 32,
    packed_ba: bool = False,
    ignore_prefix: str | None = None,
    mtp_declared: int = 0,
    mtp_present: bool = False,
    multimodal: bool = False,
    vision_tensors: bool | None = None,
    shards: int = 2,
    extra_config: dict[str, Any] | None = None,
) -> Pack:
    """A Qwen3.5-style hybrid pack.

    quantize: compressed-tensors W4A16 for the projections (lm_head, embeddings, norms, conv
      and in_proj_a/b stay 16-bit unless packed_ba).
    packed_ba: store in_proj_a/in_proj_b packed too (the broken pack of FIELD-NOTES P10).
    ignore_prefix: prefix used for the layer names in `ignore` (default: the tensors' own
      prefix; "model.language_model." on a text-only pack reproduces P10).
    multimodal: Qwen3_5ForConditionalGeneration layout: config nests `text_config` beside
      `vision_config`, text tensors under model.language_model.; vision_tensors (default: same
      as multimodal) adds model.visual.* tensors.
    """
    d = dims
    w = _Writer(quantize, group)
    prefix = "model.language_model." if multimodal else "model."
    full = [i for i in range(d.layers) if d.is_full(i)]
    key_dim = d.lin_k_heads * d.lin_k_dim
    value_dim = d.lin_v_heads * d.lin_v_dim
    w.add(f"{prefix}embed_tokens.weight", (d.vocab, d.hidden))
    for i in range(d.layers):
        lp = f"{prefix}layers.{i}."
        w.add(lp + "input_layernorm.weight", (d.hidden,))
        w.add(lp + "post_attention_layernorm.weight", (d.hidden,))
        if d.is_full(i):
            q_width = d.heads * d.head_dim * 2  # attn_output_gate: q_proj also yields the gate
            w.linear(lp + "self_attn.q_proj", q_width, d.hidden)
            w.linear(lp + "self_attn.k_proj", d.kv_heads * d.head_dim, d.hidden)
            w.linear(lp + "self_attn.v_proj", d.kv_heads * d.head_dim, d.hidden)
            w.linear(lp + "self_attn.o_proj", d.hidden, d.heads * d.head_dim)
            w.add(lp + "self_attn.q_norm.weight", (d.head_dim,))
            w.add(lp + "self_attn.k_norm.weight", (d.head_dim,))
        else:
            la = lp + "linear_attn."
            w.linear(la + "in_proj_qkv", 2 * key_dim + value_dim, d.hidden)
            w.linear(la + "in_proj_z", value_dim, d.hidden)
            w.linear(la + "in_proj_a", d.lin_v_heads, d.hidden, quantize=quantize and packed_ba)
            w.linear(la + "in_proj_b", d.lin_v_heads, d.hidden, quantize=quantize and packed_ba)
            w.linear(la + "out_proj", d.hidden, value_dim)
            w.add(la + "conv1d.weight", (2 * key_dim + value_dim, 1, d.conv))
            w.add(la + "A_log", (d.lin_v_heads,), np.float32)
            w.add(la + "dt_bias", (d.lin_v_heads,))
            w.add(la + "norm.weight", (d.lin_v_dim,))
        w.linear(lp + "mlp.gate_proj", d.intermediate, d.hidden)
        w.linear(lp + "mlp.up_proj", d.intermediate, d.hidden)
        w.linear(lp + "mlp.down_proj", d.hidden, d.intermediate)
    w.add(f"{prefix}norm.weight", (d.hidden,))
    w.add("lm_head.weight", (d.vocab, d.hidden))
    if mtp_present:  # one MTP layer, kept 16-bit as official packs do
        w.add("mtp.fc.weight", (d.hidden, 2 * d.hidden))
        w.add("mtp.pre_fc_norm_embedding.weight", (d.hidden,))
        w.add("mtp.pre_fc_norm_hidden.weight", (d.hidden,))
        w.add("mtp.norm.weight", (d.hidden,))
        mp = "mtp.layers.0."
        w.add(mp + "input_layernorm.weight", (d.hidden,))
        w.add(mp + "post_attention_layernorm.weight", (d.hidden,))
        w.add(mp + "self_attn.q_proj.weight", (d.heads * d.head_dim * 2, d.hidden))
        w.add(mp + "self_attn.k_proj.weight", (d.kv_heads * d.head_dim, d.hidden))
        w.add(mp + "self_attn.v_proj.weight", (d.kv_heads * d.head_dim, d.hidden))
        w.add(mp + "self_attn.o_proj.weight", (d.hidden, d.heads * d.head_dim))
        w.add(mp + "mlp.gate_proj.weight", (d.intermediate, d.hidden))
        w.add(mp + "mlp.up_proj.weight", (d.intermediate, d.hidden))
        w.add(mp + "mlp.down_proj.weight", (d.hidden, d.intermediate))
    vision_depth, vision_hidden = 2, 64
    if multimodal if vision_tensors is None else vision_tensors:
        vp = "model.visual."
        w.add(vp + "patch_embed.proj.weight", (vision_hidden, 3, 2, 16, 16))
        w.add(vp + "patch_embed.proj.bias", (vision_hidden,))
        for j in range(vision_depth):
            bp = f"{vp}blocks.{j}."
            for norm in ("norm1", "norm2"):
                w.add(bp + f"{norm}.weight", (vision_hidden,))
                w.add(bp + f"{norm}.bias", (vision_hidden,))
            w.add(bp + "attn.qkv.weight", (3 * vision_hidden, vision_hidden))
            w.add(bp + "attn.qkv.bias", (3 * vision_hidden,))
            w.add(bp + "attn.proj.weight", (vision_hidden, vision_hidden))
            w.add(bp + "attn.proj.bias", (vision_hidden,))
            w.add(bp + "mlp.linear_fc1.weight", (4 * vision_hidden, vision_hidden))
            w.add(bp + "mlp.linear_fc1.bias", (4 * vision_hidden,))
            w.add(bp + "mlp.linear_fc2.weight", (vision_hidden, 4 * vision_hidden))
            w.add(bp + "mlp.linear_fc2.bias", (vision_hidden,))
        w.add(vp + "merger.norm.weight", (vision_hidden,))
        w.add(vp + "merger.linear_fc1.weight", (4 * vision_hidden, 4 * vision_hidden))
        w.add(vp + "merger.linear_fc2.weight", (d.hidden, 4 * vision_hidden))

    text: dict[str, Any] = {
        "model_type": "qwen3_5_text",
        "hidden_size": d.hidden,
        "num_hidden_layers": d.layers,
        "intermediate_size": d.intermediate,
        "vocab_size": d.vocab,
        "num_attention_heads": d.heads,
        "num_key_value_heads": d.kv_heads,
        "head_dim": d.head_dim,
        "full_attention_interval": d.interval,
        "layer_types": [
            "full_attention" if d.is_full(i) else "linear_attention" for i in range(d.layers)
        ],
        "linear_num_key_heads": d.lin_k_heads,
        "linear_num_value_heads": d.lin_v_heads,
        "linear_key_head_dim": d.lin_k_dim,
        "linear_value_head_dim": d.lin_v_dim,
        "linear_conv_kernel_dim": d.conv,
        "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": mtp_declared,
        "attn_output_gate": True,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    }
    config: dict[str, Any]
    if multimodal:
        config = {
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5",
            "text_config": text,
            "vision_config": {
                "depth": vision_depth,
                "hidden_size": vision_hidden,
                "num_heads": 4,
                "out_hidden_size": d.hidden,
            },
            "tie_word_embeddings": False,
        }
    else:
        config = {"architectures": ["Qwen3_5ForCausalLM"], **text, "tie_word_embeddings": False}
    if quantize:
        ip = prefix if ignore_prefix is None else ignore_prefix
        ignore = ["lm_head"]
        for i in range(d.layers):
            if i not in full:
                ignore += [
                    f"{ip}layers.{i}.linear_attn.in_proj_a",
                    f"{ip}layers.{i}.linear_attn.in_proj_b",
                ]
        if mtp_present:
            ignore.append("re:^mtp\\..*")
        if multimodal:
            ignore.append("re:.*visual.*")
        config["quantization_config"] = _ct_config(group, ignore)
    config.update(extra_config or {})
    _save(path, w.tensors, config, shards)
    return Pack(path, config, w.tensors)


def write_llama_pack(
    path: Path,
    *,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 256,
    vocab: int = 512,
    tie: bool = True,
    quant: str | None = None,  # None, "awq" or "gptq"
    group: int = 64,
) -> Pack:
    """A dense Llama pack (all layers full attention), optionally AWQ or GPTQ int4.

    AWQ: qweight int32 [K, N/8], qzeros int32 [K/g, N/8], scales [K/g, N].
    GPTQ: qweight int32 [K/8, N], qzeros int32 [K/g, N/8], scales [K/g, N], g_idx int32 [K].
    """
    t: dict[str, np.ndarray] = {}

    def add(name: str, shape: tuple[int, ...], dtype: Any = F16) -> None:
        t[name] = np.zeros(shape, dtype=dtype)

    def linear(name: str, n: int, k: int) -> None:
        if quant == "awq":
            add(f"{name}.qweight", (k, n // 8), np.int32)
            add(f"{name}.qzeros", (k // group, n // 8), np.int32)
            add(f"{name}.scales", (k // group, n))
        elif quant == "gptq":
            add(f"{name}.qweight", (k // 8, n), np.int32)
            add(f"{name}.qzeros", (k // group, n // 8), np.int32)
            add(f"{name}.scales", (k // group, n))
            add(f"{name}.g_idx", (k,), np.int32)
        else:
            add(f"{name}.weight", (n, k))

    head_dim = hidden // heads
    add("model.embed_tokens.weight", (vocab, hidden))
    for i in range(layers):
        lp = f"model.layers.{i}."
        add(lp + "input_layernorm.weight", (hidden,))
        add(lp + "post_attention_layernorm.weight", (hidden,))
        linear(lp + "self_attn.q_proj", heads * head_dim, hidden)
        linear(lp + "self_attn.k_proj", kv_heads * head_dim, hidden)
        linear(lp + "self_attn.v_proj", kv_heads * head_dim, hidden)
        linear(lp + "self_attn.o_proj", hidden, heads * head_dim)
        linear(lp + "mlp.gate_proj", intermediate, hidden)
        linear(lp + "mlp.up_proj", intermediate, hidden)
        linear(lp + "mlp.down_proj", hidden, intermediate)
    add("model.norm.weight", (hidden,))
    if not tie:
        add("lm_head.weight", (vocab, hidden))
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": intermediate,
        "vocab_size": vocab,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": tie,
        "torch_dtype": "float16",
    }
    if quant == "awq":
        config["quantization_config"] = {
            "quant_method": "awq",
            "bits": 4,
            "group_size": group,
            "zero_point": True,
            "version": "gemm",
            "modules_to_not_convert": None,
        }
    elif quant == "gptq":
        config["quantization_config"] = {
            "quant_method": "gptq",
            "bits": 4,
            "group_size": group,
            "sym": False,
            "desc_act": False,
        }
    _save(path, t, config, 1)
    return Pack(path, config, t)


def truncate(file: Path, keep: int) -> None:
    """Cut a file to its first `keep` bytes (a broken download)."""
    data = file.read_bytes()[:keep]
    file.write_bytes(data)


def header_length(file: Path) -> int:
    """The 8-byte little-endian header length a safetensors file declares."""
    with file.open("rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
    return int(n)
