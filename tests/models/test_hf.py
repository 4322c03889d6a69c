"""Model cards from local Hugging Face folders (config.json + safetensors headers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autotune.errors import ModelLoadError
from autotune.models import load_card
from autotune.models.hf import card_from_dir, quantization_from_config
from tests.inspect.packs import (
    Dims,
    Pack,
    header_length,
    truncate,
    write_llama_pack,
    write_qwen35_pack,
)


def expected_bytes(pack: Pack) -> dict[str, int]:
    """Bytes per component from the arrays the pack wrote (numpy's own nbytes)."""
    out = dict.fromkeys(("embed_tokens", "lm_head", "decoder", "mtp", "vision"), 0)
    for name, arr in pack.tensors.items():
        if name.startswith("mtp."):
            key = "mtp"
        elif name.startswith("model.visual."):
            key = "vision"
        elif name.endswith("embed_tokens.weight"):
            key = "embed_tokens"
        elif name.startswith("lm_head."):
            key = "lm_head"
        else:
            key = "decoder"
        out[key] += arr.nbytes
    return out


def test_qwen35_w4a16_pack(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "qwen35-w4a16")
    card = card_from_dir(pack.path)

    assert card.name == "qwen35-w4a16"
    assert card.source == str(pack.path.resolve())
    assert card.architecture == "Qwen3_5ForCausalLM"
    assert (card.num_layers, card.hidden_size, card.intermediate_size, card.vocab_size) == (
        4,
        128,
        256,
        512,
    )
    assert (card.num_attention_heads, card.num_kv_heads, card.head_dim) == (4, 2, 32)
    # full_attention_interval 4: layer 3 is full attention, 0-2 Gated DeltaNet (sglang §6).
    assert card.full_attention_layers == (3,)
    assert card.linear_layers == (0, 1, 2)
    la = card.linear_attention
    assert la is not None
    assert (la.num_key_heads, la.num_value_heads, la.key_head_dim, la.value_head_dim) == (
        16,
        48,
        16,
        16,
    )
    assert la.conv_kernel == 4 and la.ssm_dtype == "float32" and la.conv_dtype == "bfloat16"
    assert card.attn_output_gate and not card.tie_word_embeddings
    assert card.mtp_layers == 0 and card.vision is None
    q = card.quantization
    assert (q.scheme, q.bits, q.group_size, q.zero_point, q.checkpoint_format) == (
        "awq",
        4,
        32,
        False,
        "compressed-tensors",
    )
    exp = expected_bytes(pack)
    assert card.weights.model_dump(include=set(exp)) == exp
    # The packed int32 weights count 4 bytes per element: more than 0 and far below bf16.
    packed = sum(a.nbytes for n, a in pack.tensors.items() if n.endswith("weight_packed"))
    assert packed > 0 and card.weights.decoder > packed


def test_layer_types_follow_interval(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "p", dims=Dims(layers=8), quantize=False, shards=1)
    card = card_from_dir(pack.path)
    assert card.full_attention_layers == (3, 7)
    assert card.quantization.scheme == "none"
    assert card.weights.model_dump(include=set(expected_bytes(pack))) == expected_bytes(pack)


def test_layer_types_without_interval(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "p", quantize=False, shards=1)
    cfg = json.loads((pack.path / "config.json").read_text())
    del cfg["full_attention_interval"]
    cfg["layer_types"] = ["linear_attention", "full_attention"] * 2
    (pack.path / "config.json").write_text(json.dumps(cfg))
    assert card_from_dir(pack.path).full_attention_layers == (1, 3)


def test_multimodal_config_with_vision_and_mtp(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "mm", multimodal=True, mtp_present=True, mtp_declared=1)
    card = card_from_dir(pack.path)
    assert card.architecture == "Qwen3_5ForConditionalGeneration"
    assert card.num_layers == 4 and card.full_attention_layers == (3,)
    assert card.vision is not None
    assert (card.vision.layers, card.vision.hidden_size) == (2, 64)
    assert card.mtp_layers == 1 and card.has_mtp and card.is_multimodal
    exp = expected_bytes(pack)
    assert exp["vision"] > 0 and exp["mtp"] > 0
    assert card.weights.model_dump(include=set(exp)) == exp


def test_presence_comes_from_tensors_not_config(tmp_path: Path) -> None:
    # A text-only pack of a multimodal model: vision_config and mtp_num_hidden_layers in the
    # config, no vision or MTP tensors (FIELD-NOTES F2, P6).
    pack = write_qwen35_pack(tmp_path / "t", multimodal=True, vision_tensors=False, mtp_declared=1)
    card = card_from_dir(pack.path)
    assert card.vision is None and card.mtp_layers == 0
    assert card.weights.vision == 0 and card.weights.mtp == 0


def test_vision_tower_without_vision_config(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "v", multimodal=True, quantize=False, shards=1)
    cfg = json.loads((pack.path / "config.json").read_text())
    del cfg["vision_config"]
    (pack.path / "config.json").write_text(json.dumps(cfg))
    vision = card_from_dir(pack.path).vision
    assert vision is not None and (vision.layers, vision.hidden_size) == (2, 64)


def test_dense_llama_tied(tmp_path: Path) -> None:
    pack = write_llama_pack(tmp_path / "llama")
    card = card_from_dir(pack.path)
    assert card.architecture == "LlamaForCausalLM"
    assert card.full_attention_layers == (0, 1) and card.linear_attention is None
    assert card.head_dim == 32  # no head_dim in config: hidden / heads
    assert card.num_kv_heads == 2 and card.tie_word_embeddings
    assert card.dtype == "float16" and card.max_position_embeddings == 8192
    assert card.weights.lm_head == 0  # tied: no tensor of its own
    assert card.weights.model_dump(include=set(expected_bytes(pack))) == expected_bytes(pack)


@pytest.mark.parametrize("quant", ["awq", "gptq"])
def test_awq_gptq_cards(tmp_path: Path, quant: str) -> None:
    pack = write_llama_pack(tmp_path / quant, quant=quant, group=64)
    card = card_from_dir(pack.path)
    assert card.quantization.scheme == quant
    assert card.quantization.bits == 4 and card.quantization.group_size == 64
    assert card.quantization.zero_point  # awq zero_point true; gptq sym false
    assert card.weights.model_dump(include=set(expected_bytes(pack))) == expected_bytes(pack)


def test_fp8_block_pack_counts_fp8_and_bf16(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    path = tmp_path / "fp8"
    path.mkdir()
    tensors = {
        "model.embed_tokens.weight": torch.zeros(512, 256, dtype=torch.bfloat16),
        "model.layers.0.mlp.gate_proj.weight": torch.zeros(384, 256, dtype=torch.float8_e4m3fn),
        "model.layers.0.mlp.gate_proj.weight_scale_inv": torch.zeros(3, 2, dtype=torch.float32),
        "model.layers.0.input_layernorm.weight": torch.zeros(256, dtype=torch.bfloat16),
        "lm_head.weight": torch.zeros(512, 256, dtype=torch.bfloat16),
    }
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3ForCausalLM"],
                "hidden_size": 256,
                "num_hidden_layers": 1,
                "intermediate_size": 384,
                "vocab_size": 512,
                "num_attention_heads": 2,
                "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
            }
        )
    )
    card = card_from_dir(path)
    assert card.quantization.scheme == "fp8_block"
    assert card.quantization.block_shape == (128, 128)
    assert card.quantization.sglang_quantization == "fp8"
    assert card.weights.decoder == 384 * 256 * 1 + 3 * 2 * 4 + 256 * 2
    assert card.weights.embed_tokens == card.weights.lm_head == 512 * 256 * 2


