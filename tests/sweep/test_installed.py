"""autotune.sweep.installed: a real sweep stops before its first launch when the engine its
launcher starts follows another release than the spec (a version read from the interpreter's
metadata, the engine never imported)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from autotune.errors import ConfigError
from autotune.sweep.installed import check_installed_engine, launcher_python
from tests.installs import fake_engine_site


def _site(root: Path, package: str, version: str) -> Path:
    return fake_engine_site(root / f"site-{version}", package, package, version)


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
    # uv's header quotes a path with a space in single quotes; `env -S` takes options
    (tmp_path / "my env").mkdir()
    spaced = _script(tmp_path / "my env" / "python3", "#!/bin/sh\n")
    uv = _script(tmp_path / "uvscript", f"#!/bin/sh\n'''exec' '{spaced}' \"$0\" \"$@\"\n' '''\n")
    assert launcher_python(str(uv)) == str(spaced)
    env_s = _script(tmp_path / "envs", "#!/usr/bin/env -S python3 -u\n")
    assert launcher_python(str(env_s)) == shutil.which("python3")
    # a container or a wrapper: not checked
    assert (
        launcher_python(str(_script(tmp_path / "docker", "#!/bin/sh\nexec docker run\n"))) is None
    )
    assert launcher_python("no-such-launcher-here") is None


@pytest.mark.parametrize(
    ("installed", "spec", "error", "fix"),
    [
        ("0.33.0", "0.33.0", None, None),
        ("0.34.1.dev5+g0123abc", "0.34.0", None, None),  # a nightly of the spec's release
        ("0.35.0", "0.34.0", None, None),  # a newer line, followed as the newest on purpose
        ("0.33.0", "0.34.0", "follows 0.33.0; the spec follows 0.34.0", '"0.33.0"'),
        ("0.35.0rc1", "0.33.0", "is newer than any release autotune catalogues", '"0.34.0"'),
    ],
)
def test_the_installed_release_must_be_the_one_the_spec_follows(
    tmp_path: Path, installed: str, spec: str, error: str | None, fix: str | None
) -> None:
    env = {"PYTHONPATH": str(_site(tmp_path, "vllm", installed))}  # engine.env reaches the probe
    launcher = [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    if error is None:
        assert check_installed_engine("vllm", spec, launcher, env) == installed
        return
    with pytest.raises(ConfigError) as err:
        check_installed_engine("vllm", spec, launcher, env)
    text = str(err.value)
    assert text.startswith("target.engine_version: the engine this sweep launches is vLLM ")
    assert error in text and f"set target.engine_version: {fix}" in text


def test_a_spec_version_the_catalogue_refuses_names_the_spec_field(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(_site(tmp_path, "vllm", "0.34.0"))}
    with pytest.raises(ConfigError) as err:
        check_installed_engine("vllm", "0.36.0", [sys.executable], env)
    assert str(err.value).startswith("target.engine_version: unsupported vLLM version '0.36.0'")


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
    with pytest.raises(ConfigError, match="SGLang 0.5.17 .* follows 0.5.17; the spec follows"):
        run_sweep(spec, store=store, install_signals=False)
    assert store.list_sweeps() == []
    # Ray trials start on the cluster's nodes, simulated ones on the simulator: not checked
    from autotune.sweep.orchestrator import check_target

    text = spec.model_dump(mode="json")
    for section, value in (("execution", {"executor": "ray"}), ("simulate", {"seed": 0})):
        check_target(type(spec).model_validate({**text, section: value}))
    check_target(spec, executor_kind="ray")  # `autotune sweep --executor ray`
