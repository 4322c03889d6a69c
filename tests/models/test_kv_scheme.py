"""The KV cache dtype a quantized checkpoint declares (Quantization.kv_cache_dtype), as
models.hf.quantization reads it from compressed-tensors and modelopt configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import ModelLoadError
from autotune.models.config_cards import config_card
from autotune.models.hf import quantization_from_config

CT_W4 = {
    "quant_method": "compressed-tensors",
    "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "group_size": 32}}},
}
FP8_STATIC = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}


def _kv(q: dict[str, object]) -> str | None:
    return quantization_from_config(q, Path("config.json")).kv_cache_dtype


def test_compressed_tensors_scheme() -> None:
    assert _kv(CT_W4) is None
    assert _kv({**CT_W4, "kv_cache_scheme": None}) is None
    assert _kv({**CT_W4, "kv_cache_scheme": FP8_STATIC}) == "fp8"
    with pytest.raises(ModelLoadError, match="kv_cache_scheme"):
        _kv({**CT_W4, "kv_cache_scheme": {"num_bits": 8, "type": "int"}})


def test_modelopt_algo_and_scheme() -> None:
    mo = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    assert _kv(mo) is None
    assert _kv({**mo, "kv_cache_quant_algo": "FP8"}) == "fp8"
    assert _kv({**mo, "kv_cache_quant_algo": "NVFP4"}) == "nvfp4"
    assert _kv({**mo, "kv_cache_quant_algo": "INT8"}) is None  # vLLM falls back to auto
    assert _kv({**mo, "kv_cache_scheme": FP8_STATIC}) == "fp8"
    assert _kv({**mo, "kv_cache_scheme": {**FP8_STATIC, "dynamic": True}}) is None
    nested = {"quant_method": "modelopt", "quantization": {"kv_cache_quant_algo": "FP8"}}
    assert _kv({**mo, **nested}) == "fp8"


def test_other_methods_declare_none() -> None:
    assert _kv({"quant_method": "fp8", "kv_cache_scheme": FP8_STATIC}) is None


@pytest.mark.parametrize(
    ("model", "kv"),
    [
        ("poolside/Laguna-S-2.1-INT4", "fp8"),
        ("poolside/Laguna-S-2.1-NVFP4", None),
        ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", "fp8"),
        ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", None),
        ("RedHatAI/Qwen3.6-35B-A3B-NVFP4", None),
    ],
)
def test_committed_cards(model: str, kv: str | None) -> None:
    card = config_card(model)
    assert card is not None
    assert card.quantization.kv_cache_dtype == kv
