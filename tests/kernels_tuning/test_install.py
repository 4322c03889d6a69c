"""`autotune kernels install` (kernels_tuning/install.py) against real engine releases.

Each test unpacks, from the release's PyPI wheel, what the lookup needs into a temporary
site-packages folder: the .dist-info METADATA, the package __init__ files down to the lookup
module, that module and its configs folder (SGLang 0.5.15, 0.5.17 and 0.5.23: one release per
folder layout; vLLM 0.32.0). The proof runs the release's own get_w8a8_block_fp8_configs from
that module. Wheels are cached in $AUTOTUNE_WHEEL_CACHE or ~/.cache/autotune/wheels; the tests
that need one skip only when PyPI cannot be reached.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.engines.kernel_facts import KernelFacts, facts_for
from autotune.errors import ConfigError
from kernels_tuning import install as inst
from kernels_tuning import output
from tests.installs import fake_engine_site
from tests.wheels import engine_wheel_or_skip, nightly_site

runner = CliRunner()
RELEASES = [("sglang", "0.5.15"), ("sglang", "0.5.17"), ("sglang", "0.5.23"), ("vllm", "0.32.0")]
DEV = "Test_GPU_9000"  # no upstream file has this device name
ENTRY = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 4,
    "num_stages": 4,
}
TABLE = {"1": ENTRY, "64": {**ENTRY, "BLOCK_SIZE_M": 64, "num_stages": 3}}


def wheel(engine: str, version: str) -> Path:
    return engine_wheel_or_skip(engine, version)


@pytest.fixture(scope="session")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    done: dict[tuple[str, str], Path] = {}

    def get(engine: str, version: str) -> Path:
        if (engine, version) not in done:
            dest = tmp_path_factory.mktemp(f"{engine}-{version}")
            extract_site(wheel(engine, version), facts_for(engine, version), dest)
            done[engine, version] = dest
        return done[engine, version]

    return get


def extract_site(whl: Path, facts: KernelFacts, dest: Path) -> None:
    with zipfile.ZipFile(whl) as zf:
        names = set(zf.namelist())
        parts = facts.lookup_module.split("/")
        want = {n for n in names if n.endswith(".dist-info/METADATA")}
        want |= {f"{'/'.join(parts[:i])}/__init__.py" for i in range(1, len(parts))} & names
        want |= {facts.lookup_module, facts.kernel_module}
        want |= {n for n in names if n.startswith(facts.config_dir + "/")}
        for n in sorted(want):
            zf.extract(n, dest)


@pytest.fixture
def site(unpacked: Callable[[str, str], Path], tmp_path: Path) -> Callable[[str, str], Path]:
    def make(engine: str, version: str) -> Path:
        out = tmp_path / f"site-{engine}-{version}"
        shutil.copytree(unpacked(engine, version), out)
        return out

    return make


def tuned(
    root: Path,
    engine: str,
    version: str,
    *,
    arch: str | None = "sm_90",
    table: Mapping[str, Mapping[str, int]] = TABLE,
    fingerprint: str | None = None,
    n: int = 5120,
    k: int = 6144,
    dev: str = DEV,
    gpu: str | None = None,
) -> Path:
    """A tuned file as `kernels tune --engine` writes it: OUT/ENGINE/VERSION/<engine name>."""
    f = facts_for(engine, version)
    path = root / engine / version / f.file_name_for(n, k, dev)
    output.atomic_write_json(path, dict(table))
    prov = output.Provenance(
        gpu_name=gpu or dev.replace("_", " "),
        kernel="fp8",
        engine=engine,
        engine_version=version,
        engine_kernel_fingerprint=fingerprint or f.kernel_fingerprint,
        arch=arch,
    )
    output.write_provenance(path, prov)
    return path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# ---------------------------------------------------------------------------------------------
# installs that the engine's own lookup finds


@pytest.mark.parametrize(("engine", "version"), RELEASES, ids=[f"{e}-{v}" for e, v in RELEASES])
def test_installs_where_the_release_reads(
    engine: str, version: str, site: Callable[[str, str], Path], tmp_path: Path
) -> None:
    sp = site(engine, version)
    src = tmp_path / "tuned"
    tuned(src, engine, version, arch="sm_80")
    tuned(src, engine, version, arch="sm_80", n=7168, k=5120)
    res = inst.install(engine, source=src, site_packages=sp)
    f = res.facts
    assert (f.engine, f.version, res.dest) == (engine, version, sp / f.config_dir)
    assert res.proof.method == "engine-source" and res.proof.ok, res.proof
    for x in res.proof.files:
        assert x.m_keys == (1, 64) and not x.changed
        assert x.path is not None
        assert os.path.realpath(x.path) == os.path.realpath(res.dest / x.name)
        assert (res.dest / x.name).is_file()
        assert output.provenance_path(res.dest / x.name).is_file()
    assert len(res.written) == 4 and not res.replaced  # two files, two sidecars
    data = res.to_json()
    assert data["version"] == version and data["proof"]["ok"] is True
    assert data["facts_from"] == "catalog"
    assert data["reads"].startswith(f"{f.lookup_module}:get_w8a8_block_fp8_configs")


def test_0_5_23_does_not_read_the_old_folder(
    site: Callable[[str, str], Path], tmp_path: Path
) -> None:
    """The bug this replaces: files copied into srt/layers/quantization/configs are never read
    by SGLang >= 0.5.16."""
    sp = site("sglang", "0.5.23")
    facts = facts_for("sglang", "0.5.23")
    path = tuned(tmp_path / "tuned", "sglang", "0.5.23")
    old = sp / "sglang/srt/layers/quantization/configs"
    old.mkdir(parents=True)
    shutil.copy(path, old / path.name)
    files = inst.select_files(tmp_path / "tuned", facts)
    source = (sp / facts.lookup_module).read_text()
    proof = inst.prove(facts, sp / facts.lookup_module, source, files)
    assert proof.method == "engine-source"
    assert not proof.ok and proof.files[0].detail == "the lookup returned no table"
    # ... and the command refuses that folder outright
    before = snapshot(sp)
    with pytest.raises(ConfigError, match="would never read"):
        inst.install("sglang", source=tmp_path / "tuned", site_packages=sp, target=old)
    assert snapshot(sp) == before


def test_any_release_with_the_same_kernel_qualifies(
    site: Callable[[str, str], Path], tmp_path: Path
) -> None:
    sp = site("sglang", "0.5.17")
    tuned(tmp_path / "t", "sglang", "0.5.15", arch="sm_80")  # same kernel, older folder
    res = inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    assert res.proof.ok and res.files[0].tuned_on == "0.5.15"
    assert res.dest == sp / "sglang/kernels/ops/quantization/configs"


def test_hopper_keys_install_into_0_5_23(site: Callable[[str, str], Path], tmp_path: Path) -> None:
    sp = site("sglang", "0.5.23")
    table = {"1": {**ENTRY, "SWAP_AB": 1, "SPLIT_K": 4}, "64": ENTRY}
    tuned(tmp_path / "t", "sglang", "0.5.22", table=table)
    res = inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    assert res.proof.ok
    assert json.loads((res.dest / res.files[0].name).read_text())["1"]["SWAP_AB"] == 1


def test_dry_run_writes_nothing(site: Callable[[str, str], Path], tmp_path: Path) -> None:
    sp = site("sglang", "0.5.23")
    tuned(tmp_path / "t", "sglang", "0.5.23")
    before = snapshot(sp)
    res = inst.install("sglang", source=tmp_path / "t", site_packages=sp, dry_run=True)
    assert snapshot(sp) == before and res.written == []
    assert res.proof.ok and res.proof.method == "engine-source"
    assert "temporary copy" in res.proof.note


def test_replaced_file_is_reported_and_restored_on_failure(
    site: Callable[[str, str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sp = site("sglang", "0.5.23")
    facts = facts_for("sglang", "0.5.23")
    tuned(tmp_path / "t", "sglang", "0.5.23")
    tuned(tmp_path / "t", "sglang", "0.5.23", n=7168, k=5120)
    dest = sp / facts.config_dir
    existing = dest / facts.file_name_for(5120, 6144, DEV)
    existing.write_text('{"8": {}}')
    before = snapshot(sp)
    real = os.replace
    calls = {"n": 0}

    def failing(a: Any, b: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError("disk full")
        real(a, b)

    monkeypatch.setattr(os, "replace", failing)  # the copy (atomic_copy) renames through os
    with pytest.raises(OSError, match="disk full"):
        inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    monkeypatch.setattr(os, "replace", real)
    assert snapshot(sp) == before  # nothing half-written, the old file back
    res = inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    assert res.replaced == [existing.name] and res.proof.ok


def test_missing_file_after_install_undoes_it(
    site: Callable[[str, str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sp = site("vllm", "0.32.0")
    tuned(tmp_path / "t", "vllm", "0.32.0")
    before = snapshot(sp)
    # a lookup that looks elsewhere (as a wrongly catalogued folder would)
    broken = inst.Proof("engine-source", "", (inst.FileProof("x", False, None, detail="no"),))
    monkeypatch.setattr(inst, "prove", lambda *a, **k: broken)
    with pytest.raises(inst.InstallProofError, match="undone"):
        inst.install("vllm", source=tmp_path / "t", site_packages=sp)
    assert snapshot(sp) == before


# ---------------------------------------------------------------------------------------------
# refusals: each a clear message, nothing written


def test_unknown_release(site: Callable[[str, str], Path], tmp_path: Path) -> None:
    sp = site("sglang", "0.5.23")
    tuned(tmp_path / "t", "sglang", "0.5.23")
    before = snapshot(sp)
    with pytest.raises(ConfigError) as exc:
        inst.install("sglang", source=tmp_path / "t", site_packages=sp, engine_version="0.5.99")
    assert "0.5.99" in str(exc.value) and "0.5.23" in str(exc.value)
    assert snapshot(sp) == before


def _tuned_for(root: Path, facts: KernelFacts, arch: str = "sm_80") -> None:
    path = root / facts.engine / facts.version / facts.file_name_for(5120, 6144, DEV)
    output.atomic_write_json(path, dict(TABLE))
    prov = output.Provenance(
        gpu_name=DEV.replace("_", " "),
        kernel="fp8",
        engine=facts.engine,
        engine_version=facts.version,
        engine_kernel_fingerprint=facts.kernel_fingerprint,
        arch=arch,
    )
    output.write_provenance(path, prov)


def test_a_nightly_is_read_from_its_own_source(tmp_path: Path) -> None:
    """An SGLang build no catalogued release is (here 0.5.23's sources under a nightly's
    version): its facts are read from the installed source the way the catalog is generated,
    files tuned on the same kernel code install and the build's own lookup finds them; once its
    kernel code changes, they no longer qualify."""
    build = "0.5.23.post1.dev4+g0123abc"
    sp = nightly_site("sglang", "0.5.23", build, tmp_path / "site")
    src = tmp_path / "tuned"
    tuned(src, "sglang", "0.5.23", arch="sm_80")
    res = inst.install("sglang", source=src, site_packages=sp)
    assert res.facts == dataclasses.replace(facts_for("sglang", "0.5.23"), version=build)
    assert (
        res.dest == sp / res.facts.config_dir and res.to_json()["facts_from"] == "installed source"
    )
    assert res.proof.method == "engine-source" and res.proof.ok, res.proof
    assert [x.name for x in res.proof.files] == [t.name for t in res.files]
    # naming the installed build on the command line reads it the same way
    named = inst.install("sglang", source=src, site_packages=sp, engine_version=build)
    assert named.facts == res.facts

    kernel = sp / res.facts.kernel_module
    kernel.write_text(kernel.read_text().replace("    pid = tl.program_id(axis=0)\n",
                      "    pid = tl.program_id(axis=0)\n    pid = pid + 0\n", 1))  # fmt: skip
    edited = dataclasses.replace(res.facts, version="0.5.23.post1.dev5+g4567def")
    (sp / f"sglang-{build}.dist-info").rename(sp / f"sglang-{edited.version}.dist-info")
    meta = sp / f"sglang-{edited.version}.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace(build, edited.version))
    with pytest.raises(ConfigError, match=r"sglang 0\.5\.23\.post1\.dev5\+g4567def's kernel"):
        inst.install("sglang", source=src, site_packages=sp)


def test_a_nightly_of_an_unknown_layout_is_refused(tmp_path: Path) -> None:
    """A build whose kernel path autotune cannot follow is refused with what was not found,
    never installed by guess."""
    sp = fake_engine_site(tmp_path / "site", "sglang", "sglang", "0.5.24.dev1")
    tuned(tmp_path / "t", "sglang", "0.5.23")
    with pytest.raises(ConfigError) as exc:
        inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    msg = str(exc.value)
    assert "sglang 0.5.24.dev1" in msg and "not a catalogued release" in msg
    assert "fp8_utils.py" in msg  # the dispatch module it looked for


def test_unknown_layout(site: Callable[[str, str], Path], tmp_path: Path) -> None:
    sp = site("sglang", "0.5.23")
    tuned(tmp_path / "t", "sglang", "0.5.23")
    (sp / facts_for("sglang", "0.5.23").lookup_module).unlink()
    before = snapshot(sp)
    with pytest.raises(ConfigError) as exc:
        inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    msg = str(exc.value)
    assert "unknown layout" in msg and "sglang/kernels/ops/gemm/fp8_kernel.py" in msg
    assert "0.5.23" in msg
    assert snapshot(sp) == before
    # a wrong --engine-version is caught the same way: 0.5.15's module is not in 0.5.23
    sp2 = site("sglang", "0.5.17")
    with pytest.raises(ConfigError, match="unknown layout.*srt/layers/quantization/fp8_kernel.py"):
        inst.install("sglang", source=tmp_path / "t", site_packages=sp2, engine_version="0.5.15")


def test_missing_engine(tmp_path: Path) -> None:
    tuned(tmp_path / "t", "sglang", "0.5.23")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no sglang/ package"):
        inst.install("sglang", source=tmp_path / "t", site_packages=tmp_path / "empty")
    with pytest.raises(ConfigError, match="is not installed in --engine-python"):
        inst.install("sglang", source=tmp_path / "t", engine_python=sys.executable)
    with pytest.raises(ConfigError, match="expected one of"):
        inst.install("llama", source=tmp_path / "t")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "t"]


def test_other_kernel_fingerprint(site: Callable[[str, str], Path], tmp_path: Path) -> None:
    sp = site("sglang", "0.5.23")
    tuned(tmp_path / "t", "sglang", "0.5.17", arch="sm_80")
    before = snapshot(sp)
    with pytest.raises(ConfigError) as exc:
        inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    msg = str(exc.value)
    fp23 = facts_for("sglang", "0.5.23").kernel_fingerprint[:12]
    fp17 = facts_for("sglang", "0.5.17").kernel_fingerprint[:12]
    assert f"sglang 0.5.23's kernel (fingerprint {fp23})" in msg
    assert f"tuned on sglang 0.5.17, kernel {fp17}" in msg
    assert "autotune kernels tune --engine sglang --engine-version 0.5.23" in msg
    assert snapshot(sp) == before


def test_files_of_our_own_kernel_never_qualify(tmp_path: Path) -> None:
    """Engine-named files whose sidecar names no engine kernel (tuned on autotune's own mirror
    of an old kernel, as shipped before) are never installed."""
    from kernels_tuning import output as O

    facts = facts_for("sglang", "0.5.23")
    path = tmp_path / "sglang" / facts.file_name_for(5120, 6144, "NVIDIA_H200")
    O.merge_write(path, {1: ENTRY})
    O.write_provenance(path, O.Provenance(gpu_name="NVIDIA H200", kernel="fp8"))
    with pytest.raises(ConfigError, match="tuned on our own kernel, no engine fingerprint"):
        inst.select_files(tmp_path, facts)


def test_shipped_sets_qualify_for_every_release_with_their_kernel() -> None:
    """The shipped H200 sets: 0.5.17's serves every release with its kernel, 0.5.23's too."""
    from autotune.engines.kernel_facts import known_versions
    from kernels_tuning.shim import CONFIG_DIR

    served = []
    for version in known_versions("sglang"):
        try:
            files = inst.select_files(CONFIG_DIR, facts_for("sglang", version))
        except ConfigError:
            continue
        served.append(version)
        assert len(files) == 10
    assert {"0.5.10", "0.5.17", "0.5.18", "0.5.21", "0.5.23"} <= set(served)
    assert "0.5.20" not in served and "0.5.9" not in served


def test_swap_ab_file_cannot_go_into_0_5_17(
    site: Callable[[str, str], Path], tmp_path: Path
) -> None:
    sp = site("sglang", "0.5.17")
    table = {"1": {**ENTRY, "SWAP_AB": 1}, "64": ENTRY}
    path = tuned(tmp_path / "t", "sglang", "0.5.17", table=table)
    before = snapshot(sp)
    with pytest.raises(ConfigError) as exc:
        inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    msg = str(exc.value)
    assert path.name in msg and "M=1" in msg and "SWAP_AB" in msg and "0.5.17" in msg
    assert snapshot(sp) == before


def test_sm_90_keys_refused_for_an_sm_80_file(
    site: Callable[[str, str], Path], tmp_path: Path
) -> None:
    sp = site("sglang", "0.5.23")
    table = {"1": ENTRY, "16": {**ENTRY, "SPLIT_K": 2}}
    tuned(tmp_path / "t", "sglang", "0.5.23", table=table, arch="sm_80")
    before = snapshot(sp)
    with pytest.raises(ConfigError, match=r"M=16: key SPLIT_K is not honoured .* on sm_80"):
        inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    # on sm_90 an entry must also select the kernel that takes those keys
    table = {"1": {**ENTRY, "SWAP_AB": 0, "SPLIT_K": 1}}
    shutil.rmtree(tmp_path / "t")
    tuned(tmp_path / "t", "sglang", "0.5.23", table=table, arch="sm_90")
    with pytest.raises(ConfigError, match="do not select the kernel"):
        inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    assert snapshot(sp) == before


def test_device_name_filter(site: Callable[[str, str], Path], tmp_path: Path) -> None:
    sp = site("sglang", "0.5.23")
    tuned(tmp_path / "t", "sglang", "0.5.23")
    tuned(tmp_path / "t", "sglang", "0.5.23", dev="Other_GPU")
    res = inst.install("sglang", source=tmp_path / "t", site_packages=sp, device_name="Other_GPU")
    assert [t.name for t in res.files] == [
        facts_for("sglang", "0.5.23").file_name_for(5120, 6144, "Other_GPU")
    ]
    with pytest.raises(ConfigError, match="no file for Nobody"):
        inst.install("sglang", source=tmp_path / "t", site_packages=sp, device_name="Nobody")


def test_device_name_follows_the_release_rule(
    site: Callable[[str, str], Path], tmp_path: Path
) -> None:
    """vLLM >= 0.26 squeezes runs of blanks (get_device_name_as_file_name); a file named with
    SGLang's rule is installed under the name that release looks for."""
    sp = site("vllm", "0.32.0")
    tuned(tmp_path / "t", "vllm", "0.32.0", dev="Test__GPU", gpu="Test  GPU")
    res = inst.install("vllm", source=tmp_path / "t", site_packages=sp)
    assert [t.name for t in res.files] == [
        facts_for("vllm", "0.32.0").file_name_for(5120, 6144, "Test_GPU")
    ]
    assert res.proof.ok


