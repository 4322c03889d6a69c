"""autotune.sweep.installed: a real sweep stops before its first launch when the engine its
launcher starts follows another release than the spec (a version read from the interpreter's
metadata, the engine never imported)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.sweep.installed import check_installed_engine, launcher_python


def _site(root: Path, package: str, version: str) -> Path:
    site = root / f"site-{version}"
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text("raise ImportError('never imported')\n")
    info = site / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    return site


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_launcher_python_reads_interpreters_and_console_scripts(tmp_path: Path) -> None:
    py = _script(tmp_path / "python3.12", "#!/bin/sh\n")
    assert launcher_python(str(py)) == str(py)
    serve = _script(tmp_path / "vllm", f"#!{py}\nimport sys\n")
    assert launcher_python(str(serve)) == str(py)
    # pip's header where the interpreter path is too long for a #! line
    long = _script(tmp_path / "sglang", f"#!/bin/sh\n'''exec' \"{py}\" \"$0\" \"$@\"\n' '''\n")
    assert launcher_python(str(long)) == str(py)
    # a container or a wrapper: not checked
    assert (
        launcher_python(str(_script(tmp_path / "docker", "#!/bin/sh\nexec docker run\n"))) is None
    )
    assert launcher_python("no-such-launcher-here") is None


@pytest.mark.parametrize(
    ("installed", "spec", "error"),
    [
        ("0.33.0", "0.33.0", None),
        ("0.34.1.dev5+g0123abc", "0.34.0", None),  # a nightly of the release the spec follows
        ("0.33.0", "0.34.0", "follows 0.33.0; the spec follows 0.34.0"),
        ("0.35.0", "0.34.0", "is not a release autotune catalogues"),
    ],
)
def test_the_installed_release_must_be_the_one_the_spec_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: str, spec: str, error: str | None
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(_site(tmp_path, "vllm", installed)))
    launcher = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    if error is None:
        assert check_installed_engine("vllm", spec, launcher) == installed
        return
    with pytest.raises(ConfigError) as err:
        check_installed_engine("vllm", spec, launcher)
    text = str(err.value)
    assert text.startswith("target.engine_version: ") and error in text
    assert f'set target.engine_version: "{installed}"' in text
    assert f"--engine-python {sys.executable}" in text


def test_nothing_to_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No engine for the interpreter (the first launch says so), a launcher that is no Python,
    llama.cpp: nothing is refused."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert check_installed_engine("sglang", "0.5.23", [sys.executable, "-m", "x"]) is None
    assert check_installed_engine("sglang", "0.5.23", ["docker", "run"]) is None
    assert check_installed_engine("llamacpp", "0.3.36", None) is None


def test_a_sweep_with_another_installed_release_stops_before_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.store import Store
    from autotune.sweep.orchestrator import run_sweep
    from autotune.sweep.spec import spec_from_yaml

    monkeypatch.setenv("PYTHONPATH", str(_site(tmp_path, "sglang", "0.5.17")))
    spec = spec_from_yaml(
        f"""
name: installed-check
target: {{engine: sglang, engine_version: "0.5.23", model: qwen3.8-27b-fp8, gpu: h200-141g}}
engine: {{launcher: ["{sys.executable}", "-m", "sglang.launch_server"]}}
workload:
  scenarios: [{{kind: decode, name: d, prompt_len: 64, output_len: 8, num_requests: 1}}]
objective: {{metric: d.output_tok_s}}
""",
        source="spec.yaml",
    )
    store = Store(path=tmp_path / "autotune.db")
    with pytest.raises(ConfigError, match="sglang 0.5.17 .* follows 0.5.17; the spec follows"):
        run_sweep(spec, store=store, install_signals=False)
    assert store.list_sweeps() == []
