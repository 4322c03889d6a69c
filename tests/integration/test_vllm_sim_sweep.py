"""`autotune sweep examples/vllm-sim.yaml`: a simulated vLLM sweep end to end (the simulator
launched through the vLLM adapter as `vllm serve` 0.34.0), then its report folder, whose
launch.sh must only use flags that exist in that release's real argument code (read from the
PyPI wheel with `ast`, as tests/engines/test_vllm_catalog.py does; skipped only when PyPI is
unreachable and the wheel is not cached)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests.engines.test_vllm_catalog import wheel
from tests.engines.wheel_flags import flags_from_wheel

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "vllm-sim.yaml"
VERSION = "0.34.0"


def launch_argv(script: str) -> list[str]:
    """The `exec ...` command of launch.sh as words (continuation lines joined)."""
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("exec "))
    command = ""
    for line in lines[start:]:
        command += line.rstrip("\\").rstrip() + " "
        if not line.endswith("\\"):
            break
    return shlex.split(command)[1:]


def test_example_spec_plans_and_fits() -> None:
    from autotune.hardware import get_gpu
    from autotune.planner.dispatch import plan_for
    from autotune.sweep.setup import build_space
    from autotune.sweep.spec import load_spec

    spec, _ = load_spec(EXAMPLE)
    assert spec.target.engine == "vllm" and spec.simulated
    assert spec.target.engine_version == VERSION
    space = build_space(spec)
    plan = plan_for(
        "vllm",
        spec.target.model,
        get_gpu(spec.target.gpu),
        space.defaults(),
        version=VERSION,
    )
    assert plan.fits, plan.reasons


def test_simulated_vllm_sweep_and_its_report(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["budget"] = {"max_trials": 5, "wall_clock_s": 240}
    spec = tmp_path / "vllm-sim.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out"
    cmd = [str(Path(sys.executable).with_name("autotune")), "sweep", str(spec), "--json"]
    cmd += ["--db", str(tmp_path / "autotune.db"), "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "finished" and 3 <= outcome["launched"] <= 5
    assert outcome["baseline"]["status"] == "complete" and outcome["best"]["value"] > 0
    # the engine the trials ran: the simulator, speaking vLLM's log format
    log = (out / "trials" / "0000" / "server.log").read_text()
    assert "autotune simulated vLLM engine" in log.splitlines()[0]
    assert "Application startup complete." in log and f"vLLM server version {VERSION}" in log

    # the report: provenance, launch.sh for the real `vllm serve` of that release
    report = (out / "report.md").read_text()
    assert f"| engine | vLLM: `vllm=={VERSION}` (simulated) |" in report
    script = (out / "launch.sh").read_text()
    assert f"# engine: vllm=={VERSION}" in script
    assert "# SIMULATED" in script and "PORT=8000" in script
    argv = launch_argv(script)
    assert argv[:3] == ["vllm", "serve", "${MODEL_PATH}"]
    assert "autotune.sim" not in script and "--sim-" not in script
    flags = [a for a in argv if a.startswith("--")]
    assert {"--host", "--port", "--max-model-len"} <= set(flags)
    real = flags_from_wheel(wheel(VERSION), "vllm")
    missing = sorted(set(flags) - real)
    assert not missing, f"vllm {VERSION} has no {missing}"
    winner = json.loads((out / "winner.json").read_text())
    assert winner["launch"]["argv"][:2] == ["vllm", "serve"]
    assert [a for a in winner["launch"]["argv"] if a.startswith("--")] == flags
