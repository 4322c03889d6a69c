"""What a real trial keeps of the command it started (sweep/trial_record.py), through run_trial
with the fake engine: the launcher, the release, the model path made absolute, the argv with
the API key scrubbed, the spec's variables as the stored spec holds them (secrets as
references), the trial's GPUs, and the engine variables of the shell that ran the sweep, an
inherited secret by name only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from autotune.engines.llamacpp.adapter import LlamaCppAdapter
from autotune.engines.llamacpp.binary import PINNED_VERSION
from autotune.store.models import TrialStatus
from autotune.sweep.trial import TrialSpec, run_trial
from autotune.sweep.trial_record import command_record, engine_relevant
from tests.sweep.conftest import fake_launcher

SECRET = "hf_inheritedSECRET0123"
KEY = "sk-fixedKEY456789"


def _trial(tmp_path: Path, **kw: Any) -> TrialSpec:
    base: dict[str, Any] = dict(
        sweep="t",
        number=3,
        config={"chunked_prefill_size": 8192, "api_key": "${env:API_KEY}"},
        engine="sglang",
        engine_version="0.5.17",
        model="fake-model",  # relative: the engine resolves it in the sweep's folder
        gpu="rtx-4080-super-32g",
        scenarios=[{"kind": "decode", "prompt_len": 16, "output_len": 4, "num_requests": 1}],
        startup_timeout_s=10,
        stop_grace_s=2,
        log_dir=str(tmp_path / "logs"),
        launcher=fake_launcher(),
        env={"SGLANG_LOG_LEVEL": "info", "HF_TOKEN": "${env:HF_TOKEN}"},
        secrets={"API_KEY": KEY, "HF_TOKEN": "hf_specSECRET789"},
    )
    base.update(kw)
    return TrialSpec(**base)


def test_a_real_trial_keeps_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fake-model").mkdir()
    monkeypatch.setenv("SGLANG_ENABLE_JIT_DEEPGEMM", "0")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", SECRET)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")  # the shell's: never the trial's
    monkeypatch.setenv("UNRELATED_SETTING", "x")
    res = run_trial(_trial(tmp_path), gpu_indices=[2, 3])
    assert res.status == TrialStatus.COMPLETE, (res.failure, res.log_tail)
    cmd = res.command
    assert cmd is not None
    assert cmd["launcher"] == fake_launcher() and cmd["engine_version"] == "0.5.17"
    assert cmd["model"] == str(tmp_path / "fake-model")
    assert cmd["argv"][: len(fake_launcher())] == fake_launcher()
    assert cmd["argv"][cmd["argv"].index("--api-key") + 1] == "<redacted>"
    assert cmd["env"]["HF_TOKEN"] == "${env:HF_TOKEN}" and cmd["env"]["SGLANG_LOG_LEVEL"] == "info"
    assert cmd["gpus"] == "2,3" and "CUDA_VISIBLE_DEVICES" not in cmd["env"]
    inherited = cmd["inherited"]
    assert inherited["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0"
    assert inherited["TOKENIZERS_PARALLELISM"] == "false"
    assert inherited["HUGGING_FACE_HUB_TOKEN"] is None  # by name only
    assert "UNRELATED_SETTING" not in inherited and "CUDA_VISIBLE_DEVICES" not in inherited
    text = json.dumps(cmd)
    assert SECRET not in text and KEY not in text and "hf_specSECRET789" not in text


def test_the_spec_pins_the_gpus_and_llama_server_is_the_binary_found() -> None:
    spec = _trial(
        Path("/tmp"),
        engine="llamacpp",
        engine_version=PINNED_VERSION,
        config={},
        env={"CUDA_VISIBLE_DEVICES": "1"},
        launcher=None,
    )
    adapter = LlamaCppAdapter(binary="/opt/llama/bin/llama-server")
    argv = adapter.build_command({}, model=spec.model, version=spec.engine_version).argv
    rec = command_record(spec, argv, {"CUDA_VISIBLE_DEVICES": "1"}, environ={})
    assert rec["launcher"] == ["/opt/llama/bin/llama-server"]
    assert rec["gpus"] is None and rec["env"] == {"CUDA_VISIBLE_DEVICES": "1"}
    assert rec["model"] == "fake-model"  # no such folder here: a hub id, as written


@pytest.mark.parametrize(
    ("name", "carried"),
    [
        ("VLLM_ATTENTION_BACKEND", True),
        ("AUTOTUNE_KERNEL_CONFIG_DIR", True),
        ("NCCL_P2P_DISABLE", True),
        ("HIP_VISIBLE_DEVICES", False),
        ("AUTOTUNE_DB", False),
        ("PATH", False),
    ],
)
def test_which_inherited_variables_count(name: str, carried: bool) -> None:
    assert engine_relevant(name) is carried


def test_secrets_of_every_kind_stay_out_of_the_record(tmp_path: Path) -> None:
    """Inherited credentials (a secret word anywhere in the name, a password in a URL) are
    kept by name only; a spec variable the sweep stored as it is but whose name says secret
    is kept as REDACTED (launch.sh then requires it)."""
    spec = _trial(tmp_path, env={"HF_TOKEN_RO": "hf_readonly_SECRET_987"})
    environ = {
        "HF_ENDPOINT": "https://alice:Pa55w0rd@mirror.example/",
        "VLLM_S3_ACCESS_KEY_ID": "AKIAINHERITED99",
        "SGLANG_API_KEY_2": "sk-inherited-second-key",
        "CUDA_VERSION": "13.0.1",  # a container's metadata: not the configuration
        "NVIDIA_REQUIRE_CUDA": "cuda>=13.0",
        "VLLM_FLASH_ATTN_VERSION": "2",  # a real switch, whatever its name ends with
        "VLLM_API_KEY": "20261204",  # digits, but under a key's name
    }
    env = {"HF_TOKEN_RO": "hf_readonly_SECRET_987"}
    rec = command_record(spec, [], env, environ=environ)
    assert rec["env"] == {"HF_TOKEN_RO": "<redacted>"}
    assert rec["inherited"] == {
        "HF_ENDPOINT": None,
        "SGLANG_API_KEY_2": None,
        "VLLM_API_KEY": None,
        "VLLM_FLASH_ATTN_VERSION": "2",
        "VLLM_S3_ACCESS_KEY_ID": None,
    }
    text = json.dumps(rec)
    for secret in (
        "Pa55w0rd",
        "AKIAINHERITED99",
        "sk-inherited",
        "hf_readonly_SECRET",
        "20261204",
    ):
        assert secret not in text


def test_the_default_launcher_is_the_program_the_engine_found(tmp_path: Path) -> None:
    """No engine.launcher: the adapter's `vllm serve` is recorded with `vllm` resolved on the
    engine's search path (launch.sh must not find another install first)."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "vllm").write_text("#!/bin/sh\n")
    (venv / "vllm").chmod(0o755)
    spec = _trial(tmp_path, engine="vllm", engine_version="0.34.0", launcher=None, config={})
    rec = command_record(spec, ["vllm", "serve", "m"], {"PATH": str(venv)}, environ={})
    assert rec["launcher"] == [str(venv / "vllm"), "serve"] and rec["tp"] == 1


