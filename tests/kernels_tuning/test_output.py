"""File names as the engines look them up, atomic merged writes, provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.engines.kernel_source import code_fingerprint
from autotune.errors import ConfigError
from kernels_tuning import output as O


def test_engine_file_names_are_exact() -> None:
    dev = O.device_name_from("NVIDIA H200")
    assert dev == "NVIDIA_H200"
    assert O.sglang_filename(5120, 6144, dev) == (
        "N=5120,K=6144,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    )
    assert O.vllm_filename(5120, 6144, dev) == (
        "N=5120,K=6144,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    )
    assert O.device_name_from("NVIDIA H100 80GB HBM3") == "NVIDIA_H100_80GB_HBM3"
    assert O.int4_filename(34816, 5120, dev) == (
        "N=34816,K=5120,device_name=NVIDIA_H200,dtype=int4_w4a16,group_size=128,packing=awq.json"
    )
    assert O.fp8_splitk_filename(1, 2, dev).endswith("block_shape=[128,128],split_k.json")
    assert O.provenance_path(Path("d/a,b=[128, 128].json")) == Path(
        "d/a,b=[128, 128].provenance.json"
    )


def test_merge_write_keeps_other_keys_and_sorts(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    O.merge_write(p, {16: {"a": 1}, 1: {"a": 2}})
    O.merge_write(p, {16: {"a": 3}, 4: {"a": 4}})
    raw = json.loads(p.read_text())
    assert list(raw) == ["1", "4", "16"]
    assert raw["16"] == {"a": 3} and raw["1"] == {"a": 2}


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    O.atomic_write_json(p, {"1": {"a": 1}})
    with pytest.raises(TypeError):
        O.atomic_write_json(p, {"1": object()})  # not serializable: fails mid-write
    assert json.loads(p.read_text()) == {"1": {"a": 1}}
    assert [f.name for f in tmp_path.iterdir()] == ["x.json"]


def test_read_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="bad.json"):
        O.read_config_file(bad)
    bad.write_text('{"one": {}}')
    with pytest.raises(ConfigError, match="not an integer"):
        O.read_config_file(bad)


def test_nearest_key_like_the_engines() -> None:
    table = {1: "a", 16: "b", 32: "c", 4096: "d"}
    assert O.nearest(table, 8) == "a"  # |8-1| = 7 < |8-16| = 8
    assert O.nearest(table, 24) == "b"  # tie 16/32 -> the smaller key
    assert O.nearest(table, 8192) == "d"
    assert O.nearest(table, 9) == "b"


def _prov(**kw: object) -> O.Provenance:
    base = dict(
        gpu_name="NVIDIA H200",
        sm_count=132,
        cuda="13.0",
        torch="2.11.0",
        triton="3.6.0",
        kernel="fp8",
        kernel_sha256="abc",
    )
    base.update(kw)
    return O.Provenance(**base)  # type: ignore[arg-type]


def test_provenance_warning_when_the_machine_differs(tmp_path: Path) -> None:
    p = tmp_path / O.sglang_filename(256, 256, "NVIDIA_H200")
    O.merge_write(p, {1: {"BLOCK_SIZE_M": 16}})
    O.write_provenance(p, _prov(entries={"1": {"us": 3.0}}))
    assert O.check_provenance(p, _prov()) == []
    with pytest.warns(O.ProvenanceWarning, match="triton: 3.6.0 -> 3.7.0"):
        diffs = O.check_provenance(p, _prov(triton="3.7.0", gpu_name="NVIDIA H100"))
    assert "gpu_name: NVIDIA H200 -> NVIDIA H100" in diffs
    with pytest.warns(O.ProvenanceWarning):
        O.load_config_file(p, current=_prov(kernel_sha256="changed"))
    O.write_provenance(p, _prov(entries={"16": {"us": 5.0}}))  # entries merge
    assert set(O.read_provenance(p).entries) == {"1", "16"}  # type: ignore[union-attr]


def test_kernel_fingerprint_ignores_formatting() -> None:
    src = 'def f(a, b):\n    """Doc."""\n    return a + b  # sum\n'
    reformatted = "def f(\n    a,\n    b,\n):\n    # comment\n\n    return (a + b)\n"
    changed = "def f(a, b):\n    return a - b\n"
    fp = code_fingerprint
    assert fp(src) == fp(reformatted)
    assert fp(src) != fp(changed)
    assert len(O.kernel_source_sha256("fp8")) == 64
    assert O.kernel_source_sha256("fp8") != O.kernel_source_sha256("int4")
