"""The KV cache dtype a checkpoint declares, as vLLM takes it (planner.vllm_dtype.
checkpoint_kv_dtype): the release boundaries read from the wheels, and the public Laguna-S-2.1
launches on vLLM 0.25.1 whose logs state the FP8 KV cache."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from autotune.calibration.records import load_record
from autotune.calibration.replay import replay
from autotune.models.card import ModelCard
from autotune.models.config_cards import config_card
from autotune.planner.vllm import VLLMPlan
from autotune.planner.vllm_dtype import (
    COMPRESSED_KV_AUTO_ONLY_SINCE,
    COMPRESSED_KV_SINCE,
    MODELOPT_KV_SINCE,
    MODELOPT_NVFP4_KV_SINCE,
    checkpoint_kv_dtype,
)
from autotune.planner.vllm_history import at_least
from tests.wheels import engine_wheel_or_skip, wheel_text

RECORDS = Path(__file__).resolve().parents[1] / "data" / "real_launches" / "vllm"
_ATTENTION = (
    "vllm/model_executor/layers/attention/attention.py",
    "vllm/attention/layer.py",
)


def _card(model: str) -> ModelCard:
    card = config_card(model)
    assert card is not None
    return card


def _attention_source(version: str) -> str:
    with zipfile.ZipFile(engine_wheel_or_skip("vllm", version)) as z:
        names = set(z.namelist())
        return next(z.read(p).decode() for p in _ATTENTION if p in names)


@pytest.mark.parametrize(
    "version", ["0.14.1", "0.15.0", "0.21.0", "0.22.0", "0.25.1", "0.33.0", "0.34.0"]
)
def test_compressed_tensors_branch(version: str) -> None:
    text = _attention_source(version)
    assert ('getattr(quant_config, "kv_cache_scheme", None)' in text) is at_least(
        version, COMPRESSED_KV_SINCE
    )
    auto_only = 'kv_cache_scheme is not None and kv_cache_dtype == "auto"' in text
    assert auto_only is at_least(version, COMPRESSED_KV_AUTO_ONLY_SINCE)


@pytest.mark.parametrize("version", ["0.13.0", "0.14.0", "0.19.1", "0.20.0", "0.25.1"])
def test_modelopt_resolution(version: str) -> None:
    args = wheel_text("vllm", version, "vllm/engine/arg_utils.py")
    assert ("resolve_kv_cache_dtype_string(" in args) is at_least(version, MODELOPT_KV_SINCE)
    if at_least(version, MODELOPT_KV_SINCE):
        utils = wheel_text("vllm", version, "vllm/utils/torch_utils.py")
        table = utils[utils.index("MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP = {") :]
        table = table[: table.index("}")]
        assert '"fp8": "fp8_e4m3"' in table
        assert ('"nvfp4": "nvfp4"' in table) is at_least(version, MODELOPT_NVFP4_KV_SINCE)


def test_mla_has_no_scheme_branch() -> None:
    text = wheel_text("vllm", "0.25.1", "vllm/model_executor/layers/attention/mla_attention.py")
    assert "kv_cache_scheme" not in text


def test_compressed_tensors_rule() -> None:
    card = _card("poolside/Laguna-S-2.1-INT4")
    notes: list[str] = []
    assert checkpoint_kv_dtype(card, "auto", "0.25.1", notes) == "fp8"
    assert notes and "fp8" in notes[0]
    assert checkpoint_kv_dtype(card, "auto", "0.14.1", []) == "auto"
    assert checkpoint_kv_dtype(card, "bfloat16", "0.21.0", []) == "fp8"  # overridden
    assert checkpoint_kv_dtype(card, "bfloat16", "0.22.0", []) == "bfloat16"  # explicit wins
    plain = _card("poolside/Laguna-S-2.1-NVFP4")
    assert checkpoint_kv_dtype(plain, "auto", "0.25.1", []) == "auto"


def test_modelopt_rule() -> None:
    card = _card("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    assert checkpoint_kv_dtype(card, "auto", "0.19.0", []) == "fp8_e4m3"
    assert checkpoint_kv_dtype(card, "auto", "0.13.0", []) == "auto"
    assert checkpoint_kv_dtype(card, "fp8", "0.19.0", []) == "fp8"
    q = card.quantization.model_copy(update={"kv_cache_dtype": "nvfp4"})
    nv = card.model_copy(update={"quantization": q})
    assert checkpoint_kv_dtype(nv, "auto", "0.19.1", []) == "auto"
    assert checkpoint_kv_dtype(nv, "auto", "0.20.0", []) == "nvfp4"


@pytest.mark.parametrize(
    ("record", "kv_dtype"),
    [
        ("more-laguna-s-2.1-int4-gb10-tp1", "fp8"),
        ("more-laguna-s-2.1-int4-gb10-tp1-2", "fp8"),
        ("repo-laguna-s-2.1-nvfp4-gb10-tp1", "auto"),
    ],
)
def test_laguna_launches_tokens_per_kv_gib(record: str, kv_dtype: str) -> None:
    """The KV dtype and the layout (the DFlash drafter's layers counted as full attention): the
    tokens each GiB of KV memory holds match the log's within 1%. The KV memory itself is off
    by the unified-memory accounting the records leave unmodelled."""
    r = replay(load_record(RECORDS / f"{record}.yaml"))
    plan = r.plan
    assert isinstance(plan, VLLMPlan) and plan.kv_dtype == kv_dtype
    gib = float(r.record.log.split("Available KV cache memory: ")[1].split(" GiB")[0])
    assert r.observed_kv
    planned = plan.kv_pool_tokens / plan.kv_cache_gib
    assert planned == pytest.approx(r.observed_kv / gib, rel=0.01)
