"""`autotune sweep examples/llamacpp-cpu.yaml` against the real llama-server on CPU: the same
sweep that drives the simulator, with nothing engine-specific outside the adapter and the space
(the planner dispatch reads the GGUF header; `gpu: cpu` is the no-GPU target), then its report.

Skipped unless llama-server is built (scripts/build-llama-server) or AUTOTUNE_BUILD_LLAMA=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.llamacpp_env import llama_server, model

pytestmark = pytest.mark.llamacpp

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llamacpp-cpu.yaml"


def test_example_spec_is_valid() -> None:
    from autotune.space import builtin_space
    from autotune.sweep.setup import build_space
    from autotune.sweep.spec import load_spec

    spec, _ = load_spec(EXAMPLE)
    assert spec.target.engine == "llamacpp" and spec.budget.max_trials == 4
    space = build_space(spec)
    assert space.engine == "llamacpp" and builtin_space("llamacpp").engine == "llamacpp"
    # every configuration of the narrowed space turns into llama-server flags
    from autotune.engines.llamacpp import build_flags

    for config in space.grid(max_points=5000):
        build_flags(config, spec.target.engine_version)


def test_short_sweep_against_llama_server(tmp_path: Path) -> None:
    binary = llama_server()
    gguf = model("tiny", tmp_path / "models")
    data = yaml.safe_load(EXAMPLE.read_text())
    data["target"]["model"] = str(gguf)
    spec = tmp_path / "llamacpp-cpu.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**os.environ, "AUTOTUNE_LLAMA_SERVER": str(binary)}
    out = tmp_path / "out"
    cmd = [str(Path(sys.executable).with_name("autotune")), "sweep", str(spec), "--json"]
    cmd += ["--db", str(tmp_path / "autotune.db"), "--out", str(out)]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "finished"
    assert 3 <= outcome["launched"] <= 5
    assert outcome["baseline"] is not None and outcome["baseline"]["status"] == "complete"
    assert outcome["best"]["value"] > 0
    trials = sorted((out / "trials").iterdir())
    log = (trials[0] / "server.log").read_text()
    assert "llama_server: model loaded" in log

    # the report of a CPU run of llama.cpp: provenance, launch.sh with llama-server's own port
    report = (out / "report.md").read_text()
    assert "| engine | llama.cpp: `llamacpp==0.3.36` |" in report
    assert "| GPU | CPU (no GPU) (`cpu`) |" in report
    assert "Host RAM (CPU run, no GPU)" in report
    launch = (out / "launch.sh").read_text()
    assert "# engine: llamacpp==0.3.36" in launch
    assert "PORT=8080" in launch and f"exec {binary}" in launch
    assert f"MODEL_PATH={gguf}" in launch
    winner = json.loads((out / "winner.json").read_text())
    assert winner["launch"]["argv"][0] == str(binary)
