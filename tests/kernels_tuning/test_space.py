"""The config space and its pre-compile filters."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from kernels_tuning.kernel_config import SGLANG_DEFAULT_FP8, SPLIT_K_VALUES, KernelConfig
from kernels_tuning.resources import H200_LIMITS, DeviceLimits, smem_bytes
from kernels_tuning.space import (
    SWAP_BLOCK_M,
    build_space,
    candidate_grid,
    compile_set,
    legality,
    waste,
)

C = KernelConfig
RTX4090 = DeviceLimits(99 * 1024, 128, "NVIDIA GeForce RTX 4090", "sm_89")

# Shared memory Triton 3.6 reported for sm_90 compiles of our kernels (calibration, this repo).
SM90_SHARED = {
    # (BM, BN, BK, warps, stages): (fp8, int4)
    (128, 32, 64, 8, 4): (40960, 72944),
    (128, 128, 128, 4, 3): (98816, 147584),
    (64, 256, 128, 4, 2): (82944, 115328),
    (32, 32, 64, 8, 4): (12288, 19696),
    (16, 64, 128, 8, 4): (30720, 41440),
    (256, 64, 64, 4, 3): (62464, 110912),
}


def test_grid_is_sglangs_superset() -> None:
    assert len(candidate_grid("fp8", split_k=False)) == 5 * 4 * 3 * 4 * 2 * 4  # 1,920
    assert len(candidate_grid("int4", split_k=True)) == 1920 * len(SPLIT_K_VALUES)


@pytest.mark.parametrize("key", list(SM90_SHARED))
def test_smem_model_bounds_the_compiler_figure(key: tuple[int, ...]) -> None:
    bm, bn, bk, w, s = key
    cfg = C(bm, bn, bk, 1, w, s)
    for kind, measured in zip(("fp8", "int4"), SM90_SHARED[key], strict=True):
        est = smem_bytes(cfg, kind, "sm_90")  # type: ignore[arg-type]
        assert measured <= est <= measured + 1024


def test_fp8_smem_off_hopper_is_the_sglang_rule() -> None:
    cfg = C(64, 128, 128, 1, 4, 4)
    assert smem_bytes(cfg, "fp8", "sm_89") == 3 * (64 + 128) * 128 + 1024


def test_legality_filters() -> None:
    assert "does not divide" in (legality(C(64, 64, 256, 1, 4, 3), "fp8", 128, H200_LIMITS) or "")
    big = C(128, 256, 128, 1, 8, 4)
    assert legality(big, "fp8", 128, H200_LIMITS) is None
    assert "shared memory" in (legality(big, "fp8", 128, RTX4090) or "")
    assert "registers" in (legality(C(128, 256, 64, 1, 4, 2), "fp8", 128, H200_LIMITS) or "")
    assert "2 K tiles" in (
        legality(C(16, 64, 128, 1, 4, 3, SPLIT_K=16), "fp8", 128, H200_LIMITS, 5120, 3072) or ""
    )


def test_waste_filters_for_small_m() -> None:
    space = build_space("fp8", 1, 5120, 6144, H200_LIMITS)
    assert {c.BLOCK_SIZE_M for c in space} == {16}
    assert {c.GROUP_SIZE_M for c in space} == {1}  # one M tile: all group orders are equal
    assert {c.SPLIT_K for c in space} == {1}  # engine files cannot hold split-K
    m24 = build_space("fp8", 24, 5120, 6144, H200_LIMITS)
    assert {c.BLOCK_SIZE_M for c in m24} == {16, 32}
    assert waste(SGLANG_DEFAULT_FP8, 1, 5120, H200_LIMITS) is not None
    # GROUP 64 equals GROUP 32 when there are only 20 M tiles
    assert waste(C(16, 64, 128, 64, 4, 3), 320, 5120, H200_LIMITS) is not None
    assert waste(C(16, 64, 128, 16, 4, 3), 320, 5120, H200_LIMITS) is None
    # split-K only while the output tiles leave the GPU under-filled
    assert waste(C(16, 32, 128, 1, 4, 3, SPLIT_K=2), 16, 34816, H200_LIMITS) is not None
    assert waste(C(16, 128, 128, 1, 4, 3, SPLIT_K=2), 16, 5120, H200_LIMITS) is None


def test_int4_space_has_split_k_and_large_m_space_is_large() -> None:
    assert any(c.SPLIT_K > 1 for c in build_space("int4", 1, 5120, 6144, H200_LIMITS))
    assert len(build_space("fp8", 8192, 5120, 6144, H200_LIMITS)) > 1000


def test_compile_set_is_one_config_per_binary() -> None:
    cs = compile_set("fp8", H200_LIMITS, swap_ab=False, fold=False, tma=False)
    assert len({c.compile_key() for c in cs}) == len(cs)
    assert 250 < len(cs) < 320
    with_swap = compile_set("fp8", H200_LIMITS)  # precompile covers the SWAP_AB binaries
    assert len({c.compile_key() for c in with_swap}) == len(with_swap)
    assert set(cs) < set(with_swap)
    assert {c.SWAP_AB for c in with_swap} == {0, 1}
    assert {c.BLOCK_SIZE_M for c in with_swap if c.SWAP_AB} == set(SWAP_BLOCK_M)
    assert {c.BLOCK_SIZE_K for c in compile_set("int4", H200_LIMITS) if c.SWAP_AB} == {128}


def test_swap_ab_only_at_small_m_and_only_where_it_can_run() -> None:
    assert not any(c.SWAP_AB for c in build_space("fp8", 1, 5120, 6144, H200_LIMITS))
    own = build_space("fp8", 1, 5120, 6144, H200_LIMITS, split_k=True, swap_ab=True)
    swapped = [c for c in own if c.SWAP_AB]
    # M=1: 8 tokens on N (mma.sync) or 16 (wgmma), nothing wider
    assert swapped and {c.BLOCK_SIZE_M for c in swapped} == {8, 16}
    assert min(c.BLOCK_SIZE_N for c in swapped) == 64
    assert {c.BLOCK_SIZE_M for c in own if not c.SWAP_AB} == {16}
    m16 = build_space("int4", 16, 5120, 6144, H200_LIMITS)  # INT4: on by default
    assert {c.BLOCK_SIZE_M for c in m16 if c.SWAP_AB} == {8, 16}
    assert all(c.BLOCK_SIZE_N >= 128 and c.BLOCK_SIZE_K == 128 for c in m16 if c.SWAP_AB)
    assert not any(c.SWAP_AB for c in build_space("int4", 64, 5120, 6144, H200_LIMITS))
    assert "SWAP_AB at M=64" in (
        waste(C(32, 64, 128, 1, 4, 3, SWAP_AB=1), 64, 5120, H200_LIMITS) or ""
    )
    assert "BLOCK_SIZE_M in" in (
        legality(C(64, 64, 128, 1, 4, 3, SWAP_AB=1), "fp8", 128, H200_LIMITS) or ""
    )
    assert "needs SWAP_AB" in (legality(C(8, 64, 128, 1, 4, 3), "fp8", 128, H200_LIMITS) or "")
    assert "BLOCK_SIZE_N >= 64" in (
        legality(C(16, 32, 128, 1, 4, 3, SWAP_AB=1), "fp8", 128, H200_LIMITS) or ""
    )
    assert "spill" in (
        legality(C(32, 256, 128, 1, 8, 3, SWAP_AB=1), "int4", 128, H200_LIMITS) or ""
    )
    assert legality(C(32, 256, 128, 1, 8, 3, SWAP_AB=1), "fp8", 128, H200_LIMITS) is None
    assert "BLOCK_SIZE_K = 128" in (
        legality(C(16, 128, 64, 1, 4, 3, SWAP_AB=1), "int4", 128, H200_LIMITS) or ""
    )
    # swapped, the weight rows are the MMA's M side: wgmma (stages buffers) from BN 64
    assert (
        smem_bytes(C(16, 64, 128, 1, 4, 4, SWAP_AB=1), "fp8", "sm_90")
        == 4 * (16 + 64) * 128 + 1024
    )
    assert smem_bytes(C(16, 64, 128, 1, 4, 4), "fp8", "sm_90") == 3 * (16 + 64) * 128 + 1024


def test_swap_ab_config_dicts_and_keys() -> None:
    sw = C(16, 64, 128, 1, 4, 3, SWAP_AB=1)
    assert sw.as_dict()["SWAP_AB"] == 1
    assert "SWAP_AB" not in C(16, 64, 128, 1, 4, 3).as_dict()  # old files/records unchanged
    assert KernelConfig.from_dict(sw.as_dict()) == sw
    assert KernelConfig.from_dict(C(16, 64, 128, 1, 4, 3).as_dict()).SWAP_AB == 0
    with pytest.raises(ConfigError, match="SWAP_AB"):
        sw.as_dict(engine=True)
    assert not sw.engine_ok and C(16, 64, 128, 1, 4, 3).engine_ok
    with pytest.raises(ConfigError, match="0 or 1"):
        KernelConfig.from_dict({**sw.as_dict(), "SWAP_AB": 2})
    assert sw.key() != sw.with_(SWAP_AB=0).key()
    assert sw.compile_key() != sw.with_(SWAP_AB=0).compile_key()


def test_config_dicts() -> None:
    assert SGLANG_DEFAULT_FP8.as_dict(engine=True) == {
        "BLOCK_SIZE_M": 64,
        "BLOCK_SIZE_N": 128,
        "BLOCK_SIZE_K": 128,
        "GROUP_SIZE_M": 32,
        "num_warps": 4,
        "num_stages": 3,
    }
    with pytest.raises(ConfigError, match="SPLIT_K"):
        C(16, 64, 128, 1, 4, 3, SPLIT_K=2).as_dict(engine=True)
    with pytest.raises(ConfigError, match="unknown config keys"):
        KernelConfig.from_dict({**SGLANG_DEFAULT_FP8.as_dict(), "BLOCK_M": 1})
    with pytest.raises(ConfigError, match="positive integer"):
        KernelConfig.from_dict({**SGLANG_DEFAULT_FP8.as_dict(), "num_warps": 0})


def test_fold_scales_is_fp8_own_file_only_and_needs_one_weight_scale_per_tile() -> None:
    f = C(64, 128, 128, 32, 4, 3, FOLD_SCALES=1)
    assert legality(f, "fp8", 128, H200_LIMITS) is None
    assert "divide the weight block" in (
        legality(f.with_(BLOCK_SIZE_N=256), "fp8", 128, H200_LIMITS) or ""
    )
    assert "FP8 option" in (legality(f.with_(BLOCK_SIZE_M=16), "int4", 128, H200_LIMITS) or "")
    with pytest.raises(ConfigError, match="FOLD_SCALES") as e:
        f.as_dict(engine=True)
    assert e.value.field == "FOLD_SCALES" and not f.engine_ok
    assert (
        f.as_dict()["FOLD_SCALES"] == 1
        and "FOLD_SCALES" not in C(64, 128, 128, 32, 4, 3).as_dict()
    )
    assert C.from_dict(f.as_dict()) == f and f.key().endswith("f")
    assert f.compile_key() != f.with_(FOLD_SCALES=0).compile_key()
    with pytest.raises(ConfigError, match="expected 0 or 1"):
        C.from_dict({**f.as_dict(), "FOLD_SCALES": 2})
    # only where asked (our own FP8 files), and only BN <= 128
    assert not any(c.FOLD_SCALES for c in build_space("fp8", 4096, 5120, 6144, H200_LIMITS))
    own = build_space("fp8", 4096, 5120, 6144, H200_LIMITS, split_k=True, fold=True)
    folded = [c for c in own if c.FOLD_SCALES]
    assert folded and max(c.BLOCK_SIZE_N for c in folded) == 128
    assert {c.with_(FOLD_SCALES=0) for c in folded} <= set(own)
    assert {c.FOLD_SCALES for c in compile_set("fp8", H200_LIMITS)} == {0, 1}
    assert not any(c.FOLD_SCALES for c in compile_set("int4", H200_LIMITS))


def test_tma_is_fp8_own_file_only_on_hopper() -> None:
    t = C(64, 128, 128, 32, 4, 3, FOLD_SCALES=1, TMA=1)
    assert legality(t, "fp8", 128, H200_LIMITS) is None
    assert "FP8 option" in (legality(t.with_(FOLD_SCALES=0), "int4", 128, H200_LIMITS) or "")
    assert "sm_90" in (legality(t, "fp8", 128, RTX4090) or "")
    sm100 = DeviceLimits(227 * 1024, 148, "NVIDIA B200", "sm_100")
    assert legality(t, "fp8", 128, sm100) is None  # not a string comparison of "sm_100"
    with pytest.raises(ConfigError, match="TMA") as e:
        t.with_(FOLD_SCALES=0).as_dict(engine=True)
    assert e.value.field == "TMA" and not t.engine_ok
    assert t.as_dict()["TMA"] == 1 and "TMA" not in t.with_(TMA=0).as_dict()
    assert C.from_dict(t.as_dict()) == t and t.key().endswith("fx")
    assert t.compile_key() != t.with_(TMA=0).compile_key()
    with pytest.raises(ConfigError, match="expected 0 or 1"):
        C.from_dict({**t.as_dict(), "TMA": 2})
    # only where asked (our own FP8 files): each legal config with a TMA twin
    assert not any(c.TMA for c in build_space("fp8", 4096, 5120, 6144, H200_LIMITS))
    own = build_space("fp8", 4096, 5120, 6144, H200_LIMITS, split_k=True, fold=True, tma=True)
    with_tma = {c for c in own if c.TMA}
    assert with_tma and {c.with_(TMA=0) for c in with_tma} == set(own) - with_tma
    assert {c.TMA for c in compile_set("fp8", H200_LIMITS)} == {0, 1}
    assert not any(c.TMA for c in compile_set("int4", H200_LIMITS))


def test_canonical_group_is_the_smallest_group_with_the_same_order() -> None:
    from kernels_tuning.space import canonical_group

    d = SGLANG_DEFAULT_FP8  # BM 64, G32
    assert canonical_group(d, 1024).GROUP_SIZE_M == 16  # 16 M tiles: G32 == G16
    assert canonical_group(d, 4096).GROUP_SIZE_M == 32  # 64 M tiles: G32 is its own order
    assert canonical_group(d, 64).GROUP_SIZE_M == 1  # one M tile: every order is equal
    assert waste(canonical_group(d, 1024), 1024, 5120, H200_LIMITS) is None


def test_atomic_reduce_is_an_int4_split_k_option_left_out_when_deterministic() -> None:
    a = C(16, 256, 128, 1, 4, 3, SPLIT_K=6, ATOMIC_REDUCE=1)
    assert legality(a, "int4", 128, H200_LIMITS) is None
    assert "INT4 option" in (legality(a.with_(BLOCK_SIZE_M=64), "fp8", 128, H200_LIMITS) or "")
    assert "SPLIT_K > 1" in (legality(a.with_(SPLIT_K=1), "int4", 128, H200_LIMITS) or "")
    with pytest.raises(ConfigError, match="ATOMIC_REDUCE") as e:
        a.with_(SPLIT_K=1).as_dict(engine=True)
    assert e.value.field == "ATOMIC_REDUCE" and not a.with_(SPLIT_K=1).engine_ok
    assert (
        a.as_dict()["ATOMIC_REDUCE"] == 1
        and "ATOMIC_REDUCE" not in a.with_(ATOMIC_REDUCE=0).as_dict()
    )
    assert C.from_dict(a.as_dict()) == a and a.key().endswith("k6a")
    # a runtime argument: no binary of its own
    assert a.compile_key() == a.with_(ATOMIC_REDUCE=0).compile_key()
    assert not any(c.ATOMIC_REDUCE for c in compile_set("int4", H200_LIMITS))
    # INT4 by default: an atomic twin of every split config, none without a split
    space = build_space("int4", 1, 5120, 3072, H200_LIMITS)
    atomic = {c for c in space if c.ATOMIC_REDUCE}
    split = {c for c in space if c.SPLIT_K > 1 and not c.ATOMIC_REDUCE}
    assert atomic and {c.with_(ATOMIC_REDUCE=0) for c in atomic} == split
    assert not any(c.ATOMIC_REDUCE for c in build_space("int4", 1, 5120, 3072, H200_LIMITS,
                                                        atomic=False))  # fmt: skip
    assert not any(c.ATOMIC_REDUCE for c in build_space("int4", 1, 5120, 3072, H200_LIMITS,
                                                        split_k=False))  # fmt: skip
    fp8 = build_space("fp8", 1, 5120, 3072, H200_LIMITS, split_k=True, fold=True, tma=True)
    assert not any(c.ATOMIC_REDUCE for c in fp8)
