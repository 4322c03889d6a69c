from __future__ import annotations

import pytest

from autotune.errors import ModelLoadError, UnknownNameError
from autotune.models import BUILTIN_CARDS, load_card
from autotune.models.layout import projections


def test_qwen38_architecture_f1() -> None:
    c = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]
    assert c.num_layers == 64 and len(c.full_attention_layers) == 16
    assert c.full_attention_layers[:3] == (3, 7, 11) and c.full_attention_layers[-1] == 63
    assert len(c.linear_layers) == 48 and c.is_hybrid
    assert not c.has_mtp  # the community pack has no MTP (F2)


def test_weights_as_loaded() -> None:
    gib = 2**30
    assert BUILTIN_CARDS["qwen3.8-27b-awq-int4"].weights.total / gib == pytest.approx(
        16.80, abs=0.01
    )
    assert BUILTIN_CARDS["qwen3.8-27b-nvfp4"].weights.total / gib == pytest.approx(20.14, abs=0.01)
    assert 28.0 < BUILTIN_CARDS["qwen3.8-27b-fp8"].weights.total / gib < 29.5


def test_the_autoround_gptq_pack_loads_what_its_public_log_shows() -> None:
    """server-forge's two RX 7900 XTX (SGLang's gfx1100 fork, TP 2): 'Load weight end. mem
    usage=9.12 GB' a rank for the target, its MTP draft apart; the tensor count alone is 8.28."""
    from autotune.planner.common import weights_per_rank

    loaded = BUILTIN_CARDS["qwen3.8-27b-autoround-gptq-int4"]
    counted = BUILTIN_CARDS["qwen3.8-27b-gptq-int4"]
    assert loaded.quantization == counted.quantization and loaded.has_mtp
    gib = 2**30
    assert weights_per_rank(loaded, 2, load_mtp=False) / gib == pytest.approx(9.12, abs=0.005)
    assert weights_per_rank(counted, 2, load_mtp=False) / gib == pytest.approx(8.28, abs=0.01)
    # held at load, not read per decoded token: the roofline reads the same bytes
    assert (loaded.weights.decoder, loaded.weights.lm_head) == (
        counted.weights.decoder,
        counted.weights.lm_head,
    )


def test_projection_shapes_match_sglang_merges() -> None:
    p = {x.name: x for x in projections(BUILTIN_CARDS["qwen3.8-27b-fp8"])}
    assert (p["in_proj_qkvz"].n, p["in_proj_qkvz"].k) == (16384, 5120)
    assert (p["gate_up_proj"].n, p["down_proj"].k) == (34816, 17408)
    assert p["in_proj_ba"].n == 96 and not p["in_proj_ba"].quantizable  # P10
    assert p["qkv_proj"].at_tp(2) == (7168, 5120) and p["o_proj"].at_tp(2) == (5120, 3072)


def test_load_card_errors() -> None:
    with pytest.raises(UnknownNameError, match="did you mean"):
        load_card("qwen3.8-27b-awq")
    with pytest.raises(ModelLoadError, match="no such model folder"):
        load_card("/nonexistent/model/dir")
