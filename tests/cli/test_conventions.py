"""CLI conventions (issue 18 part 5): shell completion, the choices of every enumerated option in
--help (a bad value exits 2 naming the flag and the valid ones), and `--progress` (rich / json /
none; JSON-lines events on stderr whose last one is the final state)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.sweep.analytic import AnalyticExecutor
from autotune.sweep.orchestrator import run_sweep
from autotune.sweep.progress import SweepProgress, resolve_progress
from autotune.sweep.spec import parse_spec
from tests.sweep.conftest import make_spec, write_spec

runner = CliRunner()
WIDE = {"COLUMNS": "220", "TERMINAL_WIDTH": "220"}


@pytest.mark.parametrize(
    ("shell", "needle"),
    [
        ("bash", "complete -o default -F _autotune_completion autotune"),
        ("zsh", "#compdef autotune"),
        ("fish", "complete --command autotune"),
    ],
)
def test_completion_script_is_printed(shell: str, needle: str) -> None:
    res = runner.invoke(app, ["completion", shell])
    assert res.exit_code == 0, res.output
    assert needle in res.output and "_AUTOTUNE_COMPLETE" in res.output


def test_show_completion_prints_the_script_of_the_detected_shell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    res = runner.invoke(app, ["--show-completion", "bash"], prog_name="autotune")
    assert res.exit_code == 0, res.output
    assert "_AUTOTUNE_COMPLETE=complete_bash" in res.output


def test_root_help_offers_completion() -> None:
    out = runner.invoke(app, ["--help"], env=WIDE).output
    assert "--install-completion" in out and "--show-completion" in out


@pytest.mark.parametrize(
    ("command", "choices"),
    [
        (["plan"], ["<sglang|vllm|llamacpp>"]),
        (["sweep"], ["<inprocess|ray>", "<auto|rich|json|none>"]),
        (
            ["kernels", "tune"],
            [
                "<fp8|int4>",
                "<budgeted|exhaustive>",
                "<local|ray>",
                "<awq|gptq>",
                "<sglang|vllm>",
                "<auto|rich|json|none>",
            ],
        ),
        (["kernels", "shapes"], ["<fp8|int4>"]),
        (["kernels", "install"], ["<sglang|vllm>"]),
        (["serve"], ["<critical|error|warning|info|debug|trace>"]),
    ],
)
def test_help_lists_the_choices(command: list[str], choices: list[str]) -> None:
    res = runner.invoke(app, [*command, "--help"], env=WIDE)
    assert res.exit_code == 0, res.output
    for choice in choices:
        assert choice in res.output, (choice, res.output)


@pytest.mark.parametrize(
    ("args", "flag", "valid"),
    [
        (["plan", "--model", "x", "--gpu", "y", "--engine", "bogus"], "--engine", "'llamacpp'"),
        (["sweep", "s.yaml", "--executor", "threads"], "--executor", "'inprocess', 'ray'"),
        (["sweep", "s.yaml", "--progress", "bar"], "--progress", "'auto', 'rich', 'json'"),
        (["kernels", "tune", "--nk", "1,2", "--packing", "x"], "--packing", "'awq', 'gptq'"),
        (["kernels", "tune", "--nk", "1,2", "--strategy", "x"], "--strategy", "'exhaustive'"),
        (["kernels", "shapes", "--model", "m", "--kind", "fp4"], "--kind", "'fp8', 'int4'"),
    ],
)
def test_a_bad_choice_exits_2_naming_the_flag_and_the_choices(
    args: list[str], flag: str, valid: str
) -> None:
    res = runner.invoke(app, args, env=WIDE)
    assert res.exit_code == 2, res.output
    assert f"'{flag}'" in res.output and valid in res.output, res.output


def test_progress_auto_is_rich_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert resolve_progress(None) == resolve_progress("auto") == "none"
    monkeypatch.setattr(sys, "stderr", Tty())
    assert resolve_progress("auto") == "rich"
    assert resolve_progress("json") == "json" and resolve_progress("none") == "none"


def _events(err: str) -> list[dict[str, Any]]:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return [json.loads(ln) for ln in lines]


def _check_schema(events: list[dict[str, Any]]) -> None:
    for e in events:
        assert {"event", "time", "elapsed_s"} <= e.keys(), e
        if e["event"] != "note":
            assert {"done", "running", "launched", "failed", "total", "best", "eta_s"} <= e.keys()
            assert e["launched"] == e["done"] + e["running"]


def test_progress_json_events_end_with_the_final_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune.store.db import Store

    spec = parse_spec(make_spec(**{"budget.max_trials": 4}))
    outcome = run_sweep(
        spec,
        store=Store(path=tmp_path / "a.db"),
        out_dir=tmp_path / "out",
        executor=AnalyticExecutor(2),
        install_signals=False,
        progress="json",
    )
    captured = capsys.readouterr()
    assert captured.out == ""
    events = _events(captured.err)
    _check_schema(events)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("end") == 1
    assert kinds.count("trial") == outcome.launched == 4
    end = events[-1]
    assert end["sweep"] == "t" and end["metric"] == "tp.output_tok_s"
    assert end["status"] == outcome.status == "finished" and end["stop_reason"]
    assert (end["done"], end["running"], end["total"], end["eta_s"]) == (4, 0, 4, 0.0)
    assert end["best"] == outcome.best["value"]  # type: ignore[index]
    assert end["failed"] == outcome.counts.get("failed", 0)
    trials = [e for e in events if e["event"] == "trial"]
    assert all({"number", "status", "text"} <= t.keys() for t in trials)
    assert [t["done"] for t in trials] == [1, 2, 3, 4]  # counters updated before the event


def test_rich_progress_last_line_is_the_final_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune.store.db import Store

    spec = parse_spec(make_spec(**{"budget.max_trials": 3}))
    run_sweep(
        spec,
        store=Store(path=tmp_path / "a.db"),
        out_dir=tmp_path / "out",
        executor=AnalyticExecutor(1),
        install_signals=False,
        progress="rich",
    )
    bars = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("sweep t")]
    assert bars, "no progress bar line"
    assert "3/3" in bars[-1] and "running 0" in bars[-1] and "ETA 0:00" in bars[-1], bars[-1]


def test_finish_replaces_a_stale_state(capsys: pytest.CaptureFixture[str]) -> None:
    with SweepProgress("x", mode="json", metric="m") as bar:
        bar.update(done=1, total=None, best=2.0, running=2, deadline_s=None)
        bar.trial(2, "failed", "#2 failed: oom")
        bar.finish(done=3, best=5.0, status="stopped", stop_reason="budget")
    events = _events(capsys.readouterr().err)
    _check_schema(events)
    assert [e["event"] for e in events] == ["start", "progress", "trial", "end"]
    end = events[-1]
    assert (end["done"], end["running"], end["failed"], end["best"]) == (3, 0, 1, 5.0)
    assert end["status"] == "stopped"


def test_sweep_cli_json_with_progress_json(tmp_path: Path) -> None:
    """`autotune sweep --json --progress json` on a short simulated sweep: the outcome on
    stdout, the events on stderr, the last one the final state."""
    path = write_spec(tmp_path, make_spec(**{"budget.max_trials": 2}))
    res = runner.invoke(
        app,
        ["sweep", str(path), "--db", str(tmp_path / "c.db"), "--out", str(tmp_path / "o")]
        + ["--json", "--no-report", "--progress", "json"],
    )
    assert res.exit_code == 0, (res.output, res.stderr)
    outcome = json.loads(res.stdout)
    events = _events(res.stderr)
    _check_schema(events)
    assert events[0]["event"] == "start" and events[-1]["event"] == "end"
    assert events[-1]["done"] == outcome["launched"] == 2 and events[-1]["running"] == 0
    assert events[-1]["status"] == outcome["status"]


def test_sweep_cli_json_without_a_terminal_prints_no_progress(tmp_path: Path) -> None:
    path = write_spec(tmp_path, make_spec(**{"budget.max_trials": 1}))
    res = runner.invoke(
        app,
        ["sweep", str(path), "--db", str(tmp_path / "c.db"), "--out", str(tmp_path / "o")]
        + ["--json", "--no-report"],
    )
    assert res.exit_code == 0, (res.output, res.stderr)
    assert json.loads(res.stdout)["launched"] == 1
    assert "sweep t" not in res.stderr and '"event"' not in res.stderr


def test_kernels_tune_progress_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`kernels tune --progress json` without a GPU: the limits and the tuner are stand-ins
    that log the way kernels_tuning.runner does."""
    from types import SimpleNamespace

    import autotune.cli.kernels as cli_kernels
    from kernels_tuning import runner as krunner

    monkeypatch.setattr(cli_kernels, "_cuda_limits", lambda: SimpleNamespace(arch="sm_90"))

    def fake_tune(items: list[Any], *, log: Any, **_: Any) -> Any:
        results = {}
        for n, item in enumerate(items):
            us = float("inf") if n == 0 else 10.0 + n
            log(f"{item.key():48s} best {us:9.2f} us cfg  evals {n + 3}/{100}  0.{n}s")
            results[item.key()] = SimpleNamespace(best_us=us, evaluations=n + 3)
        log("cross-check: 0 items left for lack of time")
        return SimpleNamespace(
            results=results,
            skipped=[],
            evaluations=sum(r.evaluations for r in results.values()),
            wall_s=1.25,
            files=[tmp_path / "f.json"],
        )

    monkeypatch.setattr(krunner, "tune_and_polish", fake_tune)
    res = runner.invoke(
        app,
        ["kernels", "tune", "--nk", "4096,4096", "--kind", "fp8", "--batch-sizes", "1,16"]
        + ["--no-precompile", "--out", str(tmp_path / "out"), "--json", "--progress", "json"],
    )
    assert res.exit_code == 0, (res.output, res.stderr)
    summary = json.loads(res.stdout)
    events = _events(res.stderr)
    for e in events:
        assert {"event", "time", "elapsed_s", "done", "total", "failed", "evaluations"} <= e.keys()
        assert "eta_s" in e and e["command"] == "kernels tune"
    kinds = [e["event"] for e in events]
    assert kinds == ["start", "item", "item", "log", "end"]
    assert events[1]["best_us"] is None and events[2]["best_us"] == 11.0
    end = events[-1]
    assert (end["done"], end["total"], end["failed"], end["eta_s"]) == (2, 2, 1, 0.0)
    assert end["evaluations"] == summary["evaluations"] == 7 and end["items"] == 2