@pytest.mark.parametrize(
    ("qc", "expected"),
    [
        (
            {"quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": True},
            ("awq", 4, 128, None),
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": -1, "sym": True},
            ("gptq", 4, None, None),
        ),
        (
            {
                "quant_method": "auto-round",
                "bits": 4,
                "group_size": 128,
                "sym": True,
                "packing_format": "auto_round:auto_gptq",
            },
            ("gptq", 4, 128, None),
        ),
        (
            {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
            ("nvfp4", 4, 16, "modelopt_fp4"),
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "g": {
                        "weights": {
                            "num_bits": 8,
                            "type": "float",
                            "strategy": "block",
                            "block_structure": [128, 128],
                        }
                    }
                },
            },
            ("fp8_block", 8, None, None),
        ),
    ],
)
def test_quantization_configs(qc: dict[str, object], expected: tuple[object, ...]) -> None:
    q = quantization_from_config(qc, Path("config.json"))
    assert (q.scheme, q.bits, q.group_size, q.sglang_quantization) == expected


def test_unsupported_quantization_is_named() -> None:
    with pytest.raises(ModelLoadError, match=r"quant_method' is 'bitsandbytes'; supported: awq"):
        quantization_from_config({"quant_method": "bitsandbytes"}, Path("config.json"))
    with pytest.raises(ModelLoadError, match="weight_block_size' must be two positive"):
        quantization_from_config(
            {"quant_method": "fp8", "weight_block_size": [128]}, Path("config.json")
        )


