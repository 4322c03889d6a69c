"""The loader for our own files: nearest-M lookup, search order, defaults, shipped files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernels_tuning import output as O
from kernels_tuning import shim
from kernels_tuning.kernel_config import DEFAULT_INT4, SGLANG_DEFAULT_FP8, KernelConfig


def _write(d: Path, rel: str, table: dict[int, dict[str, int]]) -> Path:
    p = d / rel
    O.merge_write(p, table)
    return p


def test_shipped_h200_files_load_with_nearest_m() -> None:
    # the engine files, one set per release whose kernel they were tuned on
    for version in ("0.5.17", "0.5.23"):
        table = json.loads(
            (
                shim.CONFIG_DIR / "sglang" / version / O.sglang_filename(5120, 6144, "NVIDIA_H200")
            ).read_text()
        )
        assert len(table) == 20
    cfg = shim.get_config(
        "int4", 34816, 5120, 7, device_name="NVIDIA_H200", check_provenance=False
    )
    own = json.loads(
        (shim.CONFIG_DIR / "autotune" / O.int4_filename(34816, 5120, "NVIDIA_H200")).read_text()
    )
    assert cfg == KernelConfig.from_dict(own["8"])  # 7 is nearest to 8
    fp8 = shim.get_config("fp8", 5120, 6144, 1, device_name="NVIDIA_H200", check_provenance=False)
    split = json.loads(
        (
            shim.CONFIG_DIR / "autotune" / O.fp8_splitk_filename(5120, 6144, "NVIDIA_H200")
        ).read_text()
    )
    assert fp8 == KernelConfig.from_dict(split["1"])  # our split-K file wins over SGLang's


def test_defaults_without_a_file() -> None:
    assert shim.get_config("fp8", 128, 128, 4, device_name="NO_SUCH_GPU") == SGLANG_DEFAULT_FP8
    assert shim.get_config("int4", 128, 128, 4, device_name="NO_SUCH_GPU") == DEFAULT_INT4


def test_env_folder_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = KernelConfig(16, 32, 64, 1, 4, 2, SPLIT_K=2)
    _write(tmp_path, "autotune/" + O.int4_filename(256, 256, "TEST_GPU"), {1: cfg.as_dict()})
    monkeypatch.setenv(shim.ENV_DIR, str(tmp_path))
    assert (
        shim.get_config("int4", 256, 256, 3, device_name="TEST_GPU", check_provenance=False) == cfg
    )
    found = shim.find_config_file("int4", 256, 256, "TEST_GPU")
    assert found is not None and found.parent.parent == tmp_path


def test_sglang_named_file_is_the_fp8_fallback(tmp_path: Path) -> None:
    cfg = KernelConfig(32, 64, 128, 16, 4, 3)
    _write(
        tmp_path,
        "sglang/" + O.sglang_filename(512, 512, "TEST_GPU"),
        {64: cfg.as_dict(engine=True)},
    )
    assert (
        shim.get_config(
            "fp8",
            512,
            512,
            100,
            device_name="TEST_GPU",
            config_dir=tmp_path,
            check_provenance=False,
        )
        == cfg
    )


def test_own_files_carry_swap_ab_and_old_files_still_load(tmp_path: Path) -> None:
    sw = KernelConfig(8, 128, 128, 1, 4, 3, SPLIT_K=2, SWAP_AB=1)
    old = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1}
    old.update(num_warps=4, num_stages=3, SPLIT_K=4)  # written before SWAP_AB existed
    rel = "autotune/" + O.fp8_splitk_filename(512, 512, "TEST_GPU")
    p = _write(tmp_path, rel, {1: sw.as_dict(), 64: old})
    assert json.loads(p.read_text())["1"]["SWAP_AB"] == 1
    kw = {"device_name": "TEST_GPU", "config_dir": tmp_path, "check_provenance": False}
    assert shim.get_config("fp8", 512, 512, 2, **kw) == sw  # type: ignore[arg-type]
    got = shim.get_config("fp8", 512, 512, 60, **kw)  # type: ignore[arg-type]
    assert got.SWAP_AB == 0 and got.SPLIT_K == 4


def test_fold_scales_loads_for_fp8_and_is_refused_in_an_int4_file(tmp_path: Path) -> None:
    from autotune.errors import ConfigError

    f = KernelConfig(64, 128, 128, 32, 4, 3, FOLD_SCALES=1)
    kw = {"device_name": "TEST_GPU", "config_dir": tmp_path, "check_provenance": False}
    _write(
        tmp_path, "autotune/" + O.fp8_splitk_filename(512, 512, "TEST_GPU"), {4096: f.as_dict()}
    )
    assert shim.get_config("fp8", 512, 512, 3000, **kw) == f  # type: ignore[arg-type]
    rel = "autotune/" + O.int4_filename(512, 512, "TEST_GPU", 128, "awq")
    _write(tmp_path, rel, {16: f.with_(BLOCK_SIZE_M=16).as_dict()})
    with pytest.raises(ConfigError, match="FP8 option") as e:
        shim.get_config("int4", 512, 512, 16, **kw)  # type: ignore[arg-type]
    assert e.value.field == "FOLD_SCALES" and rel in str(e.value)


def test_tma_loads_for_fp8_and_is_refused_in_an_int4_file(tmp_path: Path) -> None:
    from autotune.errors import ConfigError

    t = KernelConfig(64, 128, 128, 32, 4, 3, FOLD_SCALES=1, TMA=1)
    kw = {"device_name": "TEST_GPU", "config_dir": tmp_path, "check_provenance": False}
    _write(
        tmp_path, "autotune/" + O.fp8_splitk_filename(512, 512, "TEST_GPU"), {4096: t.as_dict()}
    )
    assert shim.get_config("fp8", 512, 512, 3000, **kw) == t  # type: ignore[arg-type]
    rel = "autotune/" + O.int4_filename(512, 512, "TEST_GPU", 128, "awq")
    _write(tmp_path, rel, {16: t.with_(BLOCK_SIZE_M=16, FOLD_SCALES=0).as_dict()})
    with pytest.raises(ConfigError, match="FP8 option") as e:
        shim.get_config("int4", 512, 512, 16, **kw)  # type: ignore[arg-type]
    assert e.value.field == "TMA" and rel in str(e.value)


def test_atomic_reduce_loads_for_int4_with_a_deterministic_fallback(tmp_path: Path) -> None:
    from autotune.errors import ConfigError

    a = KernelConfig(16, 256, 128, 1, 4, 3, SPLIT_K=6, ATOMIC_REDUCE=1)
    kw = {"device_name": "TEST_GPU", "config_dir": tmp_path, "check_provenance": False}
    _write(tmp_path, "autotune/" + O.int4_filename(512, 512, "TEST_GPU", 128, "awq"),
           {1: a.as_dict()})  # fmt: skip
    assert shim.get_config("int4", 512, 512, 1, **kw) == a  # type: ignore[arg-type]
    ordered = shim.get_config("int4", 512, 512, 1, deterministic=True, **kw)  # type: ignore[arg-type]
    assert ordered == a.with_(ATOMIC_REDUCE=0)
    rel = "autotune/" + O.fp8_splitk_filename(512, 512, "TEST_GPU")
    _write(tmp_path, rel, {1: a.with_(BLOCK_SIZE_N=128).as_dict()})
    with pytest.raises(ConfigError, match="INT4 option") as e:
        shim.get_config("fp8", 512, 512, 1, **kw)  # type: ignore[arg-type]
    assert e.value.field == "ATOMIC_REDUCE" and rel in str(e.value)


def test_shipped_sidecars_match_the_kernel_source() -> None:
    """A kernel change without re-tuning would leave the shipped files describing another
    kernel: re-run `autotune kernels tune` on the GPU (or revert the kernel)."""
    sides = sorted(shim.CONFIG_DIR.glob("autotune/*" + O.PROVENANCE_SUFFIX))
    assert len(sides) == 20
    for side in sides:
        prov = json.loads(side.read_text())
        assert prov["kernel_sha256"] == O.kernel_source_sha256(prov["kernel"]), side.name
        assert prov["gpu_name"] == "NVIDIA H200"
    # engine files: tuned on the kernel of the release they are filed under, as catalogued
    from autotune.engines.kernel_facts import facts_for

    engine_sides = sorted(shim.CONFIG_DIR.glob("sglang/*/*" + O.PROVENANCE_SUFFIX))
    assert len(engine_sides) == 20
    for side in engine_sides:
        prov = json.loads(side.read_text())
        facts = facts_for("sglang", side.parent.name)
        assert prov["engine_version"] == side.parent.name, side
        assert prov["engine_kernel_fingerprint"] == facts.kernel_fingerprint, side
        assert prov["arch"] == "sm_90" and prov["gpu_name"] == "NVIDIA H200"