def test_the_pool_counts_nvml_and_the_shell_narrows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from autotune.sweep.executors import visible_gpu_ids

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpu_ids(4) == [0, 1, 2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpu_ids(4) == [2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,9")  # 9: NVML does not see it
    assert visible_gpu_ids(4) == [3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-6f1d0c2e")  # a UUID: not an index
    assert visible_gpu_ids(2) == [0, 1]


def test_pool_gpus_are_counted_in_nvml_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    (tmp_path / "fake-model").mkdir()
    monkeypatch.chdir(tmp_path)
    res = run_trial(_trial(tmp_path), gpu_indices=[1])
    assert res.status == TrialStatus.COMPLETE, (res.failure, res.log_tail)
    assert res.command is not None and res.command["gpus"] == "1"
    assert (
        res.command["gpu_order"] == "PCI_BUS_ID" and "CUDA_DEVICE_ORDER" not in res.command["env"]
    )


def test_a_relative_launcher_is_recorded_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = _trial(tmp_path, launcher=[".venv/bin/python", "-m", "sglang.launch_server"])
    argv = [*spec.launcher, "--model-path", "m"]  # type: ignore[misc]
    rec = command_record(spec, argv, {}, environ={})
    assert rec["launcher"][0] == str(tmp_path / ".venv/bin/python")
