"""GEMM shapes from the model card and the batch sizes."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.models import BUILTIN_CARDS
from kernels_tuning.shapes import (
    SGLANG_BATCH_SIZES,
    batch_sizes,
    explicit_shapes,
    gemm_shapes,
    kind_for_card,
    parse_batch_sizes,
    parse_nk,
    shape_report,
)

FP8 = BUILTIN_CARDS["qwen3.8-27b-fp8"]
AWQ = BUILTIN_CARDS["qwen3.8-27b-awq-int4"]


def _nk(shapes: list) -> list[tuple[int, int, str]]:
    return [(s.n, s.k, s.label) for s in shapes]


def test_qwen38_tp1_shapes_merged_like_sglang() -> None:
    assert _nk(gemm_shapes(FP8, 1, "fp8")) == [
        (14336, 5120, "qkv_proj"),  # q with output gate (2 x 24 x 256) + k, v (4 x 256 each)
        (5120, 6144, "o_proj+out_proj"),  # attention o_proj and GDN out_proj coincide
        (16384, 5120, "in_proj_qkvz"),
        (34816, 5120, "gate_up_proj"),
        (5120, 17408, "down_proj"),
    ]


def test_qwen38_tp2_splits_n_of_column_and_k_of_row_parallel() -> None:
    assert _nk(gemm_shapes(AWQ, 2, "int4")) == [
        (7168, 5120, "qkv_proj"),
        (5120, 3072, "o_proj+out_proj"),
        (8192, 5120, "in_proj_qkvz"),
        (17408, 5120, "gate_up_proj"),
        (5120, 8704, "down_proj"),
    ]


def test_in_proj_ba_is_excluded_as_unquantized() -> None:
    rep = shape_report(FP8, 1, "fp8")
    assert [name for name, _ in rep.excluded] == ["in_proj_ba"]
    assert all(s.n != 96 for s in rep.shapes)


def test_indivisible_tp_is_an_error_naming_the_projection() -> None:
    with pytest.raises(ConfigError, match="down_proj"):
        gemm_shapes(FP8, 3, "fp8")  # 17408 / 3 is not an integer


def test_explicit_shapes_are_checked() -> None:
    assert explicit_shapes([(256, 512)], "fp8")[0].n == 256
    with pytest.raises(ConfigError, match="multiple of the fp8 weight block"):
        explicit_shapes([(200, 512)], "fp8")
    with pytest.raises(ConfigError, match="group size"):
        explicit_shapes([(256, 200)], "int4")
    assert parse_nk("5120x6144") == (5120, 6144)
    with pytest.raises(ConfigError):
        parse_nk("5120")


def test_batch_sizes() -> None:
    default = batch_sizes()
    assert len(SGLANG_BATCH_SIZES) == 18
    assert set(SGLANG_BATCH_SIZES) <= set(default)
    assert 8192 in default and 3 in default and len(default) == 20
    assert batch_sizes(spec_draft_tokens=4, max_spec_batch=8, extra=()) == sorted(
        set(SGLANG_BATCH_SIZES) | {32}
    )
    assert parse_batch_sizes("8, 1,2,2") == [1, 2, 8]
    with pytest.raises(ConfigError):
        parse_batch_sizes("0,1")


def test_kind_from_card() -> None:
    assert kind_for_card(FP8) == "fp8"
    assert kind_for_card(AWQ) == "int4"
    with pytest.raises(ConfigError, match="--kind"):
        kind_for_card(BUILTIN_CARDS["qwen3.8-27b-nvfp4"])
