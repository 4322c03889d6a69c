"""`autotune kernels ...` (autotune/cli/kernels.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.cli.kernels import engine_config_dir
from autotune.errors import ConfigError

runner = CliRunner()


def test_shapes_json() -> None:
    res = runner.invoke(
        app, ["kernels", "shapes", "--model", "qwen3.8-27b-awq-int4", "--tp", "2", "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["tp"][0]["kind"] == "int4"
    assert {(s["n"], s["k"]) for s in data["tp"][0]["shapes"]} == {
        (7168, 5120),
        (5120, 3072),
        (8192, 5120),
        (17408, 5120),
        (5120, 8704),
    }
    assert len(data["batch_sizes"]) == 20


def _vllm_tuned(root: Path) -> Path:
    """A file tuned on vLLM 0.32.0's kernel, as `kernels tune --engine vllm` writes it."""
    from autotune.engines.kernel_facts import facts_for
    from kernels_tuning import output

    facts = facts_for("vllm", "0.32.0")
    path = root / "vllm" / "0.32.0" / facts.file_name_for(5120, 6144, "NVIDIA_H200")
    cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1}
    output.atomic_write_json(path, {"1": {**cfg, "num_warps": 4, "num_stages": 4}})
    prov = output.Provenance(
        gpu_name="NVIDIA H200",
        engine="vllm",
        engine_version="0.32.0",
        engine_kernel_fingerprint=facts.kernel_fingerprint,
        arch="sm_90",
    )
    output.write_provenance(path, prov)
    return path