# ---------------------------------------------------------------------------------------------
# how the engine is found, and the catalog fallback


def test_engine_python_and_target(site: Callable[[str, str], Path], tmp_path: Path) -> None:
    sp = site("sglang", "0.5.17")
    py = tmp_path / "python"
    py.write_text(f'#!/bin/sh\nPYTHONPATH="{sp}" exec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    found = inst.find_engine("sglang", engine_python=str(py))
    assert (found.version, found.site) == ("0.5.17", sp)
    # --target elsewhere, ending in the release's folder; version from that interpreter
    target = tmp_path / "image" / "sglang/kernels/ops/quantization/configs"
    tuned(tmp_path / "t", "sglang", "0.5.17", arch=None)
    res = inst.install("sglang", source=tmp_path / "t", engine_python=str(py), target=target)
    assert res.dest == target and res.proof.ok
    assert res.proof.method == "engine-source"  # the installed module's source, run there


def test_target_without_an_engine_uses_the_catalog(tmp_path: Path) -> None:
    tuned(tmp_path / "t", "vllm", "0.32.0", arch=None)
    target = tmp_path / "img" / "vllm/model_executor/layers/quantization/utils/configs"
    with pytest.raises(ConfigError, match="--engine-version"):
        inst.install("vllm", source=tmp_path / "t", target=target)
    res = inst.install("vllm", source=tmp_path / "t", target=target, engine_version="0.32.0")
    assert res.proof.ok and res.proof.method == "catalog"
    assert "source is not available" in res.proof.note


def test_uncovered_free_name_falls_back_to_the_catalog(
    site: Callable[[str, str], Path], tmp_path: Path
) -> None:
    sp = site("sglang", "0.5.23")
    facts = facts_for("sglang", "0.5.23")
    module = sp / facts.lookup_module
    text = module.read_text().replace(
        'device_name = get_device_name().replace(" ", "_")',
        'device_name = some_new_helper().replace(" ", "_")',
    )
    module.write_text(text)
    tuned(tmp_path / "t", "sglang", "0.5.23")
    res = inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    assert res.proof.method == "catalog" and res.proof.ok
    assert "some_new_helper" in res.proof.note


def test_block_k_clamp_is_reported(site: Callable[[str, str], Path], tmp_path: Path) -> None:
    sp = site("sglang", "0.5.15")
    table = {"1": {**ENTRY, "BLOCK_SIZE_K": 96}, "64": ENTRY}  # 96 does not divide 128
    tuned(tmp_path / "t", "sglang", "0.5.15", table=table, arch="sm_80")
    res = inst.install("sglang", source=tmp_path / "t", site_packages=sp)
    (x,) = res.proof.files
    assert x.found and x.changed == (1,) and "changed M [1]" in x.detail


# ---------------------------------------------------------------------------------------------
# the command


def test_cli_json_and_text(site: Callable[[str, str], Path], tmp_path: Path) -> None:
    sp = site("sglang", "0.5.23")
    tuned(tmp_path / "t", "sglang", "0.5.23")
    args = ["kernels", "install", "--engine", "sglang", "--from", str(tmp_path / "t")]
    args += ["--site-packages", str(sp)]
    res = runner.invoke(app, [*args, "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["dry_run"] is True and data["copied"] == []
    assert data["target"] == str(sp / "sglang/kernels/ops/gemm/configs")
    assert data["version"] == "0.5.23" and data["version_source"].startswith("metadata in")
    assert data["proof"]["method"] == "engine-source" and data["proof"]["ok"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "copied 1 files" in res.output and "proof (engine-source): 1/1 found" in res.output
    res = runner.invoke(app, [*args, "--engine-version", "0.4.0"])
    assert isinstance(res.exception, ConfigError) and res.exception.exit_code == 2
