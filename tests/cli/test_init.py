"""`autotune init`: a starter spec that loads, runs simulated from an empty folder, reads the
engine's version from another interpreter, and names the valid choices when a name is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import HardwareError, UnknownNameError
from autotune.sweep.spec import load_spec
from tests.installs import fake_engine_site

DONE_WHEN = [
    "init",
    "--gpu",
    "rtx-4080-super-32g",
    "--model",
    "qwen3.8-27b-awq-int4",
    "--engine",
    "sglang",
    "--engine-version",
    "0.5.17",
    "--simulate",
]


def _init(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_done_when_init_then_a_simulated_sweep_from_an_empty_folder(tmp_path: Path) -> None:
    """The issue's done-when: the written spec validates and `autotune sweep` runs it from an
    empty folder (a short budget: init's --max-trials)."""
    work = tmp_path / "empty"
    work.mkdir()
    env = {**os.environ, "AUTOTUNE_DB": str(work / "autotune.db")}
    run = [sys.executable, "-m", "autotune"]
    made = subprocess.run(
        [*run, *DONE_WHEN, "--out", "X.yaml", "--max-trials", "3", "--json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    info = json.loads(made.stdout)
    assert info["known_good"][0]["id"] == "K1" and info["simulated"] is True
    spec, text = load_spec(work / "X.yaml")
    assert spec.simulated and spec.space.file == "builtin" and spec.search.known_good
    assert spec.target.gpu == "rtx-4080-super-32g" and spec.target.engine_version == "0.5.17"
    assert spec.budget.max_trials == 3
    assert text.count("\n#") >= 10  # commented
    swept = subprocess.run(
        [*run, "sweep", "X.yaml", "--json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert swept.returncode == 0, swept.stderr[-3000:]
    outcome = json.loads(swept.stdout)
    report = Path(outcome["report"])
    assert report.is_file() and report.parent.parent == work / "reports"
    assert (report.parent / "launch.sh").is_file() and (report.parent / "winner.json").is_file()


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    out = tmp_path / "s.yaml"
    out.write_text("mine\n")
    res = _init(*DONE_WHEN, "--out", str(out))
    assert res.exit_code != 0 and "--force" in str(res.exception)
    assert out.read_text() == "mine\n"
    res = _init(*DONE_WHEN, "--out", str(out), "--force")
    assert res.exit_code == 0, res.output
    load_spec(out)


def test_a_missing_folder_is_refused_not_made(tmp_path: Path) -> None:
    """A mistyped --out folder is an error naming it; nothing is created."""
    out = tmp_path / "specz" / "s.yaml"
    res = _init(*DONE_WHEN, "--out", str(out))
    assert res.exit_code != 0, res.output
    assert "--out" in str(res.exception) and str(out.parent) in str(res.exception)
    assert not out.parent.exists()
    (tmp_path / "file").write_text("")
    res = _init(*DONE_WHEN, "--out", str(tmp_path / "file" / "s.yaml"))
    assert res.exit_code != 0 and "is not a folder" in str(res.exception)


def _fake_engine_site(root: Path, package: str, dist: str, version: str) -> Path:
    return fake_engine_site(root / "site", package, dist, version)


def test_engine_python_reads_the_installed_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _fake_engine_site(tmp_path, "sglang", "sglang", "0.5.23")
    monkeypatch.setenv("PYTHONPATH", str(site))  # the interpreter's environment holds it
    out = tmp_path / "s.yaml"
    args = ["init", "--gpu", "h200-141g", "--model", "qwen3.8-27b-fp8"]
    res = _init(*args, "--engine-python", sys.executable, "--out", str(out), "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["engine_version"] == "0.5.23" and sys.executable in info["version_source"]
    spec, _ = load_spec(out)
    assert spec.target.engine_version == "0.5.23"
    assert spec.engine.launcher == [sys.executable, "-m", "sglang.launch_server"]
    # --engine-version wins, and the difference is said
    res = _init(*args, "--engine-python", sys.executable, "--engine-version", "0.5.17",
                "--out", str(out), "--force", "--json")  # fmt: skip
    info = json.loads(res.stdout)
    assert info["engine_version"] == "0.5.17" and "0.5.23" in info["notes"][0]


def test_engine_python_with_a_nightly_follows_its_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vLLM nightly (setuptools_scm's version of a wheel built after 0.34.0) is written to
    the spec as installed, planned with 0.34.0's rules, and the starter says so; a build of a
    line newer than the catalogue is refused, naming the release to give instead."""
    site = _fake_engine_site(tmp_path, "vllm", "vllm", "0.34.1.dev5+g0123abc")
    monkeypatch.setenv("PYTHONPATH", str(site))
    out = tmp_path / "s.yaml"
    args = ["init", "--engine", "vllm", "--gpu", "h200-141g", "--model", "qwen3.8-27b-fp8"]
    res = _init(*args, "--engine-python", sys.executable, "--out", str(out), "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["engine_version"] == "0.34.1.dev5+g0123abc"
    assert any("development build" in n and "0.34.0" in n for n in info["notes"])
    spec, _ = load_spec(out)
    assert spec.target.engine_version == "0.34.1.dev5+g0123abc"

    newer = _fake_engine_site(tmp_path / "newer", "vllm", "vllm", "0.35.0rc1.dev2+g0123abc")
    monkeypatch.setenv("PYTHONPATH", str(newer))
    res = _init(*args, "--engine-python", sys.executable, "--out", str(out), "--force")
    assert res.exit_code != 0
    assert "use 0.34.0 to follow the newest" in str(res.exception)


def test_engine_python_without_the_engine_says_so(tmp_path: Path) -> None:
    res = _init("init", "--gpu", "h100-80g", "--model", "qwen3.8-27b-fp8", "--engine", "vllm",
                "--engine-python", sys.executable, "--out", str(tmp_path / "s.yaml"))  # fmt: skip
    assert res.exit_code != 0
    assert "--engine-python" in str(res.exception) and "--engine-version" in str(res.exception)


@pytest.mark.parametrize(
    ("flag", "bad", "valid"),
    [
        ("--gpu", "rtx-9090", "rtx-4080-super-32g"),
        ("--model", "qwen9", "qwen3.8-27b-awq-int4"),
        ("--engine", "tgi", "sglang"),
    ],
)
def test_unknown_names_list_the_valid_choices(
    tmp_path: Path, flag: str, bad: str, valid: str
) -> None:
    args = {"--gpu": "h100-80g", "--model": "qwen3.8-27b-fp8", "--engine": "sglang"}
    args[flag] = bad
    flat = [x for kv in args.items() for x in kv]
    res = _init("init", *flat, "--out", str(tmp_path / "s.yaml"))
    err = res.exception
    assert isinstance(err, UnknownNameError) and err.exit_code == 2
    assert valid in str(err) and "valid:" in str(err)
    assert not (tmp_path / "s.yaml").exists()


def test_gpu_auto_without_a_driver_is_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import autotune.hardware.detect as detect

    def no_driver() -> list[Any]:
        raise HardwareError("--gpu auto: no NVIDIA driver found")

    monkeypatch.setattr(detect, "detect_gpus", no_driver)
    res = _init("init", "--model", "qwen3.8-27b-fp8", "--out", str(tmp_path / "s.yaml"))
    assert isinstance(res.exception, HardwareError) and res.exception.exit_code == 3


def test_gpu_auto_writes_the_detected_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import autotune.hardware.detect as detect
    from autotune.hardware import get_gpu

    gpu = detect.DetectedGPU(0, "NVIDIA H200", 143771, 140000, "580.1", get_gpu("h200-141g"))
    monkeypatch.setattr(detect, "detect_gpus", lambda: [gpu, gpu])
    out = tmp_path / "s.yaml"
    res = _init("init", "--model", "qwen3.8-27b-fp8", "--out", str(out))
    assert res.exit_code == 0, res.output
    spec, text = load_spec(out)
    assert spec.target.gpu == "h200-141g" and "2 x NVIDIA H200" in text


def test_llamacpp_gguf_and_a_local_folder(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "l.yaml"
    res = _init("init", "--engine", "llamacpp", "--gpu", "cpu", "--model", str(gguf),
                "--out", str(out))  # fmt: skip
    assert res.exit_code == 0, res.output
    spec, _ = load_spec(out)
    assert spec.target.engine == "llamacpp" and spec.target.model == str(gguf.resolve())
    assert spec.target.cpu
    res = _init("init", "--gpu", "h100-80g", "--model", str(tmp_path / "nope"),
                "--out", str(tmp_path / "n.yaml"))  # fmt: skip
    assert res.exit_code != 0 and "no such model folder" in str(res.exception)


def test_hub_id_is_written_as_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    out = tmp_path / "h.yaml"
    res = _init("init", "--gpu", "h100-80g", "--model", "Org/Some-Model-8B", "--engine", "vllm",
                "--out", str(out))  # fmt: skip
    assert res.exit_code == 0, res.output
    spec, text = load_spec(out)
    assert spec.target.model == "Org/Some-Model-8B" and "hf download" in text


def test_a_hub_id_autotune_has_a_config_card_for_runs_simulated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`plan` plans Qwen/Qwen3-8B from autotune's copy of its config.json without a download;
    `init --simulate` does too, and the real spec still says to download the checkpoint."""
    from autotune.models.config_cards import config_card

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert config_card("Qwen/Qwen3-8B") is not None
    sim = tmp_path / "sim.yaml"
    res = _init("init", "--gpu", "h200-141g", "--model", "Qwen/Qwen3-8B", "--simulate",
                "--out", str(sim))  # fmt: skip
    assert res.exit_code == 0, res.output
    spec, text = load_spec(sim)
    assert spec.simulated and spec.target.model == "Qwen/Qwen3-8B"
    assert "hf download" not in text and "autotune's copy of its config.json" in text
    real = tmp_path / "real.yaml"
    res = _init("init", "--gpu", "h200-141g", "--model", "Qwen/Qwen3-8B", "--out", str(real))
    assert res.exit_code == 0, res.output
    assert "hf download Qwen/Qwen3-8B" in real.read_text()
    res = _init("init", "--gpu", "h200-141g", "--model", "Org/Unknown-8B", "--simulate",
                "--out", str(tmp_path / "x.yaml"))  # fmt: skip
    assert res.exception is not None and getattr(res.exception, "exit_code", None) == 2
    assert "config card" in str(res.exception)