def test_install_copies_into_a_target(tmp_path: Path) -> None:
    """--target names the release's config folder elsewhere (here: no vLLM installed), so the
    proof reproduces the lookup's path from the catalog."""
    _vllm_tuned(tmp_path / "tuned")
    target = tmp_path / "img" / "vllm/model_executor/layers/quantization/utils/configs"
    args = ["kernels", "install", "--engine", "vllm", "--from", str(tmp_path / "tuned")]
    args += ["--engine-version", "0.32.0", "--target", str(target), "--device-name", "NVIDIA_H200"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["proof"]["ok"] and data["proof"]["method"] == "catalog"
    names = sorted(p.name for p in target.iterdir())
    assert names == [
        "N=5120,K=6144,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
        "N=5120,K=6144,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128]"
        ".provenance.json",
    ]


def test_install_refuses_a_folder_the_release_does_not_read(tmp_path: Path) -> None:
    _vllm_tuned(tmp_path / "tuned")
    res = runner.invoke(
        app,
        ["kernels", "install", "--engine", "vllm", "--from", str(tmp_path / "tuned")]
        + ["--engine-version", "0.32.0", "--target", str(tmp_path / "configs")],
    )
    assert isinstance(res.exception, ConfigError), res.output
    assert "would never read" in str(res.exception)
    assert not (tmp_path / "configs").exists()


def test_install_without_the_engine_says_how_to_point_at_it() -> None:
    if engine_config_dir("sglang") is not None:
        pytest.skip("sglang is installed here")
    res = runner.invoke(app, ["kernels", "install", "--engine", "sglang", "--dry-run"])
    assert isinstance(res.exception, ConfigError), res.output
    assert "not installed" in str(res.exception) and "--site-packages" in str(res.exception)


def test_install_shipped_files_of_the_release_kernel(tmp_path: Path) -> None:
    """0.5.23's shipped set installs (its sm_90 keys included); 0.5.20 runs another kernel,
    for which nothing is shipped: refused with the command that tunes it, nothing written."""
    target = tmp_path / "sglang/kernels/ops/gemm/configs"
    res = runner.invoke(
        app,
        ["kernels", "install", "--engine", "sglang", "--engine-version", "0.5.23", "--json"]
        + ["--target", str(target)],
    )
    assert res.exit_code == 0, res.output
    names = {p.name for p in target.glob("*.json")}
    assert "N=5120,K=6144,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json" in (
        names
    )
    old = tmp_path / "sglang/kernels/ops/quantization/configs"
    res = runner.invoke(
        app,
        ["kernels", "install", "--engine", "sglang", "--engine-version", "0.5.20"]
        + ["--target", str(old)],
    )
    assert isinstance(res.exception, ConfigError), res.output
    assert "autotune kernels tune --engine sglang --engine-version 0.5.20" in str(res.exception)
    assert not old.exists()


def test_install_rejects_unknown_engine() -> None:
    res = runner.invoke(app, ["kernels", "install", "--engine", "llama"])
    assert res.exit_code != 0


def test_show_picks_nearest(tmp_path: Path) -> None:
    from kernels_tuning.output import sglang_filename
    from kernels_tuning.shim import CONFIG_DIR

    f = CONFIG_DIR / "sglang" / "0.5.17" / sglang_filename(5120, 6144, "NVIDIA_H200")
    res = runner.invoke(app, ["kernels", "show", str(f), "--m", "20", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["picked"] == data["configs"]["16"]  # 16 and 24 tie at distance 4: the smaller
    assert data["provenance"]["gpu_name"] == "NVIDIA H200"


def test_show_marks_swap_ab_and_split_k(tmp_path: Path) -> None:
    base = {"BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4}
    table = {
        "1": {**base, "BLOCK_SIZE_M": 16, "num_stages": 4, "SPLIT_K": 2, "SWAP_AB": 1},
        "64": {**base, "BLOCK_SIZE_M": 64, "num_stages": 3},
    }
    f = tmp_path / "N=5120,K=6144,device_name=X,dtype=fp8_w8a8,block_shape=[128,128],split_k.json"
    f.write_text(json.dumps(table))
    res = runner.invoke(app, ["kernels", "show", str(f)])
    assert res.exit_code == 0, res.output
    lines = {ln.split()[0]: ln for ln in res.output.splitlines() if ln.startswith("M=")}
    assert lines["M=1"].rstrip().endswith("SPLIT_K=2 SWAP_AB"), lines
    assert "SWAP_AB" not in lines["M=64"] and "SPLIT_K" not in lines["M=64"], lines


def test_show_names_every_own_file_option(tmp_path: Path) -> None:
    base = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1}
    table = {
        "1": {**base, "num_warps": 4, "num_stages": 3, "SPLIT_K": 6, "ATOMIC_REDUCE": 1},
        "2": {**base, "num_warps": 4, "num_stages": 3, "SPLIT_K": 6},
        "3": {**base, "num_warps": 4, "num_stages": 3, "FOLD_SCALES": 1, "TMA": 1},
    }
    f = tmp_path / "N=5120,K=6144,device_name=X,dtype=int4_w4a16,group_size=128,packing=awq.json"
    f.write_text(json.dumps(table))
    res = runner.invoke(app, ["kernels", "show", str(f)])
    assert res.exit_code == 0, res.output
    lines = {ln.split()[0]: ln.rstrip() for ln in res.output.splitlines() if ln.startswith("M=")}
    assert lines["M=1"].endswith("SPLIT_K=6 ATOMIC_REDUCE"), lines
    assert lines["M=2"].endswith("SPLIT_K=6"), lines
    assert lines["M=3"].endswith("FOLD_SCALES TMA"), lines


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--engine-version", "0.5.99"], "0.5.99"),  # not catalogued: the known ones are named
        ([], "--engine needs --engine-version"),
        (["--engine-version", "0.5.23", "--kind", "int4"], "no engine reads an INT4"),
    ],
)
def test_tune_on_the_engine_kernel_refuses_bad_input_before_any_gpu_work(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    res = runner.invoke(
        app,
        ["kernels", "tune", "--nk", "5120,6144", "--engine", "sglang", *args]
        + ["--out", str(tmp_path / "out")],
    )
    assert isinstance(res.exception, ConfigError), res.output
    assert needle in str(res.exception)
    if "0.5.99" in needle:
        assert "0.5.23" in str(res.exception)  # the known releases
    assert not (tmp_path / "out").exists()


def _other_env(root: Path, version: str) -> Path:
    """Another environment's site-packages with SGLang `version` (its lookup module present:
    what `kernels install` and `kernels tune` require of a catalogued release's layout)."""
    from autotune.engines.kernel_facts import facts_for
    from tests.installs import fake_engine_site

    site = fake_engine_site(root / f"env-{version}", "sglang", "sglang", version)
    lookup = site / facts_for("sglang", "0.5.23").lookup_module
    lookup.parent.mkdir(parents=True, exist_ok=True)
    lookup.write_text("# the release's lookup module\n")
    return site


def test_tune_reads_the_release_from_another_environment(tmp_path: Path) -> None:
    """`kernels tune --engine sglang --site-packages DIR` (or --engine-python PY): the release
    is the one installed there (no --engine-version needed), and the target names that site
    so every worker reads the kernel from it."""
    import sys

    from autotune.cli.kernels_plan import EngineWhere, engine_target
    from kernels_tuning.engine_space import EngineTarget

    site = _other_env(tmp_path, "0.5.23")
    target = engine_target("sglang", None, "fp8", where=EngineWhere(site_packages=site))
    assert target == EngineTarget("sglang", "0.5.23", str(site.resolve()))
    assert EngineTarget.parse(target.tag) == target and target.tag.startswith("sglang==0.5.23@/")
    python = tmp_path / "python3"  # an interpreter of that environment
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    by_python = engine_target(
        "sglang", "0.5.23", "fp8", where=EngineWhere(engine_python=str(python))
    )
    assert by_python == target


@pytest.mark.parametrize(
    ("args", "flag", "needle"),
    [
        (["--engine-version", "0.5.22"], "--engine-version", "another release"),
        (["--kind", "int4"], "--kind", "no engine reads an INT4"),
        (["--engine-python", "python3"], "--site-packages", "not both"),
    ],
)
def test_tune_from_another_environment_refuses_bad_input(
    args: list[str], flag: str, needle: str, tmp_path: Path
) -> None:
    site = _other_env(tmp_path, "0.5.23")
    res = runner.invoke(
        app,
        ["kernels", "tune", "--nk", "5120,6144", "--engine", "sglang", "--site-packages"]
        + [str(site), *args, "--out", str(tmp_path / "out")],
    )
    assert isinstance(res.exception, ConfigError), res.output
    assert res.exception.field == flag and needle in str(res.exception)
    res = runner.invoke(
        app, ["kernels", "tune", "--nk", "5120,6144", "--site-packages", str(site)]
    )
    assert isinstance(res.exception, ConfigError)
    assert str(res.exception).startswith("--site-packages: needs --engine")