def test_per_channel_fp8_and_int8_are_modelled() -> None:
    fp8 = quantization_from_config({"quant_method": "fp8"}, Path("config.json"))
    assert fp8.scheme == "fp8" and fp8.block_shape is None
    mo = quantization_from_config({"quant_method": "modelopt", "quant_algo": "FP8"}, Path("c"))
    assert mo.scheme == "fp8" and mo.sglang_quantization == "modelopt_fp8"
    ct = {
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}},
    }
    assert quantization_from_config(ct, Path("c")).scheme == "int8"


def test_registry_loads_folder(tmp_path: Path) -> None:
    pack = write_llama_pack(tmp_path / "dense")
    assert load_card(str(pack.path)).name == "dense"


# --- errors: each names the file and what is wrong


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="nope: no such model folder"):
        card_from_dir(tmp_path / "nope")


def test_missing_config(tmp_path: Path) -> None:
    pack = write_llama_pack(tmp_path / "m")
    (pack.path / "config.json").unlink()
    with pytest.raises(ModelLoadError, match=r"config\.json: missing"):
        card_from_dir(pack.path)


def test_invalid_json(tmp_path: Path) -> None:
    pack = write_llama_pack(tmp_path / "m")
    (pack.path / "config.json").write_text('{"hidden_size": 128,\n  "x": }')
    with pytest.raises(ModelLoadError, match=r"config\.json: invalid JSON at line 2 column"):
        card_from_dir(pack.path)


def test_missing_field_names_text_config(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "m", multimodal=True, quantize=False, shards=1)
    cfg = json.loads((pack.path / "config.json").read_text())
    del cfg["text_config"]["hidden_size"]
    (pack.path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match=r"field 'text_config\.hidden_size' is missing"):
        card_from_dir(pack.path)


def test_wrong_field_type(tmp_path: Path) -> None:
    pack = write_llama_pack(tmp_path / "m")
    cfg = json.loads((pack.path / "config.json").read_text())
    cfg["num_hidden_layers"] = "two"
    (pack.path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match=r"'num_hidden_layers' must be an integer >= 1, got"):
        card_from_dir(pack.path)


def test_hybrid_without_linear_fields(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "m", quantize=False, shards=1)
    cfg = json.loads((pack.path / "config.json").read_text())
    del cfg["linear_value_head_dim"]
    (pack.path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="'linear_value_head_dim' is missing"):
        card_from_dir(pack.path)


def test_no_safetensors(tmp_path: Path) -> None:
    pack = write_llama_pack(tmp_path / "m")
    (pack.path / "model.safetensors").rename(pack.path / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match=r"no \*\.safetensors files"):
        card_from_dir(pack.path)


def test_truncated_header(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "m")
    shard = pack.shards[0]
    n = header_length(shard)
    truncate(shard, 8 + 100)
    with pytest.raises(ModelLoadError) as err:
        card_from_dir(pack.path)
    msg = str(err.value)
    assert shard.name in msg
    assert f"header is truncated (declares {n} bytes, file has 100 bytes" in msg


def test_truncated_data(tmp_path: Path) -> None:
    pack = write_llama_pack(tmp_path / "m")
    shard = pack.shards[0]
    size = shard.stat().st_size
    truncate(shard, size - 10)
    with pytest.raises(
        ModelLoadError,
        match=rf"model\.safetensors: data is truncated .*byte "
        rf"{size}, file has {size - 10} bytes",
    ):
        card_from_dir(pack.path)


def test_file_shorter_than_length_prefix(tmp_path: Path) -> None:
    pack = write_llama_pack(tmp_path / "m")
    truncate(pack.shards[0], 5)
    with pytest.raises(ModelLoadError, match="file is 5 bytes, too short for the 8-byte"):
        card_from_dir(pack.path)


def test_corrupt_header_json(tmp_path: Path) -> None:
    pack = write_llama_pack(tmp_path / "m")
    shard = pack.shards[0]
    data = bytearray(shard.read_bytes())
    data[8] = ord("[")  # the header starts with '{'
    shard.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="model.safetensors: "):
        card_from_dir(pack.path)


def test_index_names_missing_shard(tmp_path: Path) -> None:
    pack = write_qwen35_pack(tmp_path / "m")
    pack.shards[1].unlink()
    with pytest.raises(
        ModelLoadError,
        match=r"index\.json: names shard\(s\) not in the folder: "
        r"model-00002-of-00002",
    ):
        card_from_dir(pack.path)


def test_dtype_sizes() -> None:
    # Every dtype the loader accepts has a size; a new one would be refused, not guessed.
    from autotune.models.hf import SAFETENSORS_DTYPE_BITS, TensorInfo

    assert TensorInfo("w", "F4", (4, 3), "f").nbytes == 6
    assert TensorInfo("w", "I32", (2, 5), "f").nbytes == 40
    assert SAFETENSORS_DTYPE_BITS["BF16"] == np.dtype(np.float16).itemsize * 8
