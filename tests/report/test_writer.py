"""write_report end to end on a stored sweep: every section of report.md, launch.sh and the
unit, winner.json, valid PNGs, no secret anywhere; and the degraded cases (no winner, one
concurrency level, multi-objective)."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

from autotune.report import write_report

from .conftest import API_KEY, HF_TOKEN, SPEC_YAML, Built, build_sweep

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

SECTIONS = [
    "## Launch the winner",
    "## Winner vs baseline",
    "## Top ",
    "## Throughput vs latency trade-off",
    "## Parameter importances",
    "## Failures",
    "## Capacity and headroom",
    "## Decode ceiling",
    "## Trials",
    "## Provenance",
]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def all_text(out: Path) -> str:
    return "\n".join(
        p.read_text() for p in out.iterdir() if p.suffix in (".md", ".json", ".sh", ".service")
    )


def test_full_report(sweep_db: Built, tmp_path: Path) -> None:
    out = tmp_path / "report"
    paths = write_report(sweep_db.store, sweep_db.sweep, out)
    md = (out / "report.md").read_text()

    # Sections in order, the launch command first.
    positions = [md.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    assert md.startswith("# autotune report: night-test")
    assert "**SIMULATED.**" in md.split("## Launch the winner")[0]
    launch_part = md.split("## Winner vs baseline")[0]
    assert "./launch.sh" in launch_part
    assert "-m sglang.launch_server" in launch_part
    assert f"**Trial #{sweep_db.winner_number}**" in launch_part

    # Winner vs baseline: each scenario with its spread.
    for scen in ("decode1 (decode)", "tput4 (throughput)", "tput8 (throughput)"):
        assert f"| {scen} |" in md
    assert "(n=6," in md and "±" in md
    # Top configurations show only changes: the fixed context_length never appears there.
    top = md.split("## Top ")[1].split("##")[0]
    assert "context_length" not in top and "mem_fraction_static" in top
    assert "(winner)" in top and "(baseline)" in top
    # Failures by class, counts, one example log tail each.
    fails = md.split("## Failures")[1].split("## Capacity")[0]
    assert "| `kv_cache_oom` | 2 |" in fails and "| `crash` | 1 |" in fails
    assert "### kv_cache_oom: 2 trials" in fails and "Segmentation fault" in fails
    # Capacity, headroom, ceiling, provenance.
    cap = md.split("## Capacity and headroom")[1].split("## Decode ceiling")[0]
    assert "Concurrency was bounded by **" in cap and "headroom" in cap
    assert "Host RAM" in cap
    # Each launch's pool against the prediction (the launches allocated 98% of it).
    assert "### The planner's KV pool, launch by launch" in cap
    assert "| 2.04% | - |" in cap
    # Every trial, one row each (the README promises it), its failure class where it failed.
    trials = md.split("<summary>Every trial</summary>")[1].split("</details>")[0]
    rows = [line for line in trials.splitlines() if line.startswith("| #")]
    n = len(sweep_db.store.get_trials(sweep_db.store.get_sweep(sweep_db.sweep).id or 0))
    assert len(rows) == n and sum("kv_cache_oom:" in r for r in rows) == 2
    assert sum("(winner)" in r for r in rows) == 1 and sum("(baseline)" in r for r in rows) == 1
    ceiling = md.split("## Decode ceiling")[1].split("## Trials")[0]
    assert "tok/s" in ceiling and "of the ceiling" in ceiling
    prov = md.split("## Provenance")[1]
    for key in ("sglang==0.5.17", "n/a (simulated)", "spec hash", "built-in card", "autotune"):
        assert key in prov

    # Plots exist, are PNGs, and report.md links each of them.
    assert set(paths.plots) == {
        "best_so_far",
        "throughput_vs_concurrency",
        "pareto",
        "importances",
    }
    for name, file in paths.plots.items():
        w, h = png_size(Path(file))
        assert w > 300 and h > 150
        assert f"]({name}.png)" in md

    # launch.sh, the unit, winner.json.
    assert paths.launch_sh and paths.systemd_unit
    script = Path(paths.launch_sh)
    assert script.stat().st_mode & 0o111
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    unit = Path(paths.systemd_unit)
    assert unit.name == "autotune-night-test.service"
    assert f'ExecStart="{script}"' in unit.read_text().splitlines()
    doc = json.loads((out / "winner.json").read_text())
    assert doc["simulated"] is True and doc["engine_version"] == "0.5.17"
    assert doc["winner"]["trial"] == sweep_db.winner_number
    assert doc["winner"]["config"]["mem_fraction_static"]
    assert set(doc["winner"]["measurements"]) == {"decode1", "tput4", "tput8"}
    assert doc["launch"]["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert doc["launch"]["env"]["HF_TOKEN"] == "<redacted>"
    assert "HF_TOKEN" in doc["launch"]["required_env"]

    # No secret anywhere, though the spec's env and a log tail held them.
    text = all_text(out)
    assert HF_TOKEN not in text and API_KEY not in text


def test_default_out_dir_is_reports_name(sweep_db: Built, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    paths = write_report(sweep_db.store, sweep_db.sweep, plots=False)
    assert Path(paths.out_dir) == (tmp_path / "reports" / "night-test").resolve()
    assert (tmp_path / "reports" / "night-test" / "report.md").is_file()
    assert paths.plots == {}


def test_no_completed_trial(tmp_path: Path) -> None:
    built = build_sweep(tmp_path, n_complete=0)
    # n_complete=0 still stores the baseline; fail it to leave no winner at all.
    store = built.store
    base = store.get_trials(store.get_sweep(built.sweep).id or 0)[0]
    store.update_trial(base.id or 0, status="failed", value=None, values=None)
    store.update_sweep(store.get_sweep(built.sweep).id or 0, best_trial_id=None, notes={})
    out = tmp_path / "r"
    paths = write_report(store, built.sweep, out)
    md = (out / "report.md").read_text()
    assert "No configuration completed" in md
    assert paths.launch_sh is None and not (out / "launch.sh").exists()
    assert any("no trial completed" in n for n in paths.notes)
    assert json.loads((out / "winner.json").read_text())["winner"] is None
    store.close()


def test_single_concurrency_is_said(tmp_path: Path) -> None:
    spec = SPEC_YAML.replace(
        "    - {kind: throughput, name: tput4, prompt_len: 512, output_len: 128, concurrency: 4}\n",
        "",
    ).replace(
        "    - {kind: decode, name: decode1, prompt_len: 128, output_len: 64, num_requests: 2}\n",
        "",
    )
    built = build_sweep(tmp_path, spec_yaml=spec)
    # Keep only tput8 measurements: delete the others by re-creating from the tput8 rows.
    out = tmp_path / "r"
    from autotune.report.collect import collect
    from autotune.report.plots import throughput_vs_concurrency

    data = collect(built.store, built.sweep)
    for t in data.trials:
        t.scenarios = {k: v for k, v in t.scenarios.items() if k == "tput8"}
    res = throughput_vs_concurrency(data, out / "t.png")
    assert res.path is not None and png_size(Path(res.path))[0] > 0
    assert "one concurrency only (8)" in res.note
    built.store.close()


def test_multi_objective_pareto(tmp_path: Path) -> None:
    spec = SPEC_YAML.replace(
        "objective: {metric: tput8.output_tok_s}",
        "objective: {metric: tput8.output_tok_s, multi: [{metric: tput8.output_tok_s}, "
        "{metric: tput8.ttft_p95_s}]}",
    )
    built = build_sweep(tmp_path, spec_yaml=spec)
    store = built.store
    sid = store.get_sweep(built.sweep).id or 0
    from autotune.report.collect import collect

    for row in store.get_trials(sid, "complete"):
        ms = [m for m in store.get_measurements(row.id or 0) if m.scenario == "tput8"]
        fig = ms[0].metrics["figures"]
        store.update_trial(row.id or 0, values=[fig["output_tok_s"], fig["ttft_p95_s"]])
    data = collect(store, built.sweep)
    assert data.multi_objective
    front = [p for p in data.pareto if p.on_front]
    assert front and len(front) < len(data.pareto)
    out = tmp_path / "r"
    write_report(store, built.sweep, out)
    md = (out / "report.md").read_text()
    assert "## Pareto front" in md
    assert "| trial | tput8.output_tok_s | tput8.ttft_p95_s |" in md
    assert png_size(out / "pareto.png")[0] > 0
    store.close()


def test_hostile_spec_values_end_to_end(tmp_path: Path) -> None:
    """Values from a stored spec and config reach launch.sh intact and run nothing."""
    from .test_launch import Runner, free_port

    evil_model = f"/models/$(touch {tmp_path}/pwned-model) `touch {tmp_path}/pwned-tick`"
    evil_env = f'"; touch {tmp_path}/pwned-env #'
    spec = SPEC_YAML.replace(
        "target: {engine: sglang,",
        f"target: {{model_path: '{evil_model}', engine: sglang,",
    ).replace("SGLANG_LOG_LEVEL: info", f"SGLANG_LOG_LEVEL: '{evil_env}'")
    evil_name = "x'; touch " + str(tmp_path) + "/pwned-cfg; echo '\nnext"
    built = build_sweep(
        tmp_path,
        n_complete=3,
        with_failures=False,
        spec_yaml=spec,
        extra_config={"served_model_name": evil_name},
    )
    out = tmp_path / "r"
    paths = write_report(built.store, built.sweep, out, plots=False)
    built.store.close()
    assert paths.launch_sh is not None
    script = Path(paths.launch_sh)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    (tmp_path / "run").mkdir()
    runner = Runner(tmp_path / "run")
    res = runner.run(script, {"HF_TOKEN": "t"}, port=free_port())
    assert res.returncode == 0, res.stderr
    argv = runner.argv()
    assert argv[argv.index("--model-path") + 1] == evil_model
    assert argv[argv.index("--served-model-name") + 1] == evil_name
    assert runner.env()["SGLANG_LOG_LEVEL"] == evil_env
    assert not list(tmp_path.glob("pwned*")), "an injected command ran"
    assert HF_TOKEN not in all_text(out)


def test_winner_json_carries_the_figures_the_winner_was_chosen_on(tmp_path: Path) -> None:
    # one run's value alone is the lucky launch the selection guards against
    built = build_sweep(tmp_path)
    store = built.store
    row = store.get_sweep(built.sweep)
    sel = {"winner": built.winner_number, "values": [101.0, 99.0, 100.0], "estimate": 100.0,
           "ci95": [98.0, 102.0], "runs": 3, "sigma": 0.01, "configurations_rerun": 1}  # fmt: skip
    store.update_sweep(row.id or 0, notes={**(row.notes or {}), "selection": sel})
    write_report(store, built.sweep, tmp_path / "r", plots=False)
    winner = json.loads((tmp_path / "r" / "winner.json").read_text())["winner"]
    assert winner["trial"] == built.winner_number
    assert winner["estimate"] == 100.0 and winner["ci95"] == [98.0, 102.0]
    assert winner["runs"] == [101.0, 99.0, 100.0]
    store.close()
