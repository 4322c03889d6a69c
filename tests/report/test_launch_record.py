"""launch.sh starts what the winning trial ran (its row's `launch.command`, sweep/trial_record.py),
not what the spec says at report time: the trial's launcher (a venv's interpreter), release and
model path, the variables it was given, the engine variables it inherited from the sweep's
shell and its GPUs as overridable defaults; an inherited secret is named, never required. A
script that would differ from the trial's argv says so. Values the sweep stored as they are
(tbo_token_distribution_threshold, TOKENIZERS_PARALLELISM) are written as they ran, not taken for
secrets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.report import write_report
from autotune.report.launch import build_launch, launch_differs
from tests.report.conftest import HF_TOKEN, MODEL, VERSION, Built, build_sweep
from tests.report.test_launch import FAKE_PYTHON, Runner, free_port


def _with_command(built: Built, command: dict[str, Any]) -> None:
    """The winner's row as a real sweep writes it: its launch record holds the command."""
    tid = built.trial_ids[built.winner_number]
    row = next(t for t in built.store.get_trials(1) if t.id == tid)
    built.store.update_trial(tid, launch={**(row.launch or {}), "command": command})


def _venv_python(tmp_path: Path) -> Path:
    py = tmp_path / "venv" / "bin" / "python3.12"
    py.parent.mkdir(parents=True)
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    return py


def test_launch_sh_starts_what_the_winning_trial_ran(tmp_path: Path) -> None:
    built = build_sweep(tmp_path, n_complete=3, with_failures=False)
    py = _venv_python(tmp_path)
    model = tmp_path / "models" / "qwen"
    command = {
        "engine_version": VERSION,
        "launcher": [str(py), "-m", "sglang.launch_server"],
        "model": str(model),
        "env": {"HF_TOKEN": "${env:HF_TOKEN}", "SGLANG_LOG_LEVEL": "info"},
        "gpus": "2,3",
        "gpu_order": "PCI_BUS_ID",
        "inherited": {
            "SGLANG_ENABLE_JIT_DEEPGEMM": "0",
            "TOKENIZERS_PARALLELISM": "false",
            "HUGGING_FACE_HUB_TOKEN": None,
        },
    }
    _with_command(built, command)
    out = tmp_path / "r"
    paths = write_report(built.store, built.sweep, out, plots=False)
    built.store.close()
    assert paths.launch_sh is not None
    script = Path(paths.launch_sh)
    text = script.read_text()
    assert "HUGGING_FACE_HUB_TOKEN (secret, not written here)" in text
    assert ': "${HUGGING_FACE_HUB_TOKEN:?' not in text  # named, not required

    (tmp_path / "run").mkdir()
    runner = Runner(tmp_path / "run")
    runner.out = tmp_path / "run" / "fake"  # the venv's interpreter records here
    res = runner.run(script, {"HF_TOKEN": "t", "FAKE_PY_OUT": str(runner.out)}, port=free_port())
    assert res.returncode == 0, res.stderr
    argv, env = runner.argv(), runner.env()
    assert argv[:2] == ["-m", "sglang.launch_server"]  # run by the venv's python3.12
    assert argv[argv.index("--model-path") + 1] == str(model)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0" and env["TOKENIZERS_PARALLELISM"] == "false"
    assert "HUGGING_FACE_HUB_TOKEN" not in env

    # the environment still wins over every carried default
    mine = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    res = runner.run(
        script, {"HF_TOKEN": "t", "FAKE_PY_OUT": str(runner.out), **mine}, port=free_port()
    )
    assert res.returncode == 0
    assert {k: runner.env()[k] for k in mine} == mine
    assert HF_TOKEN not in (out / "launch.sh").read_text()


def test_a_script_that_parts_from_the_trial_says_where() -> None:
    spec = build_launch(
        {"chunked_prefill_size": 4096},
        engine="sglang",
        engine_version=VERSION,
        sweep="s",
        model_path=MODEL,
    )
    same = spec.argv(model_path="/m", port=31001)
    assert launch_differs(spec, same) == ""
    spelled = [("--cuda-graph-max-bs" if a == "--chunked-prefill-size" else a) for a in same]
    note = launch_differs(spec, spelled)
    assert "differs from the one the winning trial ran" in note and "--cuda-graph-max-bs" in note
    assert "words" in launch_differs(spec, [*same, "--extra"])


def test_counts_named_like_secrets_are_written_as_they_ran(tmp_path: Path) -> None:
    built = build_sweep(
        tmp_path,
        n_complete=2,
        with_failures=False,
        extra_config={"tbo_token_distribution_threshold": 0.48},
        spec_yaml=_spec_with_env("TOKENIZERS_PARALLELISM"),
    )
    out = tmp_path / "r"
    paths = write_report(built.store, built.sweep, out, plots=False)
    built.store.close()
    assert paths.launch_sh is not None
    text = Path(paths.launch_sh).read_text()
    assert "--tbo-token-distribution-threshold 0.48" in text.replace(" \\\n  ", " ")
    assert "export TOKENIZERS_PARALLELISM=false" in text
    assert "TBO_TOKEN_DISTRIBUTION_THRESHOLD" not in text
    winner = json.loads(Path(paths.winner_json).read_text())
    assert winner["winner"]["config"]["tbo_token_distribution_threshold"] == 0.48
    assert ': "${HF_TOKEN:?' in text and HF_TOKEN not in text  # a real secret still is one


def _spec_with_env(name: str) -> str:
    from tests.report.conftest import SPEC_YAML

    return SPEC_YAML.replace("SGLANG_LOG_LEVEL: info", f"SGLANG_LOG_LEVEL: info, {name}: 'false'")


def test_a_real_sweep_without_records_says_so(tmp_path: Path) -> None:
    built = build_sweep(tmp_path, n_complete=2, with_failures=False)
    row = built.store.get_sweep(built.sweep)
    built.store.update_sweep(row.id or 0, notes={**(row.notes or {}), "simulated": False})
    paths = write_report(built.store, built.sweep, tmp_path / "r", plots=False)
    built.store.close()
    assert paths.launch_sh is not None
    assert "own command was not recorded" in Path(paths.launch_sh).read_text()
