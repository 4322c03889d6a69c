"""`autotune engines build llama-server` and its wrapper scripts/build-llama-server, without a
real build: a cached build is reused, and the compile step is a stand-in."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.engines.llamacpp import build as b

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def fake_cache(root: Path, recipe: b.Recipe | None = None) -> Path:
    """A complete cached build (binary, share files, stamp written last)."""
    recipe = recipe or b.Recipe()
    dest = recipe.dest(root)
    exe = recipe.binary(root)
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho 'version: 1 (0c1e570)' >&2\n")
    exe.chmod(0o755)
    (dest / "share").mkdir()
    for rel in b.SHARE_FILES:
        (dest / "share" / Path(rel).name).write_text("x")
    (dest / "stamp").write_text(recipe.stamp + "\n")
    return exe


def fake_sdist(folder: Path, version: str = b.PINNED_VERSION) -> Path:
    """A tiny sdist with the layout the build reads."""
    top = folder / "src" / f"llama_cpp_python-{version}"
    src = top / "vendor" / "llama.cpp"
    for rel in (*b.SHARE_FILES, "tools/server/server.cpp", "docs/big.md"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel)
    out = folder / f"llama_cpp_python-{version}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    return out


def test_help_names_the_options() -> None:
    res = runner.invoke(
        app, ["engines", "build", "llama-server", "--help"], env={"COLUMNS": "200"}
    )
    assert res.exit_code == 0, res.output
    for flag in ("--cuda", "--sdist", "--json", "--cache-dir", "--force", "--slim-sdist"):
        assert flag in res.output


def test_a_current_cache_is_reused(tmp_path: Path) -> None:
    exe = fake_cache(tmp_path / "cache")
    args = ["engines", "build", "llama-server", "--cache-dir", str(tmp_path / "cache")]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == str(exe)
    assert "reusing cached" in res.stderr
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert data["binary"] == str(exe) and data["cached"] is True and data["cuda"] is False


def test_a_stale_stamp_or_force_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache"
    exe = fake_cache(root)
    (exe.parent.parent / "stamp").write_text("llama-cpp-python==0.3.36 other flags\n")
    assert b.cached(b.Recipe(), root) is None
    calls: list[str] = []
    monkeypatch.setattr(b, "check_tools", lambda cuda: calls.append("tools"))

    def fake_compile(src: Path, build_dir: Path, recipe: b.Recipe, jobs: int) -> Path:
        calls.append(f"compile {recipe.flavour} {jobs}")
        out = build_dir / "bin" / "llama-server"
        out.parent.mkdir(parents=True)
        out.write_text("#!/bin/sh\n")
        out.chmod(0o755)
        return out

    monkeypatch.setattr(b, "compile_server", fake_compile)
    sdist = fake_sdist(tmp_path)
    args = ["engines", "build", "llama-server", "--cache-dir", str(root), "--sdist", str(sdist)]
    res = runner.invoke(app, [*args, "--json", "-j", "3"])
    assert res.exit_code == 0, (res.output, res.stderr)
    data = json.loads(res.stdout)
    assert data["cached"] is False and data["binary"] == str(exe)
    assert calls == ["tools", "compile 0.3.36 3"]
    assert (root / "0.3.36" / "stamp").read_text() == b.Recipe().stamp + "\n"
    assert sorted(p.name for p in (root / "0.3.36" / "share").iterdir()) == sorted(
        Path(rel).name for rel in b.SHARE_FILES
    )
    assert [p.name for p in root.iterdir()] == ["0.3.36"]  # no temporary folder left
    res = runner.invoke(app, [*args, "--json"])
    assert json.loads(res.stdout)["cached"] is True and len(calls) == 2
    res = runner.invoke(app, [*args, "--json", "--force"])
    assert json.loads(res.stdout)["cached"] is False and len(calls) == 4


def test_cuda_recipe_and_bad_arguments(tmp_path: Path) -> None:
    cuda = b.Recipe(cuda=True, cuda_arch="90")
    assert cuda.flavour == "0.3.36-cuda"
    assert "-DGGML_CUDA=ON" in cuda.cmake_flags
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in cuda.stamp
    wrong = tmp_path / "llama_cpp_python-0.3.16.tar.gz"
    wrong.write_text("")
    for sdist, needle in ((tmp_path / "none.tar.gz", "no such file"), (wrong, "expected")):
        res = runner.invoke(app, ["engines", "build", "llama-server", "--sdist", str(sdist)])
        assert res.exit_code != 0
        assert needle in str(res.exception) and getattr(res.exception, "exit_code", 0) == 2


def test_slim_sdist_keeps_the_layout_and_drops_docs(tmp_path: Path) -> None:
    sdist = fake_sdist(tmp_path)
    out = tmp_path / "slim" / "llama_cpp_python-0.3.36.tar.gz"
    res = runner.invoke(
        app,
        ["engines", "build", "llama-server", "--sdist", str(sdist), "--slim-sdist", str(out)],
    )
    assert res.exit_code == 0, (res.output, res.stderr)
    assert res.stdout.strip() == str(out)
    with tarfile.open(out) as tar:
        names = tar.getnames()
    base = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
    assert all(base + rel in names for rel in b.SHARE_FILES)
    assert base + "tools/server/server.cpp" in names
    assert not any("docs" in n for n in names)


@pytest.mark.parametrize("how", ["script", "bare python"])
def test_the_wrapper_and_the_bare_module_print_the_cached_path(tmp_path: Path, how: str) -> None:
    exe = fake_cache(tmp_path / "cache")
    if how == "script":
        argv = [str(ROOT / "scripts" / "build-llama-server")]
    else:  # no environment yet (.ci/run on a fresh clone): the module alone, stdlib only
        argv = [sys.executable, "-I", str(ROOT / "autotune" / "engines" / "llamacpp" / "build.py")]
    done = subprocess.run(
        [*argv, "--cache-dir", str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == str(exe)
    assert "reusing cached" in done.stderr


def test_binary_build_runs_the_recipe_and_reads_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """autotune.engines.llamacpp.binary.build (AUTOTUNE_BUILD_LLAMA=1 in the integration tests)
    runs the same recipe; with a current cache it only reads the path."""
    from autotune.engines.llamacpp import binary

    exe = fake_cache(tmp_path / "cache")
    monkeypatch.setenv(b.CACHE_ENV, str(tmp_path / "cache"))
    assert binary.build() == exe
